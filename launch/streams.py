"""The input streams of a run: the training stream of a phase's corpora (one, or a mixture) per
input pipeline, starting at a given batch (how a resumed run keeps its data position), with an
optional per-batch trace; and the validation splits.

On TensorFlow they are tf.data datasets (`pipeline/reader/dataset.py`) distributed by the
strategy. On JAX they are the numpy reader's batches (`pipeline/reader/batches.py`, no
TensorFlow), handed to Keras as a `PyDataset` (`Batches`): the same batches in the same order,
read on a thread ahead of the train step. Each process of a multi-host JAX run reads its share of
the shards (InputContext-style) for its share of every global batch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import queue
import threading
from collections.abc import Callable, Iterator

import keras
import numpy as np

from launch import backend
from launch.config import TrainConfig
from launch.run_dir import RunDir
from launch.sources import Corpora
from pipeline.reader.config import DynamicMasking, InputConfig
from pipeline.reader.shards import InputError, Pipelines
from pipeline.schema import Manifest


def dynamic_masking(config: TrainConfig, corpora: Corpora) -> DynamicMasking | None:
    """--dynamic_masking's rules for the phase's corpora, at --dynamic_masked_lm_prob if given:
    one rule for a whole mixture, so its corpora must agree on whole-word masking, and on the
    masking rate unless --dynamic_masked_lm_prob sets it. (Vocab and features they share.)"""
    if not config.dynamic_masking:
        return None
    first, first_name = corpora.first, corpora.names[0]
    for name, other in zip(corpora.names[1:], corpora.manifests[1:], strict=True):
        if other.whole_word_mask != first.whole_word_mask:
            raise InputError(
                f"--dynamic_masking: {name} was built with whole_word_mask {other.whole_word_mask}, "
                f"{first_name} with {first.whole_word_mask}; one mask rule serves the mixture: rebuild "
                "one of them or train with the stored masks"
            )
        if config.dynamic_masked_lm_prob is None and other.masked_lm_prob != first.masked_lm_prob:
            raise InputError(
                f"--dynamic_masking: {name} was built with masked_lm_prob {other.masked_lm_prob}, "
                f"{first_name} with {first.masked_lm_prob}; choose the rate with --dynamic_masked_lm_prob"
            )
    return DynamicMasking.for_corpus(first, config.dynamic_masked_lm_prob)


def train_inputs(
    config: TrainConfig,
    corpora: Corpora,
    strategy,
    per_replica_batch: int,
    start_batch: int,
    *,
    first_batch_of_phase: int = 0,
    batches_in_phase: int | None = None,
    model_io: dict | None = None,
):
    """The training stream for `model.fit`, starting at batch `start_batch` of the uninterrupted
    one (counted from the phase's start), with the features and targets `model_io` names (the
    model's, `launch.run_model.model_io`). The trace counts batches from the run's start
    (`first_batch_of_phase` on) and leaves out what is read ahead past the phase's end."""
    trace = RunDir(config.model_dir).trace if config.trace_batches else None
    if trace:
        os.makedirs(trace, exist_ok=True)  # local only: TrainConfig refuses gs:// with tracing
    input_config = InputConfig(
        per_replica_batch_size=per_replica_batch,
        training=True,
        seed=config.seed,
        dynamic_masking=dynamic_masking(config, corpora),
        **(model_io or {}),
    )
    stream = dict(
        trace=trace,
        first_batch_of_phase=first_batch_of_phase,
        batches_in_phase=batches_in_phase,
        start_batch=start_batch,
    )
    if backend.is_jax():
        return _jax_train_inputs(corpora, strategy, input_config, **stream)
    return _tf_train_inputs(corpora, strategy, input_config, **stream)


def _tf_train_inputs(corpora, strategy, input_config, *, trace, first_batch_of_phase, batches_in_phase,
                     start_batch):  # fmt: skip
    """tf.data, one pipeline per input context of the strategy."""
    from pipeline.reader.dataset import make_dataset

    def train_fn(context):
        # A batch index counts per input pipeline; each feeds its share of the replicas per step.
        per_step = strategy.num_replicas_in_sync // context.num_input_pipelines
        on_batch = None
        if trace:
            path = f"{trace}/{os.getpid()}-{context.input_pipeline_id}.tsv"
            last = None if batches_in_phase is None else batches_in_phase * per_step
            on_batch = Trace(path, first_batch_of_phase * per_step, last).tf_on_batch
        return make_dataset(
            list(corpora.manifests),
            "train",
            input_config,
            rates=corpora.rates,
            input_context=context,
            skip_batches=start_batch * per_step,
            on_batch=on_batch,
        )

    return strategy.distribute_datasets_from_function(train_fn, input_options(strategy, corpora))


def _jax_train_inputs(corpora, strategy, input_config, *, trace, first_batch_of_phase, batches_in_phase,
                      start_batch) -> Batches:  # fmt: skip
    """The numpy reader, one pipeline per process: each process's batch is its devices' share of
    the global batch, read from its share of the shards."""
    from pipeline.reader.batches import make_batches

    pipelines = Pipelines(strategy.process_count, strategy.process_index)
    per_process = input_config.per_replica_batch_size * strategy.local_devices
    config = dataclasses.replace(input_config, per_replica_batch_size=per_process)
    tracer = None
    if trace:
        path = f"{trace}/{os.getpid()}-{pipelines.input_pipeline_id}.tsv"
        tracer = Trace(path, first_batch_of_phase, batches_in_phase)

    def open_at(batch: int) -> Iterator:
        return make_batches(
            list(corpora.manifests),
            "train",
            config,
            rates=corpora.rates,
            input_context=pipelines,
            skip_batches=start_batch + batch,
            on_batch=tracer,
        )

    remaining = None if batches_in_phase is None else batches_in_phase - start_batch
    return Batches(open_at, remaining)


def input_options(strategy, corpora: Corpora):
    """Under MirroredStrategy, one input pipeline per replica, each reading its own shards, when
    every corpus has a shard per replica: replica r then trains on what worker r of a multi-worker
    run with one replica per worker trains on, so the same run on 2 devices of one host or on 2
    hosts sees the same batches (a test compares the losses). With fewer shards, one pipeline
    feeds all replicas, as Keras does by default."""
    import tensorflow as tf

    replicas = strategy.num_replicas_in_sync
    if not isinstance(strategy, tf.distribute.MirroredStrategy) or replicas == 1:
        return None
    if any(len(m.split("train").shards) < replicas for m in corpora.manifests):
        return None
    return tf.distribute.InputOptions(
        experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA
    )


def validation_dataset(
    manifests: list[Manifest],
    global_batch: int,
    seed: int,
    batches: list[int],
    features: tuple[str, ...] | None = None,
    targets: tuple[str, ...] | None = None,
):
    """`batches[i]` global batches of corpus i's validation split, one corpus after the other, in
    file order (Keras splits them over replicas), then the same again: Keras evaluates exactly
    `sum(batches)` steps, so every evaluation sees the same examples. (Repeated, because under a
    distribution strategy Keras's iterator reads ahead: a dataset that ends with the evaluation's
    last batch raised StopIteration at the second evaluation under MirroredStrategy.) `features`
    and `targets`: the model's input and output names (`launch.run_model.model_io`; default: a
    BERT's). On JAX, the same batches as a `Batches` of `sum(batches)`, each process given its
    share of every batch."""
    config = InputConfig(
        per_replica_batch_size=global_batch, training=False, seed=seed, features=features, targets=targets
    )
    if backend.is_jax():
        return _jax_validation(manifests, config, batches)
    from pipeline.reader.dataset import make_dataset

    parts = [make_dataset(m, "validation", config).take(n) for m, n in zip(manifests, batches, strict=True)]
    ds = parts[0]
    for part in parts[1:]:
        ds = ds.concatenate(part)
    return ds.repeat()


def _jax_validation(manifests: list[Manifest], config: InputConfig, batches: list[int]) -> Batches:
    import itertools

    import jax

    from pipeline.reader.batches import make_batches

    count, index = jax.process_count(), jax.process_index()

    def share(batch):  # this process's rows of a global batch (Keras assembles the global array)
        rows = len(next(iter(batch[0].values()))) // count
        return tuple({k: v[index * rows : (index + 1) * rows] for k, v in part.items()} for part in batch)

    cached: list = []

    def open_at(start: int) -> Iterator:
        if not cached:
            for manifest, n in zip(manifests, batches, strict=True):
                cached.extend(
                    share(b) for b in itertools.islice(make_batches(manifest, "validation", config), n)
                )
        return iter(cached[start:])

    return Batches(open_at, sum(batches))


class Batches(keras.utils.PyDataset):
    """Batches for Keras on JAX by index: batch i of the stream `open_at(0)` gives. Keras asks
    for them in order, and a thread reads `prefetch` batches ahead, so the train step does not
    wait on the reader. Keras starts over after drawing a batch to build the model: the batches
    last given are given again, not read again; any other index reopens the stream there, which
    the seekable order makes cheap."""

    def __init__(self, open_at: Callable[[int], Iterator], num_batches: int | None, prefetch: int = 4):
        super().__init__(workers=1, use_multiprocessing=False)
        self._open_at, self._num_batches, self._prefetch = open_at, num_batches, prefetch
        self._next, self._reader = None, None
        self._recent: dict[int, object] = {}

    @property
    def num_batches(self) -> int | None:
        return self._num_batches

    def __getitem__(self, index: int):
        if self._num_batches is not None and index >= self._num_batches:
            raise IndexError(index)
        if index in self._recent:
            batch = self._recent[index]
        else:
            if index != self._next:
                self._close()
                self._reader = _Ahead(self._open_at(index), self._prefetch)
            batch = self._recent[index] = self._reader.next()
            self._recent.pop(index - 2, None)
            self._next = index + 1
        return batch

    def _close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def __del__(self):
        self._close()


class _Ahead:
    """An iterator read on a daemon thread into a bounded queue; its exceptions re-raised where
    the batch is asked for."""

    _END = object()

    def __init__(self, iterator: Iterator, size: int):
        self._queue: queue.Queue = queue.Queue(maxsize=size)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, args=(iterator,), daemon=True)
        self._thread.start()

    def _fill(self, iterator: Iterator) -> None:
        try:
            for item in iterator:
                if not self._put((True, item)):
                    return
            self._put((True, self._END))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            self._put((False, e))

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def next(self):
        ok, item = self._queue.get()
        if not ok:
            raise item
        if item is self._END:
            raise IndexError("the stream ended")
        return item

    def close(self) -> None:
        self._stop.set()


class Trace:
    """--trace_batches: one line per batch, in stream order: its index + `offset`, then a digest of
    each example (its input ids, masked positions and masked ids as int32); batches from `end` on
    (read ahead past a phase's end) are left out. The same digests from either reader."""

    def __init__(self, path: str, offset: int = 0, end: int | None = None):
        self.path, self.offset, self.end = path, offset, end

    def __call__(self, step: int, batch: dict) -> None:
        content = np.concatenate(
            [batch["input_ids"], batch["masked_lm_positions"], batch["masked_lm_ids"]], axis=1
        )
        self.write(step, content)

    @staticmethod
    def digests(content: np.ndarray) -> list[str]:
        """Each row's digest: its values as little-endian int32, BLAKE2b, 8 bytes in hex."""
        rows = np.ascontiguousarray(content, "<i4")
        return [hashlib.blake2b(row.tobytes(), digest_size=8).hexdigest() for row in rows]

    def write(self, step: int, content: np.ndarray) -> None:
        if self.end is not None and int(step) >= self.end:
            return
        with open(self.path, "a") as f:
            f.write(f"{int(step) + self.offset}\t{','.join(self.digests(content))}\n")

    def tf_on_batch(self, step, batch):
        """The same, as a tf.data map's side effect."""
        import tensorflow as tf

        def write(step, content):
            self.write(int(step), content.numpy())
            return np.int64(0)

        content = tf.concat(
            [batch["input_ids"], batch["masked_lm_positions"], batch["masked_lm_ids"]], axis=1
        )
        return tf.py_function(write, [step, content], tf.int64)
