"""`launch.adapt` across a vocabulary gap (issue 58): a tiny English release adapted to Chinese text,
the characters used 20 times added (`--extend_min_count`), their rows random (`--extension_init
random`) and learned first under the frozen encoder (`--embeddings_first`); the export loads in
transformers with the same logits and a tokenizer that gives the corpus's ids on Chinese."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from launch.checkpoints import latest, read_checkpoint
from pipeline.schema import read_manifest
from pipeline.vocab import VocabFile
from tests.lazy import transformers
from tests.releases import export_logit_gap, write_release

REPO = Path(__file__).resolve().parents[2]
STEPS, HEAD_STEPS, MIN_COUNT = 20, 2, 20
EMBEDDINGS = "model/token_embedding/embeddings"
BODY = "model/transformer_1/output/kernel"

pytestmark = pytest.mark.slow  # builds a corpus and trains


@pytest.fixture(scope="module")
def adapted(zh_sample, botchan_wordpiece, tmp_path_factory):
    root = tmp_path_factory.mktemp("adapt_zh")
    hf_model = write_release(root / "release", "bert_model", botchan_wordpiece, seed=3)
    done = subprocess.run(
        [sys.executable, "-m", "launch.adapt", "--release", str(root / "release"),
         "--input", f"{zh_sample}/*.txt", "--output", str(root / "out"), "--train_steps", str(STEPS),
         "--extend_min_count", str(MIN_COUNT), "--extension_init", "random", "--embeddings_first",
         "--corpus_args", "--seq_len 33 --max_predictions 5 --validation_fraction 0.3",
         "--train_args", "--strategy cpu --global_batch_size 8 --eval_steps 2 --keep_checkpoints 10"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return root, hf_model, done.stdout


def test_the_script_comes_in_with_random_rows(adapted, zh_sample):
    root, hf_model, stdout = adapted
    manifest = read_manifest(str(root / "out" / "corpus"))
    added = manifest.vocab.release["added"]
    unk = manifest.vocab.special_ids["unk"]
    unknown = [a for a in added if a["pieces"] == [unk]]
    counts = Counter(
        (zh_sample / "pos.txt").read_text(encoding="utf-8")
        + (zh_sample / "neg.txt").read_text(encoding="utf-8")
    )
    assert len(unknown) > 100 and all(counts[a["token"]] >= MIN_COUNT for a in unknown)
    assert f"{len(unknown)} it knows only as [UNK] start as random rows at its rows' mean norm" in stdout
    # The embeddings-first warm-up: the token rows moved, the encoder did not.
    assert f"head warm-up, steps 0-{HEAD_STEPS}:" in stdout and "and the token embeddings: " in stdout
    warmed = read_checkpoint(str(root / "out" / "run" / "checkpoints" / f"ckpt-{HEAD_STEPS}"))[0]
    released = hf_model.embeddings.word_embeddings.weight.detach().numpy()
    np.testing.assert_array_equal(
        warmed[BODY], hf_model.encoder.layer[1].output.dense.weight.detach().numpy().T
    )
    # Of the token rows, only the added ones learned: the release's own stayed bit for bit, though
    # the tied MLM output sends every row a gradient.
    ids = [a["id"] for a in added]
    assert f"only the {len(added):,} rows of the tokens the vocab extension added learn" in stdout
    own = np.setdiff1d(np.arange(len(released)), ids)
    np.testing.assert_array_equal(warmed[EMBEDDINGS][own], released[own])
    new = warmed[EMBEDDINGS][[a["id"] for a in unknown]]
    assert np.linalg.norm(new - new[0], axis=1)[1:].min() > 0  # each its own row, none the [UNK] row
    assert np.linalg.norm(new, axis=1).std() > 1e-3  # they started at one norm, and learned
    final = read_checkpoint(latest(str(root / "out" / "run" / "checkpoints")))[0]
    assert np.abs(final[BODY] - warmed[BODY]).max() > 0  # then everything trained


def test_the_export_reads_chinese_as_the_corpus_did(adapted, zh_sample):
    root, _, _ = adapted
    folder = root / "out" / "export"
    assert export_logit_gap(root / "out" / "run", folder, root / "out" / "corpus") <= 1e-4
    manifest = read_manifest(str(root / "out" / "corpus"))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    vocab = VocabFile.of_corpus(manifest).load()
    lines = [
        line for line in (zh_sample / "neg.txt").read_text(encoding="utf-8").splitlines()[:60] if line.strip()
    ]
    ids = vocab.encode(lines)
    assert [tokenizer(line, add_special_tokens=False)["input_ids"] for line in lines] == ids
    assert any(i >= manifest.vocab.release["base_size"] for row in ids for i in row)  # the appended ones
