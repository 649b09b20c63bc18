"""ELECTRA and Hugging Face, both ways, checked with transformers' own PyTorch ELECTRA at odd sizes
(discriminator hidden 12, 3 heads; generator 1/3: hidden 4, one head; embeddings 12, or 10 for
an ELECTRA-Small-like discriminator that projects them): our export loads into
`ElectraForPreTraining` and `ElectraForMaskedLM` with no missing or unexpected weights and gives
the same logits (max abs difference <= 1e-4, float32) on real Botchan rows; a transformers
discriminator loads into ours (an ELECTRA model, and a bare encoder for fine-tuning) and agrees
the same way."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from launch.interop.formats import read_bert_config, warm_start
from launch.interop.hf_electra import load_hf_electra, save_hf_electra
from model.config import BertConfig
from model.electra import generator_config
from model.encoder import build_encoder, encoder_from
from model.pretraining import Objective
from pipeline import text
from pipeline.masking import MaskingTables, mask_rows
from pipeline.vocab import VocabFile
from tests.launch.interop.test_hf_bert import load_quietly, randomized
from tests.lazy import torch, transformers
from tests.releases import randomized_torch

H, HEADS, INNER, LAYERS, MAXPOS, T, P = 12, 3, 29, 2, 40, 33, 5
TOLERANCE = 1e-4
ELECTRA = Objective("electra", generator_size=1 / 3)


@pytest.fixture(scope="module")
def rows(botchan, wordpiece) -> dict[str, np.ndarray]:
    """Real rows: Botchan sentences as [CLS] A [SEP], padded to T (lengths vary, so padding too),
    with BERT's masking and the originals."""
    vocab = wordpiece.load()
    ids = vocab.special_ids
    normalized = text.normalize_line(botchan.read_text(encoding="utf-8"), Counter())
    sentences = [s for s in vocab.encode(text.document_sentences(normalized)[300:320]) if s][:11]
    tokens = np.full((len(sentences), T), ids["pad"])
    for r, sentence in enumerate(sentences):
        row = [ids["cls"], *sentence[: T - 2], ids["sep"]]
        tokens[r, : len(row)] = row
    masked = mask_rows(
        tokens, tables=MaskingTables.from_vocab(vocab), max_predictions=P, masked_lm_prob=0.15,
        whole_word=False, rng=np.random.default_rng(3),
    )  # fmt: skip
    mask = (tokens != ids["pad"]).astype(np.int32)
    assert mask.sum(axis=1).min() < T  # some rows are padded
    return {
        "original": tokens.astype(np.int32),
        "input_ids": masked["input_ids"].astype(np.int32),
        "input_mask": mask,
        "segment_ids": np.zeros_like(mask),
        "document_ids": mask,
        "masked_lm_positions": masked["masked_lm_positions"].astype(np.int32),
        "masked_lm_ids": masked["masked_lm_ids"].astype(np.int32),
        "masked_lm_weights": masked["masked_lm_weights"].astype(np.float32),
    }


def inputs(rows: dict) -> dict:
    return {k: v for k, v in rows.items() if k != "original"}


def torch_forward(hf_model, input_ids, mask):
    with torch.no_grad():
        return hf_model(
            input_ids=torch.from_numpy(input_ids.astype(np.int64)),
            attention_mask=torch.from_numpy(mask.astype(np.int64)),
            token_type_ids=torch.zeros(input_ids.shape, dtype=torch.int64),
        )


def electra_model(vocab: VocabFile, embedding_size=None, seed=0):
    tables = MaskingTables.from_vocab(vocab.load())
    bert = BertConfig(vocab.load().size, hidden_size=H, num_layers=LAYERS, num_heads=HEADS,
                      intermediate_size=INNER, max_position=MAXPOS,
                      embedding_size=embedding_size)  # fmt: skip
    model = ELECTRA.build(bert, T, P, excluded_ids=np.flatnonzero(tables.is_special).tolist(), seed=seed)
    return bert, model


@pytest.mark.parametrize("embedding_size", [None, 10])
def test_export_loads_in_transformers_with_the_same_logits(wordpiece, rows, tmp_path, embedding_size):
    bert, model = electra_model(wordpiece, embedding_size)
    randomized(model, seed=4)
    generator = generator_config(bert, ELECTRA.generator_size)
    save_hf_electra(model, bert, generator, wordpiece, str(tmp_path / "hf"))
    out = model(inputs(rows), training=False)
    shown = out["rtd"].numpy()[..., 1].astype(np.int32)
    mask = rows["input_mask"]

    disc, info, warnings = load_quietly(transformers.ElectraForPreTraining, tmp_path / "hf" / "discriminator")
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set(), info
    assert not info["mismatched_keys"] and not warnings, (info, warnings)
    assert (disc.config.embedding_size, disc.config.hidden_size) == (embedding_size or H, H)
    theirs = torch_forward(disc, shown, mask).logits.numpy()  # (B, T)
    ours = out["rtd"].numpy()[..., 0]
    real = mask > 0
    assert np.abs(ours[real]).max() > 0.3  # not a comparison of near-zero logits
    assert np.abs(ours[real] - theirs[real]).max() <= TOLERANCE

    gen, info, warnings = load_quietly(transformers.ElectraForMaskedLM, tmp_path / "hf" / "generator")
    assert info["missing_keys"] == set() and info["unexpected_keys"] == set(), info
    assert not warnings, warnings
    assert (gen.config.hidden_size, gen.config.num_attention_heads, gen.config.intermediate_size) == (
        4,
        1,
        10,
    )
    logits = torch_forward(gen, rows["input_ids"], mask).logits.numpy()  # the stored 80/10/10 row
    theirs = np.take_along_axis(logits, rows["masked_lm_positions"][:, :, None].astype(np.int64), axis=1)
    valid = rows["masked_lm_weights"] > 0
    assert np.abs(out["mlm"].numpy()[valid] - theirs[valid]).max() <= TOLERANCE
    # The two folders share the embeddings, as the networks do; the tokenizer travels with both.
    assert (tmp_path / "hf" / "generator" / "tokenizer.json").exists()
    config = json.loads((tmp_path / "hf" / "generator" / "config.json").read_text())
    assert config["architectures"] == ["ElectraForMaskedLM"] and config["embedding_size"] == (
        embedding_size or H
    )


def random_discriminator(vocab_size: int, embedding_size: int, seed: int):
    torch.manual_seed(seed)
    config = transformers.ElectraConfig(
        vocab_size=vocab_size, embedding_size=embedding_size, hidden_size=H, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, intermediate_size=INNER, max_position_embeddings=MAXPOS,
    )  # fmt: skip
    return randomized_torch(transformers.ElectraForPreTraining(config).eval(), seed)


def test_a_transformers_discriminator_loads_into_ours_with_the_same_outputs(wordpiece, rows, tmp_path):
    vocab_size = wordpiece.load().size
    hf_model = random_discriminator(vocab_size, embedding_size=10, seed=5)  # ELECTRA-Small's layout
    hf_model.save_pretrained(str(tmp_path / "hf"))
    bert = read_bert_config(str(tmp_path / "hf" / "config.json"))
    assert (bert.embedding_size, bert.hidden_size) == (10, H)
    original, mask = rows["original"], rows["input_mask"]
    real = mask > 0
    with torch.no_grad():
        out = hf_model(input_ids=torch.from_numpy(original.astype(np.int64)),
                       attention_mask=torch.from_numpy(mask.astype(np.int64)),
                       output_hidden_states=True)  # fmt: skip
    hidden, logits = out.hidden_states[-1].numpy(), out.logits.numpy()

    # For fine-tuning: a bare encoder; the pooler, which ELECTRA has not, starts fresh.
    encoder = build_encoder(bert, T)
    assert warm_start(encoder, f"hf:{tmp_path / 'hf'}") == ["pooler/kernel", "pooler/bias"]
    features = {
        "input_ids": original,
        "input_mask": mask,
        "segment_ids": np.zeros_like(mask),
        "document_ids": mask,
    }
    sequence = encoder(features)["sequence_output"].numpy()
    assert np.abs(sequence[real] - hidden[real]).max() <= TOLERANCE

    # For continued ELECTRA pretraining: the discriminator and its head; the generator starts fresh.
    _, model = electra_model(wordpiece, embedding_size=10)
    fresh = warm_start(model, f"hf:{tmp_path / 'hf'}")
    assert fresh and all(name.startswith("generator_") for name in fresh)
    ours = model.get_layer("rtd_logits")(
        model.get_layer("rtd_transform")(encoder_from(model)(features)["sequence_output"])
    )
    assert np.abs(ours.numpy()[..., 0][real] - logits[real]).max() <= TOLERANCE
    assert np.abs(logits[real]).max() > 0.3


def test_a_missing_tensor_is_one_line_naming_it(wordpiece, tmp_path):
    from safetensors.numpy import load_file, save_file

    hf_model = random_discriminator(wordpiece.load().size, embedding_size=H, seed=6)
    hf_model.save_pretrained(str(tmp_path / "hf"))
    path = tmp_path / "hf" / "model.safetensors"
    tensors = load_file(str(path))
    del tensors["electra.encoder.layer.1.output.dense.weight"]
    save_file(tensors, str(path), metadata={"format": "pt"})
    encoder = build_encoder(read_bert_config(str(tmp_path / "hf" / "config.json")), T)
    with pytest.raises(Exception) as error:
        load_hf_electra(encoder, str(tmp_path / "hf"))
    message = str(error.value)
    assert "\n" not in message and "electra.encoder.layer.1.output.dense.weight" in message
