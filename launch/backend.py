"""Which Keras backend a run is on, checked before anything runs, and the few things that differ
between the two bertbeam trains on: TensorFlow (the default) and JAX.

    KERAS_BACKEND=jax python -m launch.pretrain ...   # Keras's own switch; bertbeam adds no flag

Keras reads its backend once, at import, from KERAS_BACKEND (else ~/.keras/keras.json, else
TensorFlow), so the choice is the environment's, not a flag's: a flag would be read after Keras
had picked. What the backend decides, each at its own place:
- the hardware: `tf.distribute` strategies, or `keras.distribution` over JAX's devices
  (`strategy.py`);
- the reader: tf.data, or the numpy reader that needs no TensorFlow (`inputs.py`);
- nothing else: checkpoints, logs, exports and the model are one code path under both.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import sys
import tempfile

from common.errors import BertbeamError

BACKENDS = ("tensorflow", "jax")


class BackendError(BertbeamError):
    """A backend bertbeam does not train on, or a flag the run's backend cannot honour."""


def configured() -> str:
    """The backend Keras will load, read as Keras reads it, without importing Keras."""
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(home, "keras.json")) as f:
            return json.load(f).get("backend", "tensorflow")
    except (OSError, ValueError):
        return "tensorflow"


def check() -> str:
    """The configured backend, or a one-line `BackendError` for one bertbeam does not train on."""
    name = configured()
    if name not in BACKENDS:
        source = "KERAS_BACKEND" if os.environ.get("KERAS_BACKEND") else "~/.keras/keras.json's backend"
        raise BackendError(
            f"{source}={name}: bertbeam trains on {' or '.join(BACKENDS)}; set KERAS_BACKEND=jax or "
            "KERAS_BACKEND=tensorflow (the default)"
        )
    return name


def name() -> str:
    import keras

    return keras.backend.backend()


def is_jax() -> bool:
    return name() == "jax"


def has_tensorflow() -> bool:
    """TensorFlow is installed (whether or not this run's backend is)."""
    try:
        return importlib.util.find_spec("tensorflow") is not None
    except ImportError:  # a finder that refuses it (tests/conftest.py's `without_tensorflow`)
        return False


def refuse_flags(config) -> None:
    """A flag only the other backend can honour is a one-line error before anything runs."""
    if name() == "tensorflow":
        return
    if config.deterministic:
        raise BackendError(
            "--deterministic sets TensorFlow's op determinism, and this run is on jax: JAX on a CPU or "
            "TPU is deterministic already; on a GPU set XLA_FLAGS=--xla_gpu_deterministic_ops=true instead"
        )
    if config.tpu:
        raise BackendError(
            f"--tpu {config.tpu} names a TPU for TensorFlow's cluster resolver, and this run is on jax: on a "
            "TPU VM JAX sees the chips as local devices; pass --strategy tpu without --tpu"
        )
    if config.head_warmup_steps and config.optimizer != "adamw":
        raise BackendError(
            f"--head_warmup_steps with --optimizer {config.optimizer}, and this run is on jax: there the "
            "warm-up freezes weights inside the optimizer, which adamw does; use --optimizer adamw"
        )


# Start-up lines about hardware this machine does not have, how the wheel was built, and absl's
# preamble (`import_tensorflow` names each one's source).
START_UP_NOISE = re.compile(
    r"absl::InitializeLog|cudart_stub|cuda_platform|cuda_dnn|cuda_blas|cuda_fft|cuInit|"
    r"computation_placer|oneDNN custom operations|cpu_feature_guard|TF-TRT Warning"
)


@functools.cache
def import_tensorflow():
    """TensorFlow, imported with its start-up lines held back; None where it is not installed.

    Their upstream causes, as TensorFlow 2.21's CPU wheel behaves (it logs through absl, from
    C++, straight to fd 2):
      - absl's "WARNING: All log messages before absl::InitializeLog() is called are written to
        STDERR": every shared library that logs before TensorFlow initialises absl says it once;
      - the CUDA stubs compiled into the CPU wheel (`cudart_stub`, `cuda_platform`: "failed call
        to cuInit", `cuda_dnn`/`cuda_blas`/`cuda_fft` factory registrations) on a machine with no
        GPU;
      - `cpu_feature_guard`'s and oneDNN's notices about how the wheel was built, TF-TRT's "Could
        not find TensorRT", and XLA's `computation_placer` registering its placer a second time.
    TF_CPP_MIN_LOG_LEVEL (set to 2 by `launch`) does not reach them: they are written while the
    libraries load, before TensorFlow reads it, and some are ERROR lines. So the import (and the
    device listing, where the CUDA stubs speak up) runs with fd 2 held in a file, and every line
    but these is replayed; `--verbose` keeps them all."""
    if not has_tensorflow():
        return None
    if "--verbose" in sys.argv[1:] or "tensorflow" in sys.modules:
        import tensorflow as tf

        return tf
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            import tensorflow as tf

            tf.config.list_physical_devices()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            lines = held.read().decode("utf-8", "replace").splitlines()
    for line in lines:
        if not START_UP_NOISE.search(line):
            print(line, file=sys.stderr)
    return tf


def to_numpy(value):
    """A variable's or tensor's value on the host. A JAX array replicated over the devices of
    several processes is not whole on any one of them: its local copy is. A `tf.distribute`
    variable's value is its primary copy (`convert_to_numpy` refuses a mirrored one)."""
    import keras
    import numpy as np

    value = getattr(value, "value", value)
    if name() == "jax" and not getattr(value, "is_fully_addressable", True):
        return np.asarray(value.addressable_data(0))
    if hasattr(value, "numpy"):  # TensorFlow's, a tf.distribute variable's mirrored value too
        return np.asarray(value.numpy())
    return keras.ops.convert_to_numpy(value)
