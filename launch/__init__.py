"""Choosing a strategy, building the optimizer, fit/resume/export, the CLI entry points.

Importing the package imports TensorFlow with its start-up lines held back. Their upstream causes,
as TensorFlow 2.21's CPU wheel behaves (it logs through absl, from C++, straight to fd 2):
  - absl's "WARNING: All log messages before absl::InitializeLog() is called are written to
    STDERR": every shared library that logs before TensorFlow initialises absl says it once;
  - the CUDA stubs compiled into the CPU wheel (`cudart_stub`, `cuda_platform`: "failed call to
    cuInit", `cuda_dnn`/`cuda_blas`/`cuda_fft` factory registrations) on a machine with no GPU;
  - `cpu_feature_guard`'s and oneDNN's notices about how the wheel was built, TF-TRT's "Could not
    find TensorRT", and XLA's `computation_placer` registering its placer a second time.
TF_CPP_MIN_LOG_LEVEL (set to 2 here) does not reach them: they are written while the libraries
load, before TensorFlow reads it, and some are ERROR lines. So the import runs with fd 2 held in a
file and every line but these is replayed. `--verbose` on any `python -m launch.*` command keeps
them all.
"""

import importlib.util
import os
import re
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Start-up lines about hardware this machine does not have, how the wheel was built, and absl's
# preamble (the module docstring names each one's source).
START_UP_NOISE = re.compile(
    r"absl::InitializeLog|cudart_stub|cuda_platform|cuda_dnn|cuda_blas|cuda_fft|cuInit|"
    r"computation_placer|oneDNN custom operations|cpu_feature_guard|TF-TRT Warning"
)


def _import_tensorflow_quietly() -> None:
    """Imports TensorFlow and lists its devices (where the CUDA stubs speak up) with the process's
    stderr (fd 2: the C++ libraries write there directly) held in a file, then replays every line
    that is not start-up noise."""
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


# Where TensorFlow is not installed (bench/gpu.py runs the same Keras model on JAX on a GPU image
# that has no TensorFlow), there is nothing to import quietly.
if (
    "--verbose" not in sys.argv[1:]
    and "tensorflow" not in sys.modules
    and importlib.util.find_spec("tensorflow")
):
    _import_tensorflow_quietly()
