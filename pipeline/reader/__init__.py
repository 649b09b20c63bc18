"""The tf.data reader: a built corpus's shards -> static-shape batches that `model.fit` consumes
(`dataset.py`), in a seeded order any position of which is arithmetic (`order.py`), optionally
masked afresh on every read (`dynamic_masking.py`), from shards checked against the manifest
(`shards.py`). The corpus's writer is the rest of `pipeline/`."""
