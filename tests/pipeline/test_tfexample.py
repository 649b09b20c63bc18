"""The tf.train.Example encoder: the reader parses what it writes, and its bytes are protobuf's
deterministic serialization exactly."""

import numpy as np
import pytest
import tensorflow as tf

from pipeline import schema
from pipeline.tfexample import serialize_example, serialize_examples


def arrays(seq_len=7, max_predictions=3):
    lengths = schema.feature_lengths(seq_len, max_predictions)
    out = {name: np.arange(1, n + 1, dtype=np.int64) for name, n in lengths.items()}
    out["masked_lm_weights"] = np.array([1.0, 0.5, 0.0][:max_predictions], np.float32)
    return out


def test_writer_and_reader_agree():
    record = serialize_example(arrays(), 7, 3)
    parsed = tf.io.parse_single_example(record, schema.parsing_spec(7, 3))
    for name, values in arrays().items():
        assert parsed[name].numpy().tolist() == values.tolist()
    assert record == serialize_example(arrays(), 7, 3)  # deterministic bytes


def test_writer_refuses_a_wrong_length():
    bad = arrays()
    bad["segment_ids"] = bad["segment_ids"][:-1]
    with pytest.raises(ValueError, match="feature segment_ids: expected length 7, found 6"):
        serialize_example(bad, 7, 3)


# Each feature's largest value picks its encoder: one byte per value below 2**7, the lookup table
# below 2**21 (token ids), the general varint loop above.
EDGES = {
    2**7: [0, 1, 126, 127, 5, 0, 127],
    2**21: [0, 127, 128, 16383, 16384, 2**21 - 1, 300],
    2**63: [0, 1, 127, 128, 16383, 16384, 2**62],
}


@pytest.mark.parametrize("word_starts", [False, True])
@pytest.mark.parametrize("below", sorted(EDGES))
def test_fast_encoder_matches_protobuf_deterministic_bytes(word_starts, below):
    from tensorflow.core.example import example_pb2

    rng = np.random.default_rng(0)
    n = 17
    rows = {}
    for name, length in schema.feature_lengths(7, 3, word_starts).items():
        # Values across every varint width up to the limit, 0 and its edges included.
        widths = rng.integers(1, below.bit_length() - 1, (n, length))
        rows[name] = rng.integers(0, 2**widths, dtype=np.int64)
    rows["input_ids"][0] = EDGES[below]
    rows["masked_lm_weights"] = rng.random((n, 3)).astype(np.float32)
    got = serialize_examples(rows, 7, 3)
    for r in range(n):
        example = example_pb2.Example()
        for f in schema.features(word_starts):
            target = example.features.feature[f.name]
            values = rows[f.name][r].tolist()
            (target.int64_list if f.dtype == "int64" else target.float_list).value.extend(values)
        assert got[r] == example.SerializeToString(deterministic=True)


def test_fast_encoder_refuses_negative_ints():
    bad = {name: values[None] for name, values in arrays().items()}
    bad["input_ids"] = -bad["input_ids"]
    with pytest.raises(ValueError, match="feature input_ids: negative values"):
        serialize_examples(bad, 7, 3)
