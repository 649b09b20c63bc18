"""Choosing a strategy, building the optimizer, fit/resume/export, the CLI entry points.

Importing the package imports TensorFlow with its start-up lines held back: absl's "before
InitializeLog" notice and the CUDA stubs' "no GPU here" lines, which TF_CPP_MIN_LOG_LEVEL does
not reach (they are written before TensorFlow's logging starts, once per shared library).
Whatever else it writes still shows. `--verbose` on any `python -m launch.*` command keeps them.
"""

import importlib.util
import os
import re
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Start-up lines about hardware this machine does not have, and absl's preamble.
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
