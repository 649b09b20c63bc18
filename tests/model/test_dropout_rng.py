"""Dropout's cheaper random bits on JAX (issue 57, `model.layers.DROPOUT_RNGS`): each kind keeps an
element with probability 1 - rate, from Keras's seed, deterministically; the layer on Keras's JAX
backend drops that share and scales the rest. Sizes: 1,000,003 elements (odd), rates 0.1 and 0.37."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from model.layers import DROPOUT_RNGS, keep_mask

REPO = Path(__file__).resolve().parents[2]
N = 1_000_003
CHEAP = [kind for kind in DROPOUT_RNGS if kind != "keras"]


@pytest.mark.parametrize("kind", CHEAP)
@pytest.mark.parametrize("rate", [0.1, 0.37])
def test_the_mask_keeps_one_minus_rate_of_the_elements(kind, rate):
    seed = np.array([7, 11], np.uint32)
    keep = np.asarray(keep_mask(seed, (N,), rate, kind))
    sigma = math.sqrt(rate * (1 - rate) / N)
    assert abs(keep.mean() - (1 - rate)) < 5 * sigma, (kind, rate, keep.mean())
    # no structure: each half alone, and pairs of neighbours, at the same rate
    for part in (keep[: N // 2], keep[N // 2 :]):
        assert abs(part.mean() - (1 - rate)) < 5 * sigma * math.sqrt(2)
    both = (keep[:-1] & keep[1:]).mean()
    assert abs(both - (1 - rate) ** 2) < 5 * math.sqrt((1 - rate) ** 2 * (1 - (1 - rate) ** 2) / N)


@pytest.mark.parametrize("kind", CHEAP)
def test_the_same_seed_gives_the_same_mask_and_another_seed_another(kind):
    a = np.asarray(keep_mask(np.array([1, 2], np.uint32), (4099,), 0.1, kind))
    again = np.asarray(keep_mask(np.array([1, 2], np.uint32), (4099,), 0.1, kind))
    other = np.asarray(keep_mask(np.array([1, 3], np.uint32), (4099,), 0.1, kind))
    np.testing.assert_array_equal(a, again)
    assert (a != other).mean() > 0.1  # independent masks differ in 2 p (1 - p) = 18 % of places


def test_the_layer_on_jax_drops_the_rate_and_scales_the_rest():
    """Keras's JAX backend, a process of its own: bertbeam's Dropout with each kind, in training
    and at inference."""
    script = """
import json, numpy as np, keras
from model import layers
found = {}
for kind in layers.DROPOUT_RNGS:
    layers.dropout_rng["kind"] = kind
    layer = layers.Dropout(0.1, seed=3)
    x = np.ones((1001, 999), "float32")
    y = np.asarray(layer(x, training=True))
    again = np.asarray(layer(x, training=True))
    found[kind] = {"zeros": float((y == 0).mean()), "kept": sorted(set(np.round(y[y != 0], 5).tolist())),
                   "fresh": bool((y != again).any()), "inference": bool((np.asarray(layer(x)) == x).all())}
print(json.dumps(found))
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={"KERAS_BACKEND": "jax", "PATH": "/usr/bin:/bin",
                                            "JAX_PLATFORMS": "cpu"})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    sigma = math.sqrt(0.1 * 0.9 / (1001 * 999))
    for kind, figures in found.items():
        assert abs(figures["zeros"] - 0.1) < 5 * sigma, (kind, figures["zeros"])
        assert len(figures["kept"]) == 1 and figures["kept"][0] == pytest.approx(1 / 0.9, abs=1e-5), kind
        assert figures["fresh"] and figures["inference"], kind
