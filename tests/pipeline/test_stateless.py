"""The numpy reader's parts held to TensorFlow's own ops: the stateless random draws, bit for bit,
and the tf.train.Example decoder against `tf.io.parse_example`."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from pipeline.reader import stateless
from pipeline.reader.records import RecordError, Shard, decode_examples

SEEDS = [(0, 0), (3, 11), (-7, 2**40 + 5), (2**62, -1), (123456789, 987654321)]


@pytest.mark.parametrize("seed", SEEDS)
def test_draws_are_tensorflows_bit_for_bit(seed):
    tf_seed = tf.constant(seed, tf.int64)  # as the tf.data reader holds its seeds
    for shape in [(), (1,), (5,), (3, 7), (4, 129)]:  # odd sizes: a Philox block holds 4 words
        np.testing.assert_array_equal(
            stateless.uniform(shape, seed), tf.random.stateless_uniform(shape, tf_seed).numpy()
        )
        for low, high in ((0, 5), (-3, 1000), (0, 2**31 - 1)):
            np.testing.assert_array_equal(
                stateless.uniform_int(shape, seed, low, high),
                tf.random.stateless_uniform(shape, tf_seed, low, high, tf.int32).numpy(),
            )
        np.testing.assert_array_equal(
            stateless.full_int64(shape, seed),
            tf.random.stateless_uniform(shape, tf_seed, None, None, tf.int64).numpy(),
        )
    np.testing.assert_array_equal(
        stateless.split(seed, 3), tf.random.experimental.stateless_split(tf_seed, 3)
    )
    np.testing.assert_array_equal(
        stateless.fold_in(seed, 17),
        tf.random.experimental.stateless_fold_in(tf_seed, tf.constant(17, tf.int64)),
    )
    for n in (0, 1, 2, 9, 1000):
        values = np.arange(n, dtype=np.int64) * 3
        np.testing.assert_array_equal(
            stateless.shuffle(values, seed), tf.random.experimental.stateless_shuffle(values, tf_seed).numpy()
        )


def example(features: dict) -> bytes:
    feature = {}
    for name, values in features.items():
        if isinstance(values[0], float):
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
        else:
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def parse(records: list[bytes], columns: dict) -> dict:
    spec = {
        name: tf.io.FixedLenFeature([length], tf.int64 if dtype == "int64" else tf.float32)
        for name, (dtype, length) in columns.items()
    }
    return {k: v.numpy() for k, v in tf.io.parse_example(records, spec).items()}


def test_the_corpus_records_decode_as_tf_io_parse_example(small_corpus):
    from pipeline.schema import parsing_spec, read_manifest

    manifest = read_manifest(str(small_corpus))
    shard = Shard.open(manifest.files("train")[0])
    records = shard.records(range(len(shard)))
    spec = parsing_spec(manifest.seq_len, manifest.max_predictions)
    columns = {n: ("int64" if f.dtype == tf.int64 else "float32", f.shape[0]) for n, f in spec.items()}
    found, expected = decode_examples(records, columns), parse(records, columns)
    assert found.keys() == expected.keys()
    for name in expected:
        assert found[name].dtype == expected[name].dtype, name
        np.testing.assert_array_equal(found[name], expected[name], err_msg=name)


def test_any_key_order_extra_features_and_large_or_negative_ints():
    """Records as another writer might write them: keys in other orders from record to record, a
    feature the reader does not ask for in some, values of every varint length."""
    big = [0, 1, 127, 128, 2**31, -1, -(2**40), 2**62]
    rows = [
        {"a": big, "b": [0.5, -2.25, 3e8]},
        {"b": [1.0, 2.0, 3.0], "extra": [7], "a": big[::-1]},
        {"extra": [1, 2, 3], "a": list(range(8)), "b": [0.0, 0.0, 0.0]},
    ]
    records = [example(r) for r in rows]
    columns = {"a": ("int64", 8), "b": ("float32", 3)}
    found, expected = decode_examples(records, columns), parse(records, columns)
    for name in columns:
        np.testing.assert_array_equal(found[name], expected[name])
    same_layout = decode_examples(records[:1] * 5, columns)  # the lockstep path
    np.testing.assert_array_equal(same_layout["a"], parse(records[:1] * 5, columns)["a"])


def test_a_missing_or_misshapen_feature_is_one_line():
    records = [example({"a": [1, 2, 3]}), example({"a": [1, 2]})]
    with pytest.raises(RecordError, match=r"^feature a: expected 3 values per record, found another count$"):
        decode_examples(records, {"a": ("int64", 3)})
    with pytest.raises(RecordError, match=r"^feature b: missing from record 0 of the batch$"):
        decode_examples(records[:1], {"b": ("int64", 3)})
    with pytest.raises(RecordError, match=r"^feature a: expected a float32 list, found another kind$"):
        decode_examples(records[:1], {"a": ("float32", 3)})


def test_a_corrupt_or_truncated_shard_is_named_with_its_byte(tmp_path):
    path = tmp_path / "shard.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for n in range(3):
            writer.write(example({"a": [n] * 5}))
    data = path.read_bytes()
    shard = Shard.open(str(path))
    assert len(shard) == 3 and decode_examples(shard.records([2]), {"a": ("int64", 5)})["a"].tolist() == [
        [2] * 5
    ]
    path.write_bytes(data[:-3])
    with pytest.raises(RecordError, match=r"^truncated record at byte \d+: \d+ bytes announced$"):
        Shard.open(str(path))
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(flipped))
    with pytest.raises(
        RecordError, match=r"^corrupted record 1 at byte \d+: its data's checksum does not match$"
    ):
        Shard.open(str(path)).records(range(3))
