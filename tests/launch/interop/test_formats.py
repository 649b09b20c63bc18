"""launch/interop/formats.py: the one table of formats, and each dispatch on it (which format a
source is, which reader a config file gets, which writer an export gets, and why none)."""

from __future__ import annotations

import json

import pytest

from launch.checkpoints import CheckpointError
from launch.interop import formats
from model.config import BertConfig

BERT = BertConfig.preset("tiny", 37)
MODERN = BertConfig.preset("modern-tiny", 37)


@pytest.mark.parametrize(
    "model_type, row",
    [("bert", formats.HF_BERT), ("electra", formats.HF_ELECTRA), ("modernbert", formats.HF_MODERNBERT),
     (None, formats.HF_BERT)],
)  # fmt: skip
def test_a_hugging_face_folder_is_located_by_its_model_type(tmp_path, model_type, row):
    config = {"model_type": model_type} if model_type else {"transformers_version": "5.24.0"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert formats.locate(f"hf:{tmp_path}/") == (row, str(tmp_path))


def test_a_folder_without_a_checkpoint_is_one_line(tmp_path):
    with pytest.raises(CheckpointError, match=rf"^{tmp_path}: no checkpoint found there$"):
        formats.locate(str(tmp_path))
    with pytest.raises(CheckpointError, match=rf"^--init_checkpoint {tmp_path}: no checkpoint found there$"):
        formats.warm_start(None, str(tmp_path))


def test_each_config_file_goes_to_its_formats_reader(tmp_path):
    google = {"vocab_size": 37, "hidden_size": 12, "num_hidden_layers": 3, "num_attention_heads": 3,
              "intermediate_size": 29, "max_position_embeddings": 16}  # fmt: skip
    files = {
        "google.json": google,
        "hf.json": {**google, "model_type": "bert", "hidden_act": "gelu"},
        "electra.json": {**google, "model_type": "electra", "embedding_size": 6},
        "ours.json": json.loads(BERT.to_json()),
    }
    read = {}
    for name, raw in files.items():
        (tmp_path / name).write_text(json.dumps(raw))
        read[name] = formats.read_bert_config(str(tmp_path / name))
    assert read["google.json"].hidden_act == "gelu_approximate"  # Google's gelu is the tanh form
    assert read["hf.json"].hidden_act == "gelu"  # Hugging Face's is the exact one
    assert read["electra.json"].embedding_size == 6 and read["electra.json"].hidden_size == 12
    assert read["ours.json"] == BERT
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(CheckpointError, match=r"bad\.json: not valid JSON"):
        formats.read_bert_config(str(tmp_path / "bad.json"))


def test_export_finds_the_writer_of_each_run_or_says_why_none():
    assert formats.exporter("hf", BERT, "mlm") is formats.HF_BERT
    assert formats.exporter("hf", BERT, "electra") is formats.HF_ELECTRA
    assert formats.exporter("hf", MODERN, "mlm") is formats.HF_MODERNBERT
    assert formats.exporter("google", BERT, "mlm") is formats.GOOGLE
    assert formats.exporter("google", MODERN, "mlm") == (
        "exports as hf (ModernBertForMaskedLM) or keras; google-research/bert has no such block"
    )
    assert formats.exporter("google", BERT, "electra") == (
        "exports as hf (ElectraForPreTraining and ElectraForMaskedLM) or keras; google-research/bert's "
        "format has no place for its generator"
    )
    assert (
        formats.exporter("hf", MODERN, "electra")
        == "exports as keras; transformers has no ModernBERT ELECTRA"
    )
