"""`make adapt` end to end on a tiny release written by transformers: the corpus takes the release's
tokenizer (its ids on real text) and extends it, the head warm-up trains only what the release
lacked, and the Hugging Face export of the adapted, extended model loads in transformers with the
same logits and a tokenizer that gives the corpus's ids; fine-tuning reads it."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from launch.checkpoints import latest, read_checkpoint
from pipeline import text
from pipeline.schema import read_manifest
from pipeline.vocab import VocabFile
from tests.lazy import transformers
from tests.releases import export_logit_gap, write_release

REPO = Path(__file__).resolve().parents[2]
STEPS, HEAD_STEPS, EXTEND = 20, 2, 9  # make adapt: a tenth of the run is head warm-up
# (the release has 5 [unused] slots: of 9 tokens, 4 are appended)

pytestmark = pytest.mark.slow  # builds a corpus and trains


@pytest.fixture(scope="module")
def adapted(python_docs, botchan_wordpiece, tmp_path_factory):
    root = tmp_path_factory.mktemp("adapt")
    hf_model = write_release(root / "release", "bert_model", botchan_wordpiece, seed=3)
    done = subprocess.run(
        ["make", "adapt", f"RELEASE={root / 'release'}", f"INPUT={python_docs}/library/b*.rst.txt",
         f"OUT={root / 'out'}", f"TRAIN_STEPS={STEPS}", f"EXTEND={EXTEND}",
         "ARGS=--doc_per_file --seq_len 33 --max_predictions 5 --validation_fraction 0.3",
         "TRAIN_ARGS=--strategy cpu --global_batch_size 8 --eval_steps 2 --keep_checkpoints 10"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return root, hf_model, done.stdout


def test_the_corpus_uses_the_release_vocab_extended(adapted, python_docs):
    root, _, _ = adapted
    manifest = read_manifest(str(root / "out" / "corpus"))
    release = manifest.vocab.release
    assert release["name"] == "release" and release["base_size"] == 2000
    added = release["added"]
    assert len(added) == EXTEND and [a["id"] for a in added][-4:] == [2000, 2001, 2002, 2003]
    assert manifest.vocab.size == 2004
    # The corpus tokenizes as the release's own tokenizer would, the added tokens aside.
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(root / "release"))
    vocab = VocabFile.of_corpus(manifest).load()
    lines = text.document_sentences(
        text.normalize_line(
            (python_docs / "library" / "bisect.rst.txt").read_text(encoding="utf-8"), Counter()
        )
    )[:60]
    words = {a["token"] for a in added}
    for line in lines:
        ours = vocab.encode([line])[0]
        if not words & {vocab.tokens[i] for i in ours}:
            assert ours == tokenizer(line, add_special_tokens=False)["input_ids"], line


def test_the_head_warm_up_trained_only_the_fresh_head(adapted):
    root, hf_model, stdout = adapted
    assert (
        f"head warm-up, steps 0-{HEAD_STEPS}:" in stdout
        and "those that started fresh: mlm_transform" in stdout
    )
    key = "model/transformer_1/output/kernel"
    kernel = read_checkpoint(str(root / "out" / "run" / "checkpoints" / f"ckpt-{HEAD_STEPS}"))[0][key]
    np.testing.assert_array_equal(kernel, hf_model.encoder.layer[1].output.dense.weight.detach().numpy().T)
    final = read_checkpoint(latest(str(root / "out" / "run" / "checkpoints")))[0][key]
    assert np.abs(final - kernel).max() > 0  # then everything trained


def test_the_export_loads_in_transformers_with_the_same_logits(adapted, python_docs):
    root, _, _ = adapted
    folder = root / "out" / "export"
    config = json.loads((folder / "config.json").read_text())
    assert config["vocab_size"] == 2048  # 2,004 tokens, the rows padded to a multiple of 128
    assert export_logit_gap(root / "out" / "run", folder, root / "out" / "corpus") <= 1e-4
    manifest = read_manifest(str(root / "out" / "corpus"))
    # Its tokenizer gives the corpus's ids, the added tokens included.
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    vocab = VocabFile.of_corpus(manifest).load()
    lines = (python_docs / "library" / "bisect.rst.txt").read_text(encoding="utf-8").splitlines()[:80]
    lines = [line for line in lines if line.strip()]
    assert [tokenizer(line, add_special_tokens=False)["input_ids"] for line in lines] == vocab.encode(lines)
    assert any(i >= 2000 for ids in vocab.encode(lines) for i in ids)  # the appended tokens are used


def test_fine_tuning_reads_the_export(adapted):
    from launch.finetune.config import FinetuneConfig
    from launch.finetune.pretrained import pretrained
    from model.encoder import build_encoder

    root, _, _ = adapted
    source = pretrained(FinetuneConfig(train="t.jsonl", validation="v.jsonl", output=str(root / "ft"),
                                       init_checkpoint=f"hf:{root / 'out' / 'export'}"))  # fmt: skip
    assert source.bert.vocab_size == 2048 and source.vocab_file.load().size == 2004  # padded rows
    assert source.load(build_encoder(source.bert, 33)) == ["pooler"]
