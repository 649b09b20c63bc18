#!/usr/bin/env bash
# BERT-base and ModernBERT-base, seq_len 128 and 512, bf16, XLA: pretraining throughput and MFU on one
# GPU (well under 10 min: four compiles and 4 x 200 steps).
#
#   bash bench/gpu.sh [--seq_lens 128,512] [--batch_sizes 256,64] [--steps 200] [--output result.json]
#
# Runs bench/gpu.py with TensorFlow when it is installed (bertbeam's production backend). Without
# it, Keras runs the same model code on JAX: the GPU image this project is lent has JAX and no
# TensorFlow, and TensorFlow's wheel (~600 MB) is too large to carry there. Keras itself and the
# two small packages it needs travel as wheels in .whl/ (git-ignored), fetched beforehand with:
#
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
#     --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
#     keras==3.15.1 namex==0.1.0 optree==0.20.0
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/bertbeam-site .whl/*.whl
  export PYTHONPATH=/tmp/bertbeam-site${PYTHONPATH:+:$PYTHONPATH}
fi
if [ -z "${KERAS_BACKEND:-}" ]; then
  if $PY -c "import tensorflow" 2>/dev/null; then export KERAS_BACKEND=tensorflow; else export KERAS_BACKEND=jax; fi
fi
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "no nvidia-smi"
echo "backend: $KERAS_BACKEND"
exec $PY bench/gpu.py "$@"
