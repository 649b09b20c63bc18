#!/usr/bin/env bash
# The real pretraining loop on one GPU, on JAX: BERT-base at seq 128, bf16, a few hundred steps of
# `launch.pretrain` on a corpus built here and carried along, its MFU beside bench/gpu.py's
# synthetic one, a SIGKILL and a resume, a Hugging Face export (bench/gpu_pretrain.py). Within
# 8 minutes of device time: two compiles of the loop, one of the synthetic bench, 600 steps.
#
#   bash bench/gpu_pretrain.sh [--preset base] [--steps 200] [--output bench/results/gpu_pretrain.json]
#
# What travels (the GPU image has JAX, PyTorch and numpy, no TensorFlow and no Beam): this tree,
# the corpus (out/demo/corpus by default, 35 MB: `make demo` builds it) and the wheels below in
# .whl/ (git-ignored, about 17 MB), fetched beforehand with:
#
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
#     --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
#     keras==3.15.1 namex==0.1.0 optree==0.20.0 absl-py==2.5.1 rich==15.0.0 markdown-it-py==4.3.0 \
#     mdurl==0.1.2 pygments==2.21.0 h5py==3.16.0 safetensors==0.8.0 sentencepiece==0.2.3 \
#     google-crc32c==1.9.0 tensorboard==2.21.0 protobuf==6.33.6 typing-extensions==4.16.0 packaging==26.4 \
#     tokenizers==0.23.3
#
# WHEELS=DIR takes them from elsewhere (a dry run on CPU: another Python's wheels).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
if compgen -G "$WHEELS/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/bertbeam-site "$WHEELS"/*.whl
  export PYTHONPATH=/tmp/bertbeam-site${PYTHONPATH:+:$PYTHONPATH}
fi
export KERAS_BACKEND=jax
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "no nvidia-smi"
exec $PY bench/gpu_pretrain.py "$@"
