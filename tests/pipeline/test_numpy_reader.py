"""The reader without TensorFlow (`make_batches`) against tf.data's (`make_dataset`), batch for
batch on real corpora: static and dynamic masks (whole words too), a mixture, the seekable
position after a resume, per-host sharding, evaluation's one pass; a corrupt shard gets the same
line from both; and in a process where `import tensorflow` fails it still gives those batches."""

from __future__ import annotations

import hashlib
import itertools
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from pipeline.reader.batches import make_batches
from pipeline.reader.config import DynamicMasking, InputConfig
from pipeline.reader.dataset import make_dataset
from pipeline.reader.shards import InputError, Pipelines, naming_bad_shards
from pipeline.schema import read_manifest
from tests.conftest import build

REPO = Path(__file__).resolve().parents[2]
ELECTRA_FEATURES = ("input_ids", "input_mask", "segment_ids", "document_ids", "masked_lm_positions",
                    "masked_lm_ids", "masked_lm_weights")  # fmt: skip

pytestmark = pytest.mark.slow  # reads thousands of batches twice


@pytest.fixture(scope="module")
def whole_words(python_docs, botchan_vocab, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("whole_words")
    build(out, "--input", str(python_docs / "library" / "c*.rst.txt"), "--vocab", str(botchan_vocab),
          "--seq_len", "29", "--max_predictions", "4", "--dupe_factor", "1", "--num_shards", "3",
          "--validation_fraction", "0.1", "--whole_word_mask")  # fmt: skip
    return out


def assert_same_batches(manifests, split: str, config: InputConfig, n: int | None, **kwargs) -> int:
    """The first `n` batches (every batch with None) of both readers, array for array; their count."""
    context = kwargs.pop("context", None)
    ours = make_batches(manifests, split, config, input_context=context, **kwargs)
    if context is not None:
        context = tf.distribute.InputContext(context.num_input_pipelines, context.input_pipeline_id, 2)
    theirs = make_dataset(manifests, split, config, input_context=context, **kwargs).as_numpy_iterator()
    count = 0
    for a, b in itertools.zip_longest(itertools.islice(theirs, n), itertools.islice(ours, n)):
        assert a is not None and b is not None, f"one reader ended at batch {count}"
        for part_a, part_b in zip(a, b, strict=True):
            assert part_a.keys() == part_b.keys()
            for key in part_a:
                assert part_b[key].dtype == part_a[key].dtype, (key, part_b[key].dtype)
                np.testing.assert_array_equal(part_b[key], part_a[key], err_msg=f"batch {count}: {key}")
        count += 1
    return count


def test_static_masks_the_same_batches_and_after_a_resume(small_corpus):
    manifest = read_manifest(str(small_corpus))
    config = InputConfig(7, seed=3, shuffle_window=50)
    assert assert_same_batches(manifest, "train", config, 80) == 80  # past the first epoch (~60 batches)
    assert assert_same_batches(manifest, "train", config, 25, skip_batches=173) == 25


def test_per_host_sharding_as_input_context_shards(small_corpus):
    manifest = read_manifest(str(small_corpus))
    for host in (0, 1):
        config = InputConfig(4, seed=1, shuffle_window=64)
        assert_same_batches(manifest, "train", config, 40, context=Pipelines(2, host), skip_batches=11)


@pytest.mark.parametrize("cycle_length", [None, 3])
def test_evaluation_reads_every_record_once_in_the_same_order(small_corpus, cycle_length):
    manifest = read_manifest(str(small_corpus))
    config = InputConfig(5, training=False, **({"cycle_length": cycle_length} if cycle_length else {}))
    count = assert_same_batches(manifest, "train", config, None)
    assert count == manifest.split("train").instances // 5
    assert assert_same_batches(manifest, "validation", InputConfig(3, training=False), None) > 0


def test_dynamic_masks_the_same_and_for_electra(small_corpus, whole_words):
    for corpus in (small_corpus, whole_words):
        manifest = read_manifest(str(corpus))
        config = InputConfig(8, seed=5, dynamic_masking=DynamicMasking.for_corpus(manifest))
        assert_same_batches(manifest, "train", config, 30, skip_batches=7)
    manifest = read_manifest(str(small_corpus))
    electra = InputConfig(6, seed=2, dynamic_masking=DynamicMasking.for_corpus(manifest),
                          features=ELECTRA_FEATURES, targets=("mlm", "rtd"))  # fmt: skip
    assert_same_batches(manifest, "train", electra, 12)


def test_a_mixture_gives_the_same_batches_after_a_resume(mixture_corpora):
    manifests = [read_manifest(str(mixture_corpora / name / "seq33")) for name in ("docs", "more")]
    config = InputConfig(8, seed=2, shuffle_window=100)
    assert_same_batches(manifests, "train", config, 60, rates=[0.3, 0.7])
    assert_same_batches(manifests, "train", config, 30, rates=[0.3, 0.7], skip_batches=611)


def test_a_corrupt_shard_gets_the_same_line_from_both_readers(small_corpus, tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(small_corpus, corpus)
    manifest = read_manifest(str(corpus))
    victim = Path(manifest.files("train")[2])
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    lines = []
    with pytest.raises(InputError) as tf_error:
        with naming_bad_shards(manifest.files("train")):
            for _ in make_dataset(manifest, "train", InputConfig(4, training=False)):
                pass
    lines.append(str(tf_error.value))
    with pytest.raises(InputError) as numpy_error:
        for _ in make_batches(manifest, "train", InputConfig(4, training=False)):
            pass
    lines.append(str(numpy_error.value))
    assert lines[0] == lines[1], lines
    assert lines[0].startswith(f"{victim}: corrupt or truncated shard (corrupted record ")
    assert "\n" not in lines[0]


def digest_of(batch) -> str:
    digest = hashlib.sha256()
    for part in batch:
        for key in sorted(part):
            digest.update(key.encode() + np.ascontiguousarray(part[key]).tobytes())
    digest.update(b".")
    return digest.hexdigest()


def test_where_tensorflow_does_not_import_the_same_batches_are_read(small_corpus, without_tensorflow):
    script = (
        "import hashlib, itertools, sys\n"
        "import numpy as np\n"
        "from pipeline.reader.batches import make_batches\n"
        "from pipeline.reader.config import DynamicMasking, InputConfig\n"
        "from pipeline.schema import read_manifest\n"
        "try:\n"
        "    import tensorflow\n"
        "except ImportError:\n"
        "    pass\n"
        "else:\n"
        "    raise SystemExit('tensorflow imported')\n"
        "manifest = read_manifest(sys.argv[1])\n"
        "masking = DynamicMasking.for_corpus(manifest)\n"
        "for config in (InputConfig(7, seed=3), InputConfig(7, seed=3, dynamic_masking=masking)):\n"
        "    for batch in itertools.islice(make_batches(manifest, 'train', config, skip_batches=5), 3):\n"
        "        digest = hashlib.sha256()\n"
        "        for part in batch:\n"
        "            for key in sorted(part):\n"
        "                digest.update(key.encode() + np.ascontiguousarray(part[key]).tobytes())\n"
        "        digest.update(b'.')\n"
        "        print(digest.hexdigest())\n"
        "assert not {'tensorflow', 'apache_beam'} & set(sys.modules), 'imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(small_corpus)], cwd=REPO, env=without_tensorflow,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = read_manifest(str(small_corpus))
    expected = []
    masking = DynamicMasking.for_corpus(manifest)
    for config in (InputConfig(7, seed=3), InputConfig(7, seed=3, dynamic_masking=masking)):
        batches = make_dataset(manifest, "train", config, skip_batches=5).as_numpy_iterator()
        expected += [digest_of(batch) for batch in itertools.islice(batches, 3)]
    assert done.stdout.split() == expected
