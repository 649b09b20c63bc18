"""Our shards read by google-research/bert's own reader: `run_pretraining.py`'s feature spec
(names, lengths, dtypes), written out here from that file, not from our schema, parses them to
the same tensors our input function gives."""

import numpy as np
import tensorflow as tf

from pipeline.reader.dataset import InputConfig, make_dataset
from pipeline.schema import read_manifest


def run_pretraining_input(files, max_seq_length, max_predictions_per_seq, batch_size):
    """google-research/bert run_pretraining.py's input_fn_builder, eval branch, in TF2 spelling."""
    name_to_features = {
        "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }

    def _decode_record(record):
        example = tf.io.parse_single_example(record, name_to_features)
        return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in example.items()}

    ds = tf.data.TFRecordDataset(files)
    return ds.map(_decode_record).batch(batch_size, drop_remainder=True)


def test_googles_reader_parses_our_shards_to_our_tensors(small_corpus):
    manifest = read_manifest(str(small_corpus))
    files = manifest.files("validation")
    theirs = list(run_pretraining_input(files, 32, 5, batch_size=8))
    ours = list(make_dataset(manifest, "validation", InputConfig(per_replica_batch_size=8, training=False)))
    assert len(theirs) == len(ours) > 0
    for google, (features, labels, weights) in zip(theirs, ours, strict=True):
        for name in ("input_ids", "input_mask", "segment_ids", "masked_lm_positions"):
            np.testing.assert_array_equal(google[name].numpy(), features[name].numpy(), err_msg=name)
            assert google[name].dtype == features[name].dtype == tf.int32
        np.testing.assert_array_equal(google["masked_lm_ids"].numpy(), labels["mlm"].numpy())
        np.testing.assert_array_equal(google["masked_lm_weights"].numpy(), weights["mlm"].numpy())
        assert google["next_sentence_labels"].shape == (8, 1)
