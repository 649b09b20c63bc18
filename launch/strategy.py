"""The one place that branches on hardware: `choose_strategy`, and what the hardware asks of a run
(`batch_sizes`: the global batch splits over the replicas; `check_tpu_paths`: gs:// only).

On TensorFlow, a `tf.distribute` strategy. TPU: cluster resolver -> connect -> initialise ->
TPUStrategy. GPU: MirroredStrategy over the visible GPUs. multi_worker: MultiWorkerMirroredStrategy
from TF_CONFIG. CPU: the default strategy. auto: a TPU if one is named (--tpu or TPU_NAME), else
the GPUs if any, else the CPU.

On JAX, `JaxStrategy`: Keras's `DataParallel` over the devices of the kind asked for (a TPU VM's
chips, a host's GPUs, the CPU's devices, which XLA_FLAGS=--xla_force_host_platform_device_count=N
makes N), the model replicated and each batch split along its first axis. multi_worker: several
hosts, each a process of `jax.distributed`, started by `keras.distribution.initialize()` from
KERAS_DISTRIBUTION_JOB_ADDRESSES, _NUM_PROCESSES and _PROCESS_ID (docs/hardware.md); each
process feeds its share of every batch. auto: JAX's default devices (TPU, else GPU, else CPU).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from common.errors import BertbeamError
from launch import backend

if TYPE_CHECKING:
    import tensorflow as tf

KINDS = ("auto", "cpu", "gpu", "tpu", "multi_worker")


class StrategyError(BertbeamError):
    """The requested hardware is not there, or the run does not fit it; one line saying what to
    change."""


def choose_strategy(kind: str = "auto", tpu: str | None = None):
    """A `tf.distribute.Strategy` on TensorFlow, a `JaxStrategy` on JAX."""
    if kind not in KINDS:
        raise StrategyError(f"--strategy {kind}: expected one of {', '.join(KINDS)}")
    if backend.is_jax():
        return _jax_strategy(kind)
    import tensorflow as tf

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
    import tensorflow as tf

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
    return _multi_worker_class()()


def _multi_worker_class():
    import tensorflow as tf

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

    return MultiWorkerStrategy


def batch_sizes(strategy, *, global_batch_size: int, per_replica_batch_size: int = 0) -> tuple[int, int]:
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


def check_tpu_paths(kind: str, strategy, paths: Mapping[str, str]) -> None:
    """TPU workers read and write only through GCS: a local path would be the TPU host's disk.
    Checked from the flags (`kind`) before a TPU is looked for, and again for the strategy found.
    `paths`: flag name -> path (a name ending in '=' is a mixture's `data NAME=`). (On JAX, a TPU
    VM's chips are its own: it reads and writes its disk like any host.)"""
    if backend.is_jax():
        return
    import tensorflow as tf

    if kind == "tpu" or isinstance(strategy, tf.distribute.TPUStrategy):
        for flag, path in paths.items():
            if not path.startswith("gs://"):
                named = f"--{flag}{path}" if flag.endswith("=") else f"--{flag} {path}"
                raise StrategyError(
                    f"{named}: a TPU reads and writes only gs:// paths; "
                    "copy the corpus to a bucket and pass gs://BUCKET/..."
                )


def describe(strategy) -> str:
    """The strategy in a few words, for the run's log."""
    if isinstance(strategy, JaxStrategy):
        return repr(strategy)
    return f"{type(strategy).__name__} over {strategy.num_replicas_in_sync} replica(s)"


def is_chief(strategy) -> bool:
    """This process writes the run's folder: the only worker, or the chief of several."""
    if isinstance(strategy, JaxStrategy):
        return strategy.process_index == 0
    return strategy.extended.should_checkpoint


def worker_index(strategy) -> int:
    if isinstance(strategy, JaxStrategy):
        return strategy.process_index
    return strategy.cluster_resolver.task_id


# === JAX ===


class JaxStrategy:
    """What a run asks of its hardware on JAX: the devices, the scope its model is built in
    (Keras's `DataParallel` over them, or none for one device), and this process's place among
    several. The few attributes a run reads of a `tf.distribute.Strategy`, for JAX."""

    def __init__(self, devices: list, distribution=None):
        import jax

        self.devices = devices
        self.distribution = distribution
        self.num_replicas_in_sync = len(devices)
        self.process_count = jax.process_count()
        self.process_index = jax.process_index()

    def scope(self):
        return self.distribution.scope() if self.distribution is not None else contextlib.nullcontext()

    @property
    def local_devices(self) -> int:
        return self.num_replicas_in_sync // self.process_count

    def __repr__(self) -> str:
        kind = self.devices[0].platform.upper()
        return f"JaxStrategy({self.num_replicas_in_sync} {kind} device(s), {self.process_count} process(es))"


def _jax_strategy(kind: str) -> JaxStrategy:
    import jax
    import keras

    if kind == "multi_worker":
        if not os.environ.get("KERAS_DISTRIBUTION_JOB_ADDRESSES"):
            raise StrategyError(
                "--strategy multi_worker on jax: KERAS_DISTRIBUTION_JOB_ADDRESSES is not set; set it, "
                "KERAS_DISTRIBUTION_NUM_PROCESSES and KERAS_DISTRIBUTION_PROCESS_ID on every host "
                "(docs/hardware.md)"
            )
        if not os.environ.get("JAX_CPU_COLLECTIVES_IMPLEMENTATION"):
            # CPU devices of several processes all-reduce through gloo (JAX's default: none).
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        try:
            keras.distribution.initialize()
        except (RuntimeError, ValueError) as e:
            cause = str(e).strip().splitlines()[0][:200]
            raise StrategyError(
                f"--strategy multi_worker on jax: jax.distributed did not start ({cause})"
            ) from None
        devices = jax.devices()
    elif kind == "auto":
        devices = jax.devices()
    else:
        platform = {"cpu": "cpu", "gpu": "gpu", "tpu": "tpu"}[kind]
        try:
            devices = jax.devices(platform)
        except RuntimeError:
            devices = []
        if not devices:
            raise StrategyError(
                f"--strategy {kind}: no {kind.upper()} is visible to JAX (it sees {jax.default_backend()} "
                "devices); use --strategy cpu or auto"
            )
    if len(devices) == 1:
        return JaxStrategy(devices)
    mesh = keras.distribution.DeviceMesh((len(devices),), ["batch"], devices)
    # Each process reads its own shards already (`inputs.py`): Keras must not shard them again.
    distribution = keras.distribution.DataParallel(device_mesh=mesh, auto_shard_dataset=False)
    # For the whole process, not only the model's building (`scope`): Keras's JAX trainer splits a
    # batch over the devices only while a distribution is set, and fit and evaluate run outside
    # any scope of ours. Without it each process trained on its own batches alone.
    keras.distribution.set_distribution(distribution)
    return JaxStrategy(devices, distribution)
