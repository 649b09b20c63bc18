"""The one place that branches on hardware: `choose_strategy`, and what the hardware asks of a run
(`batch_sizes`: the global batch splits over the replicas; `check_tpu_paths`: gs:// only).

TPU: cluster resolver -> connect -> initialise -> TPUStrategy. GPU: MirroredStrategy over the
visible GPUs. multi_worker: MultiWorkerMirroredStrategy from TF_CONFIG. CPU: the default strategy.
auto: a TPU if one is named (--tpu or TPU_NAME), else the GPUs if any, else the CPU.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

import tensorflow as tf

from common.errors import BertbeamError

KINDS = ("auto", "cpu", "gpu", "tpu", "multi_worker")


class StrategyError(BertbeamError):
    """The requested hardware is not there, or the run does not fit it; one line saying what to
    change."""


def choose_strategy(kind: str = "auto", tpu: str | None = None) -> tf.distribute.Strategy:
    if kind not in KINDS:
        raise StrategyError(f"--strategy {kind}: expected one of {', '.join(KINDS)}")
    tpu = tpu or os.environ.get("TPU_NAME")
    if kind == "auto":
        kind = "tpu" if tpu else "gpu" if tf.config.list_physical_devices("GPU") else "cpu"
    if kind == "tpu":
        return _tpu_strategy(tpu or "local")
    if kind == "gpu":
        gpus = tf.config.list_logical_devices("GPU")
        if not gpus:
            raise StrategyError("--strategy gpu: no GPU is visible to TensorFlow; use --strategy cpu or auto")
        return tf.distribute.MirroredStrategy([g.name for g in gpus])
    if kind == "multi_worker":
        return _multi_worker_strategy()
    return tf.distribute.get_strategy()


def _tpu_strategy(name: str) -> tf.distribute.Strategy:
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=name)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except Exception as e:  # noqa: BLE001 - resolver, RPC and op errors all mean "no TPU here"
        cause = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise StrategyError(
            f"--strategy tpu: no TPU found at {name!r} ({cause}); pass --tpu NAME_OR_ADDRESS on a TPU VM "
            "or use --strategy gpu|cpu"
        ) from None
    return tf.distribute.TPUStrategy(resolver)


def _multi_worker_strategy() -> tf.distribute.Strategy:
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        raise StrategyError("--strategy multi_worker: TF_CONFIG is not set; set it on every worker")
    try:
        config = json.loads(raw)
        config["cluster"]["worker"]
        config["task"]["index"]
    except (ValueError, KeyError, TypeError) as e:
        raise StrategyError(f"--strategy multi_worker: TF_CONFIG is not a valid cluster spec ({e})") from None
    return MultiWorkerStrategy()


class MultiWorkerStrategy(tf.distribute.MultiWorkerMirroredStrategy):
    """MultiWorkerMirroredStrategy with the `reduce` Keras 3's `fit` expects of it. With more than
    one worker, Keras 3.15's fit on TF 2.21 fails twice in `reduce` (keras-team/keras#20585,
    tensorflow/tensorflow#72388, open):
    - it reduces its first batch, a dict of per-replica tensors, to build the model, and the
      multi-worker `reduce` converts the whole dict to one tensor: here each tensor is reduced;
    - it averages each step's logs, per-replica scalars, with `axis=0`, which a scalar does not
      have: here a scalar is averaged across replicas, as Keras's "mean" does for one worker.
    Everything else is TF's strategy. Drop this class once those issues are fixed upstream."""

    def reduce(self, reduce_op, value, axis):
        reduce_one = super().reduce

        def one(v):
            scalar = self.experimental_local_results(v)[0].shape.rank == 0
            return reduce_one(reduce_op, v, None if scalar else axis)

        return tf.nest.map_structure(one, value)


def batch_sizes(
    strategy: tf.distribute.Strategy, *, global_batch_size: int, per_replica_batch_size: int = 0
) -> tuple[int, int]:
    """(global, per replica) examples per batch: a per-replica size if given, else the global
    batch, which must split evenly over the replicas."""
    replicas = strategy.num_replicas_in_sync
    if per_replica_batch_size:
        return per_replica_batch_size * replicas, per_replica_batch_size
    if global_batch_size % replicas:
        raise StrategyError(
            f"--global_batch_size {global_batch_size} does not divide over {replicas} replicas; "
            f"use a multiple of {replicas} or --per_replica_batch_size"
        )
    return global_batch_size, global_batch_size // replicas


def check_tpu_paths(kind: str, strategy: tf.distribute.Strategy | None, paths: Mapping[str, str]) -> None:
    """TPU workers read and write only through GCS: a local path would be the TPU host's disk.
    Checked from the flags (`kind`) before a TPU is looked for, and again for the strategy found.
    `paths`: flag name -> path (a name ending in '=' is a mixture's `data NAME=`)."""
    if kind == "tpu" or isinstance(strategy, tf.distribute.TPUStrategy):
        for flag, path in paths.items():
            if not path.startswith("gs://"):
                named = f"--{flag}{path}" if flag.endswith("=") else f"--{flag} {path}"
                raise StrategyError(
                    f"{named}: a TPU reads and writes only gs:// paths; "
                    "copy the corpus to a bucket and pass gs://BUCKET/..."
                )
