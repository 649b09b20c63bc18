"""The reader without TensorFlow: a corpus split -> the tf.data reader's batches, as numpy arrays.

    batches = make_batches(manifest, "train", InputConfig(per_replica_batch_size=32, seed=1))
    features, labels, weights = next(batches)

`make_batches` takes what `dataset.make_dataset` takes and yields what it yields, in the same
order (tests/pipeline/test_reader_numpy.py compares the two batch for batch): the seekable
training order (`order_numpy.py`), a mixture's corpus per record, dynamic masks
(`masks_numpy.py`), each input pipeline's share of the shards, and every record once in file
order for evaluation. It is what Keras on JAX trains from, on a machine that has no TensorFlow
(the GPU image this project is lent), and on one that has it.

Its parts, chosen by measurement (docs/training.md, "Reading the shards without TensorFlow"):
TFRecord framing and `tf.train.Example` decoding in numpy (`records.py`), TensorFlow's stateless
random ops in numpy (`stateless.py`), no new dependency.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from pipeline import schema
from pipeline.reader import masks_numpy, order_numpy
from pipeline.reader.config import InputConfig, check_request
from pipeline.reader.records import RecordError, Shard, decode_examples
from pipeline.reader.shards import check_shards, corrupt_shard, shard_files
from pipeline.schema import Manifest

Batch = tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]


def make_batches(
    manifest: Manifest | Sequence[Manifest],
    split: str,
    config: InputConfig,
    *,
    rates: Sequence[float] | None = None,
    input_context=None,
    skip_batches: int = 0,
    on_batch: Callable[[int, dict], None] | None = None,
) -> Iterator[Batch]:
    """`dataset.make_dataset`'s batches as (features, labels, sample_weights) of numpy arrays:
    endless for training, every record once for evaluation. `input_context`: a
    `tf.distribute.InputContext` or `shards.Pipelines`. `on_batch(index, parsed_batch)`, if given,
    sees every batch in order (a debugging trace). Shards are checked against the manifest before
    the first batch; a record whose bytes do not read is an `InputError` naming its shard."""
    manifests = [manifest] if isinstance(manifest, Manifest) else list(manifest)
    first = manifests[0]
    batch_size = config.per_replica_batch_size
    check_request(manifests, config, rates, skip_batches)
    features, targets = config.names(first)
    lengths = schema.feature_lengths(first.seq_len, first.max_predictions, first.word_starts)
    columns = {f.name: (f.dtype, lengths[f.name]) for f in schema.features(first.word_starts)}
    corpora = [_Corpus.open(m, split, input_context) for m in manifests]
    start = skip_batches * batch_size
    if not config.training:
        records = _file_order(corpora[0], config.cycle_length)
    elif len(corpora) == 1:
        records = corpora[0].stream(config.seed, start, config.shuffle_window)
    else:
        starts = order_numpy.mixture_starts(rates, config.seed, start)
        streams = [c.stream(config.seed + i, starts[i], config.shuffle_window) for i, c in enumerate(corpora)]
        records = _mixed(streams, order_numpy.corpus_choices(rates, config.seed, start))
    return _batches(records, batch_size, columns, skip_batches, config, first, features, targets, on_batch)


def _batches(records, batch_size, columns, index, config, manifest, features, targets, on_batch):
    masking, seed = config.dynamic_masking, config.seed
    for chunk in _chunks(records, batch_size):  # a partial last batch is dropped: static shapes
        batch = _decode(chunk, columns)
        if masking is not None:
            batch = masks_numpy.remask(batch, masking, manifest.max_predictions, seed=(seed, index))
        if on_batch is not None:
            on_batch(index, batch)
        yield _to_keras(batch, features, targets)
        index += 1


class _Corpus:
    """One corpus's shards for this input pipeline, opened (framing walked once)."""

    def __init__(self, manifest: Manifest, paths: list[str], shards: list[Shard]):
        self.manifest, self.paths, self.shards = manifest, paths, shards

    @classmethod
    def open(cls, manifest: Manifest, split: str, input_context) -> _Corpus:
        paths = shard_files(manifest, split, input_context)
        check_shards(manifest, split, paths)
        shards = []
        for path in paths:
            try:
                shards.append(Shard.open(path))
            except RecordError as e:
                raise corrupt_shard(path, str(e)) from None
        return cls(manifest, paths, shards)

    def stream(self, seed: int, start: int, window: int) -> Iterator[tuple[Shard, int]]:
        """(shard, record index) of every record from `start` on, in the seekable order."""
        counts = [len(shard) for shard in self.shards]
        for refs in order_numpy.seekable_records(counts, seed, start, window, where=self.manifest.folder):
            for file, record in refs.tolist():
                yield self.shards[file], record


def _file_order(corpus: _Corpus, cycle_length: int) -> Iterator[tuple[Shard, int]]:
    """Every record once, as tf.data's deterministic interleave reads the files: `cycle_length`
    slots, one record from each in turn. A slot whose file has ended is found so on its next
    turn, emptied, and the turn passes on; an empty slot's turn opens the next file and reads
    from it (tf.data's InterleaveDataset, cycle by cycle)."""
    waiting = list(corpus.shards)
    slots: list[list | None] = [None] * min(cycle_length, len(waiting))
    i = 0
    while waiting or any(slot is not None for slot in slots):
        slot = slots[i]
        if slot is None and waiting:
            slot = slots[i] = [waiting.pop(0), 0]
        if slot is not None:
            shard, at = slot
            if at < len(shard):
                yield shard, at
                slot[1] += 1
            else:
                slots[i] = None
        i = (i + 1) % len(slots)


def _mixed(streams: list[Iterator], choices: Iterator[np.ndarray]) -> Iterator:
    """tf.data's `choose_from_datasets`: each record from the stream its choice names."""
    for block in choices:
        for corpus in block.tolist():
            yield next(streams[corpus])


def _chunks(records: Iterator, size: int) -> Iterator[list]:
    chunk = []
    for record in records:
        chunk.append(record)
        if len(chunk) == size:
            yield chunk
            chunk = []


def _decode(chunk: list[tuple[Shard, int]], columns) -> dict[str, np.ndarray]:
    """The chunk's records read (checksums verified) and decoded; int64 cast to int32, as TPUs
    and GPU kernels want, and ids fit."""
    data = []
    for shard, index in chunk:
        try:
            data.extend(shard.records([index]))
        except RecordError as e:
            raise corrupt_shard(shard.path, str(e)) from None
    try:
        parsed = decode_examples(data, columns)
    except RecordError as e:  # checksums held: records of another layout than the manifest's
        paths = sorted({shard.path for shard, _ in chunk})
        raise corrupt_shard(paths[0] if len(paths) == 1 else f"one of {', '.join(paths)}", str(e)) from None
    return {k: v.astype(np.int32) if v.dtype == np.int64 else v for k, v in parsed.items()}


# A model output's (label, sample weight) from a parsed batch (`config.TARGET_NAMES`).
TARGETS = {
    "mlm": lambda batch: (batch["masked_lm_ids"], batch["masked_lm_weights"]),
    "nsp": lambda batch: (
        batch["next_sentence_labels"],
        np.ones(len(batch["next_sentence_labels"]), np.float32),
    ),
    "rtd": lambda batch: (masks_numpy.unmask(batch), batch["input_mask"].astype(np.float32)),
}


def _to_keras(batch, features: Sequence[str], targets: Sequence[str]) -> Batch:
    pairs = {name: TARGETS[name](batch) for name in targets}
    return (
        {name: batch[name] for name in features},
        {name: label for name, (label, _) in pairs.items()},
        {name: weight for name, (_, weight) in pairs.items()},
    )
