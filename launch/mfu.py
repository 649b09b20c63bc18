"""Model-FLOPs utilisation (MFU): the devices' peaks it divides by, and this host's measured rate.

MFU = (model FLOPs per step x steps/s) / peak FLOP/s. Model FLOPs count the matmuls the model
needs (forward 2 per multiply-add, backward twice the forward), not what the hardware executes, so
recomputation or padding never inflates MFU; each objective counts its own
(`model.pretraining.Objective.training_flops_per_example`).
"""

from __future__ import annotations

import time

# Dense bf16 peaks in TFLOP/s per device (per chip for TPUs), from the vendors' data sheets.
PEAK_TFLOPS = {
    "TPU v2": 45.0,
    "TPU v3": 123.0,
    "TPU v4": 275.0,
    "TPU v5 lite": 197.0,  # v5e
    "TPU v5e": 197.0,
    "TPU v5p": 459.0,
    "TPU v6 lite": 918.0,  # v6e (Trillium)
    "TPU v6e": 918.0,
    "H200": 989.0,
    "H100": 989.0,  # SXM
    "A100": 312.0,
    "L4": 121.0,
    "A10G": 70.0,
    "V100": 125.0,  # fp16 tensor cores
    "T4": 65.0,  # fp16 tensor cores
}


def peak_tflops_for(device_kind: str) -> float | None:
    """The bf16 peak of a known accelerator from its TF device description, else None."""
    for name in sorted(PEAK_TFLOPS, key=len, reverse=True):  # "TPU v5 lite" before "TPU v5"
        if name.lower() in device_kind.lower():
            return PEAK_TFLOPS[name]
    return None


def detect_peak_tflops() -> float | None:
    """The first accelerator's peak per device, or None (CPU: pass --peak_tflops, or see bench/)."""
    import keras

    if keras.backend.backend() == "jax":
        import jax

        device = jax.devices()[0]
        return None if device.platform == "cpu" else peak_tflops_for(device.device_kind)
    import tensorflow as tf

    for kind in ("TPU", "GPU"):
        for device in tf.config.list_logical_devices(kind):
            try:
                details = tf.config.experimental.get_device_details(tf.config.list_physical_devices(kind)[0])
                name = details.get("device_name", device.name)
            except (ValueError, IndexError):
                name = device.name
            return peak_tflops_for(str(name))
    return None


def measure_matmul_tflops(size: int = 2048, dtype: str = "float32", seconds: float = 2.0) -> float:
    """Achievable FLOP/s of this host in TFLOP/s: a large XLA-compiled matmul, timed."""
    import tensorflow as tf

    a = tf.random.stateless_normal((size, size), seed=(1, 2), dtype=dtype)
    b = tf.random.stateless_normal((size, size), seed=(3, 4), dtype=dtype)
    matmul = tf.function(lambda x, y: tf.matmul(x, y), jit_compile=True)
    matmul(a, b).numpy()  # compile
    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        matmul(a, b).numpy()
        runs += 1
    return 2.0 * size**3 * runs / (time.perf_counter() - start) / 1e12
