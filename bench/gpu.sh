#!/usr/bin/env bash
# Issue 57's device check: BERT-base at seq_len 128 and 512, ModernBERT-base and BERT-large at 128,
# bf16, XLA, as configured, then attention dropout 0 (the fused kernel), the unpadded vocab and
# Dropout's cheaper random bits, each on its own: eight rows, each a compile and 100 timed steps,
# about 8 minutes on an H100 or H200 (`--rows extra`: six second-order rows, for a second call).
# Each row is written to bench/results/gpu.json as it finishes (the device named), and a rerun
# skips the rows already there.
#
#   bash bench/gpu.sh [--rows plan|extra|base@128,base@512:fused=off,...] [--steps 100] [--output FILE]
#
# Dry run on a CPU (what tests/test_gpu_bench.py does, without TensorFlow):
#   KERAS_BACKEND=jax bash bench/gpu.sh --rows tiny@128,tiny@128:fused=off --batch_sizes 128:4 \
#     --steps 2 --steps_per_execution 1 --matmul_size 64 --output /tmp/gpu.json
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
case " $* " in
  *" --output "*) exec $PY bench/gpu.py "$@" ;;
  *) exec $PY bench/gpu.py --output bench/results/gpu.json "$@" ;;
esac
