"""Choosing a strategy, building the optimizer, fit/resume/export, the CLI entry points.

Importing the package on TensorFlow (Keras's default backend) imports TensorFlow with its start-up
lines held back (`backend.import_tensorflow`, which says where each comes from). On JAX
(KERAS_BACKEND=jax, `backend.py`) a run never needs TensorFlow, and where it is not installed
(the GPU image this project is lent) there is nothing to import; the few things that use it on
JAX (a Google checkpoint, a SavedModel) import it, as quietly, when they run. `--verbose` on any
`python -m launch.*` command keeps the start-up lines.
"""

import os
import sys

from launch.backend import configured as _configured_backend
from launch.backend import import_tensorflow as _import_tensorflow

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

if _configured_backend() == "tensorflow" and "tensorflow" not in sys.modules:
    _import_tensorflow()
