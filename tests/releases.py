"""Small released-model folders in the layouts people download, each written by transformers itself
(model and tokenizer), randomly initialised at tiny odd sizes; what sentence-transformers adds
around the model (modules.json, 1_Pooling/) is written as that library writes it.

    folder = write_release(tmp_path / "r", "sentence_transformers_module", vocab_txt, vocab_size=2000)
    model_dir_of(folder, layout)   # where config.json and the weights are
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.lazy import torch, transformers

H, HEADS, INNER, LAYERS = 12, 3, 29, 2
LAYOUTS = (
    "bert_for_pretraining",
    "bert_for_masked_lm",
    "bert_model",
    "sentence_transformers_root",  # modules.json's Transformer module at the folder's root (all-MiniLM-L6-v2)
    "sentence_transformers_module",  # ... in 0_Transformer/ (newer sentence-transformers saves)
    "electra",
    "pytorch_bin",  # BertForMaskedLM saved as pytorch_model.bin only (older releases)
)
MODEL_CLASS = {
    "bert_for_pretraining": "BertForPreTraining",
    "bert_for_masked_lm": "BertForMaskedLM",
    "bert_model": "BertModel",
    "sentence_transformers_root": "BertModel",
    "sentence_transformers_module": "BertModel",
    "electra": "ElectraForPreTraining",
    "pytorch_bin": "BertForMaskedLM",
}


def random_model(layout: str, vocab_size: int, max_position: int, seed: int):
    """The layout's transformers model, every weight drawn from N(0, 0.2) (LayerNorm scales around 1)."""
    torch.manual_seed(seed)
    kind = transformers.ElectraConfig if layout == "electra" else transformers.BertConfig
    sizes = dict(hidden_size=H, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=INNER)
    config = kind(vocab_size=vocab_size, max_position_embeddings=max_position, embedding_size=H, **sizes)
    return randomized_torch(getattr(transformers, MODEL_CLASS[layout])(config).eval(), seed)


def randomized_torch(model, seed: int, is_scale=lambda name: name.endswith("LayerNorm.weight")):
    """`model` (a transformers model) with every parameter drawn from N(0, 0.2), the LayerNorm
    scales (`is_scale` of a parameter's name) around 1: a weight mapped to the wrong place cannot
    hide behind an initial zero or one."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied weights come along once
            value = rng.normal(0.0, 0.2, tuple(p.shape))
            p.copy_(torch.from_numpy((1.0 + value) if is_scale(name) else value))
    return model


def model_dir_of(folder: Path, layout: str) -> Path:
    return folder / "0_Transformer" if layout == "sentence_transformers_module" else folder


def write_release(folder: Path, layout: str, vocab_txt: Path, *, max_position: int = 40, seed: int = 0,
                  lower_case: bool = True):  # fmt: skip
    """`folder` holding a release of `layout` with the WordPiece vocab `vocab_txt` (its tokenizer
    saved by transformers' BertTokenizerFast); returns the transformers model written."""
    tokens = vocab_txt.read_text(encoding="utf-8").splitlines()
    model = random_model(layout, len(tokens), max_position, seed)
    where = model_dir_of(folder, layout)
    model.save_pretrained(str(where))
    if layout == "pytorch_bin":  # what transformers 4 wrote by default (5 writes safetensors only)
        torch.save(model.state_dict(), str(where / "pytorch_model.bin"))
        (where / "model.safetensors").unlink()
    tokenizer = transformers.BertTokenizerFast(vocab=str(vocab_txt), do_lower_case=lower_case)
    tokenizer.save_pretrained(str(where))
    if layout.startswith("sentence_transformers"):
        path = "" if layout == "sentence_transformers_root" else "0_Transformer"
        modules = [
            {"idx": 0, "name": "0", "path": path, "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        ]
        (folder / "modules.json").write_text(json.dumps(modules, indent=2))
        (folder / "1_Pooling").mkdir()
        (folder / "1_Pooling" / "config.json").write_text(
            json.dumps({"word_embedding_dimension": H, "pooling_mode_mean_tokens": True})
        )
    return model


def export_logit_gap(run_dir: Path, export: Path, corpus: Path) -> float:
    """The largest difference between the masked-LM logits of the run's Keras model and those
    transformers computes from its Hugging Face export, on a batch of the corpus's validation rows
    (one document per row, as Hugging Face sees a row)."""
    from launch.export import restore
    from pipeline.reader.dataset import InputConfig, make_dataset
    from pipeline.schema import read_manifest

    hf_model = transformers.BertForMaskedLM.from_pretrained(str(export)).eval()
    model = restore(str(run_dir))[0]
    rows = make_dataset(read_manifest(str(corpus)), "validation", InputConfig(4, training=False))
    x, _, _ = next(iter(rows))
    features = {k: np.asarray(v) for k, v in x.items()}
    features["document_ids"] = features["input_mask"]
    ours = np.asarray(model(features, training=False)["mlm"])
    with torch.no_grad():
        out = hf_model(
            input_ids=torch.from_numpy(features["input_ids"].astype(np.int64)),
            attention_mask=torch.from_numpy(features["input_mask"].astype(np.int64)),
            token_type_ids=torch.from_numpy(features["segment_ids"].astype(np.int64)),
        )
    positions = features["masked_lm_positions"].astype(np.int64)
    theirs = np.take_along_axis(out.logits.numpy(), positions[:, :, None], axis=1)
    return float(np.abs(ours - theirs).max())
