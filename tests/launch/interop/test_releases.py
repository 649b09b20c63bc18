"""A released model's folder is one argument: every layout people download (written by transformers
at tiny odd sizes, `tests/releases.py`) gives its config, vocab and weights, with what starts fresh
listed once; a pytorch_model.bin-only folder is a one-line error; a vocab extended from the
release's grows the token rows, each new one exactly the mean of its pieces' rows."""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest

from common.errors import ConfigError
from launch.checkpoints import CheckpointError
from launch.interop.formats import config_beside, read_bert_config, warm_start
from launch.interop.grow import grow_into
from model.encoder import weights_by_path
from model.masked_lm import build_pretraining_model
from pipeline import text
from pipeline.vocab import VocabError
from pipeline.vocab.extension import base_pieces, extend_wordpiece
from pipeline.vocab.release import read_release
from tests.lazy import transformers
from tests.releases import model_dir_of, write_release

T, P = 33, 5
# What each layout lacks of a BERT pretraining model with an NSP head (it starts fresh).
FRESH = {
    "bert_for_pretraining": [],
    "bert_for_masked_lm": ["pooler", "nsp_logits"],
    "bert_model": ["mlm_transform", "mlm_norm", "mlm_bias", "nsp_logits"],
    "sentence_transformers_root": ["mlm_transform", "mlm_norm", "mlm_bias", "nsp_logits"],
    "sentence_transformers_module": ["mlm_transform", "mlm_norm", "mlm_bias", "nsp_logits"],
}


def bert_of(model):
    return model.bert if hasattr(model, "bert") else model


@pytest.mark.parametrize("layout", list(FRESH))
def test_each_layout_gives_its_config_vocab_and_weights(layout, botchan_wordpiece, tmp_path, capsys):
    folder = tmp_path / layout
    hf_model = write_release(folder, layout, botchan_wordpiece, seed=len(layout))
    source = f"hf:{folder}"
    config = config_beside(source)
    assert config == f"{model_dir_of(folder, layout)}/config.json"
    bert = read_bert_config(config)
    assert (bert.hidden_size, bert.num_layers, bert.intermediate_size) == (12, 2, 29)

    release = read_release(str(folder))
    # transformers 5 saves BERT's tokenizer as tokenizer.json alone: read as the vocab.txt it holds
    assert release.vocab_file.data == botchan_wordpiece.read_bytes() and release.vocab_file.lower_case
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir_of(folder, layout)))
    line = "It was Botchan's turn: \"I'll never go back to Tokyo,\" said he."
    assert (
        release.vocab_file.load().encode([line])[0] == tokenizer(line, add_special_tokens=False)["input_ids"]
    )

    model = build_pretraining_model(bert, T, P, next_sentence=True)
    fresh = warm_start(model, source)
    assert (
        list(dict.fromkeys(p.split("/")[0] for p in fresh if weights_by_path(model)[p].trainable))
        == FRESH[layout]
    )
    printed = capsys.readouterr().out
    assert printed.count("start fresh") == (1 if FRESH[layout] else 0)
    if FRESH[layout]:
        assert "mlm_norm (12, 12)" in printed or "pooler (12x12, 12)" in printed
    expected = bert_of(hf_model).encoder.layer[1].output.dense.weight.detach().numpy().T
    np.testing.assert_array_equal(model.get_layer("transformer_1").output_dense.kernel.numpy(), expected)
    if "mlm_bias" not in FRESH[layout]:  # the release's MLM head is kept
        np.testing.assert_array_equal(
            model.get_layer("mlm_bias").bias.numpy(), hf_model.cls.predictions.bias.detach().numpy()
        )


def test_a_pytorch_bin_only_folder_is_one_line_saying_how_to_convert(botchan_wordpiece, tmp_path):
    write_release(tmp_path / "old", "pytorch_bin", botchan_wordpiece)
    bert = read_bert_config(config_beside(f"hf:{tmp_path / 'old'}"))
    model = build_pretraining_model(bert, T, P, next_sentence=False)
    with pytest.raises(CheckpointError) as caught:
        warm_start(model, f"hf:{tmp_path / 'old'}")
    message = str(caught.value)
    assert "\n" not in message and "only pytorch_model.bin" in message
    assert "transformers.BertForMaskedLM.from_pretrained(DIR).save_pretrained(DIR)" in message


def test_lower_casing_and_special_tokens_come_from_tokenizer_config(botchan_wordpiece, tmp_path):
    write_release(tmp_path / "cased", "bert_model", botchan_wordpiece, lower_case=False)
    assert read_release(str(tmp_path / "cased")).vocab_file.lower_case is False
    assert read_release(str(tmp_path / "cased"), lower_case=True).vocab_file.lower_case is True
    write_release(tmp_path / "odd", "electra", botchan_wordpiece)
    config = tmp_path / "odd" / "tokenizer_config.json"
    config.write_text(config.read_text().replace('"[CLS]"', '"<s>"'))
    with pytest.raises(
        VocabError, match=r"tokenizer_config.json: cls_token '<s>', but tokenizer.json has '\[CLS\]'"
    ):
        read_release(str(tmp_path / "odd"))


def test_extended_rows_are_the_mean_of_their_pieces(botchan, botchan_wordpiece, python_docs, tmp_path):
    """Python docs' words added to a Botchan release: the 5 [unused] slots filled first, the rest
    appended; every new row of the word embeddings and the MLM bias is the mean of the release's
    rows for the pieces the release's own tokenizer cuts the token into; every other row is the
    release's."""
    hf_model = write_release(tmp_path / "r", "bert_for_masked_lm", botchan_wordpiece, seed=11)
    release = read_release(str(tmp_path / "r"))
    docs = (python_docs / "library" / "functions.rst.txt").read_text(encoding="utf-8")
    sentences = text.document_sentences(text.normalize_line(docs, Counter()))
    extended = extend_wordpiece(release.vocab_file, sentences, 13)
    added = extended.release["added"]
    tokens = release.vocab_file.load().tokens
    slots = [i for i, t in enumerate(tokens) if t.startswith("[unused")]
    assert [a["id"] for a in added] == slots + list(range(len(tokens), len(tokens) + 8))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "r"))
    for token in added:  # the pieces are the release tokenizer's own
        if not token["token"].startswith("##"):
            assert token["pieces"] == tokenizer(token["token"], add_special_tokens=False)["input_ids"]
    assert base_pieces("##xq", {"##x": 7, "##q": 9}, unk=1) == [7, 9]

    bert = read_bert_config(config_beside(f"hf:{tmp_path / 'r'}"))
    at_release = build_pretraining_model(bert, T, P, next_sentence=False)
    warm_start(at_release, f"hf:{tmp_path / 'r'}")
    grown_bert = dataclasses.replace(bert, vocab_size=extended.load().size)
    model = build_pretraining_model(grown_bert, T, P, next_sentence=False)
    assert grow_into(model, at_release, added) == ["token_embedding/embeddings", "mlm_bias/bias"]
    embeddings = hf_model.bert.embeddings.word_embeddings.weight.detach().numpy()
    bias = hf_model.cls.predictions.bias.detach().numpy()
    grown_embeddings = model.get_layer("token_embedding").embeddings.numpy()
    grown_bias = model.get_layer("mlm_bias").bias.numpy()
    new = {a["id"]: a["pieces"] for a in added}
    for token_id in range(len(grown_bias)):
        if token_id in new:
            np.testing.assert_allclose(
                grown_embeddings[token_id], embeddings[new[token_id]].mean(0), rtol=1e-6
            )
            np.testing.assert_allclose(grown_bias[token_id], bias[new[token_id]].mean(0), rtol=1e-6)
        else:
            np.testing.assert_array_equal(grown_embeddings[token_id], embeddings[token_id])
            assert grown_bias[token_id] == bias[token_id]
    np.testing.assert_array_equal(
        model.get_layer("transformer_0").output_dense.kernel.numpy(),
        at_release.get_layer("transformer_0").output_dense.kernel.numpy(),
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--extend_vocab", "9"], "--extend_vocab extends a given vocab"),
        (["--vocab", "tokenizer.json", "--extend_vocab", "9"], "--extend_vocab extends a given vocab"),
        (["--vocab", "v.txt", "--extend_vocab", "-1"], "--extend_vocab: expected >= 0, found -1"),
    ],
)
def test_extend_vocab_mistakes_are_one_line(flags, message):
    from pipeline.build_corpus import parse_args

    argv = ["--input", "x.txt", "--output", "out", *flags]
    if "--vocab" not in flags:
        argv += ["--vocab_size", "100"]
    with pytest.raises(ConfigError, match=message):
        parse_args(argv)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--head_warmup_steps", "10"], "--head_warmup_steps needs --init_checkpoint"),
        (["--init_checkpoint", "hf:r", "--head_warmup_steps", "15"], "expected a multiple of --log_every 10"),
        (["--init_checkpoint", "hf:r", "--head_warmup_steps", "50"], "below --train_steps 50"),
        (["--fresh_lr_multiplier", "10"], "with --init_checkpoint .*found no --init_checkpoint"),
        (
            ["--init_checkpoint", "hf:r", "--fresh_lr_multiplier", "10", "--optimizer", "lamb"],
            "found hf:r, lamb",
        ),
        (
            ["--init_checkpoint", "hf:r", "--fresh_lr_multiplier", "-3"],
            "--fresh_lr_multiplier -3.0: expected > 0",
        ),
    ],
)
def test_head_warmup_mistakes_are_one_line(flags, message):
    from launch.config import TrainConfig

    base = ["--data", "c", "--model_dir", "m", "--train_steps", "50", "--log_every", "10"]
    with pytest.raises(ConfigError, match=message):
        TrainConfig.from_args([*base, *flags])


def test_head_warmup_splits_the_phase_and_the_data_runs_on():
    from launch.sources import Phase, split_head_warmup

    phases = [Phase(128, 0, 90), Phase(512, 90, 100)]
    assert split_head_warmup(phases, 0) == phases
    first, second, third = split_head_warmup(phases, 30)
    assert (first.start, first.end, first.head_only, first.first_streamed) == (0, 30, True, 0)
    assert (second.start, second.end, second.head_only, second.first_streamed) == (30, 90, False, 0)
    assert third == phases[1]


def test_a_google_release_folder_is_read_by_its_name(botchan_wordpiece, tmp_path):
    for name, lower in (("uncased_L-2_H-12_A-3", True), ("cased_L-2_H-12_A-3", False)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "vocab.txt").write_bytes(botchan_wordpiece.read_bytes())
        release = read_release(str(folder))
        assert (release.name, release.vocab_file.kind, release.vocab_file.lower_case) == (
            name,
            "wordpiece",
            lower,
        )


def test_a_sentencepiece_vocab_is_extended_by_appending_used_pieces(botchan_vocab, python_docs):
    from pipeline.vocab import VocabFile
    from pipeline.vocab.extension import extend_vocab

    base = VocabFile("sentencepiece", botchan_vocab.read_bytes())
    docs = (python_docs / "library" / "functions.rst.txt").read_text(encoding="utf-8")
    sentences = text.document_sentences(text.normalize_line(docs, Counter()))
    extended = extend_vocab(base, sentences, 17)
    added, size = extended.release["added"], base.load().size
    assert [a["id"] for a in added] == list(range(size, size + 17))
    vocab = extended.load()
    assert vocab.size == size + 17 and vocab.special_ids == base.load().special_ids
    ids = [i for row in vocab.encode(sentences) for i in row]
    assert all(i in ids for i in range(size, size + 17))  # each added piece is used on the domain's text
    assert [vocab.processor.id_to_piece(a["id"]) for a in added] == [a["token"] for a in added]


def test_a_sentence_transformers_release_is_pooled_as_it_serves(botchan_wordpiece, tmp_path):
    """--pooling auto on a sentence-transformers folder: its Pooling module's mode (all-MiniLM-L6-v2
    was trained and is served mean-pooled, though its folder carries a pooler's weights); any other
    mode, or a folder without modules.json, falls back to bertbeam's own rule."""
    import json

    from launch.finetune.classify.run import ClassifyTask
    from launch.finetune.config import FinetuneConfig
    from launch.finetune.pretrained import pretrained
    from model.encoder import build_encoder
    from pipeline.vocab.release import served_pooling

    folder = tmp_path / "st"
    write_release(folder, "sentence_transformers_root", botchan_wordpiece)
    write_release(tmp_path / "plain", "bert_model", botchan_wordpiece)
    assert served_pooling(str(folder)) == "mean" and served_pooling(str(tmp_path / "plain")) is None

    def auto_pooling(release) -> str:
        config = FinetuneConfig(train="t.jsonl", validation="v.jsonl", output=str(tmp_path / "ft"),
                                init_checkpoint=f"hf:{release}")  # fmt: skip
        source = pretrained(config)
        task, encoder = ClassifyTask(config, source), build_encoder(source.bert, 17)
        task.names = ["a", "b"]
        task.build(encoder, source.load(encoder))
        return task.pooling

    assert auto_pooling(folder) == "mean"  # the pooler's weights are there: bertbeam's rule says cls
    assert auto_pooling(tmp_path / "plain") == "cls"  # BertModel has a (trained) pooler
    pooling = folder / "1_Pooling" / "config.json"
    cases = [  # the Pooling module's modes -> what it serves as bertbeam names it -> auto's choice
        ({"pooling_mode_cls_token": True}, "cls", "cls"),
        ({"pooling_mode_max_tokens": True}, None, "cls"),  # not one bertbeam has: its own rule
        ({"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": True}, None, "cls"),
    ]
    for modes, served, auto in cases:
        pooling.write_text(json.dumps({"word_embedding_dimension": 12, **modes}))
        assert (served_pooling(str(folder)), auto_pooling(folder)) == (served, auto)
