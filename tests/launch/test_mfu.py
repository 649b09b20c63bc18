"""Device peaks, what MFU divides the model's FLOP rate by."""

import pytest

from launch.mfu import peak_tflops_for


@pytest.mark.parametrize(
    "kind, peak",
    [("NVIDIA H200", 989.0), ("NVIDIA A100-SXM4-80GB", 312.0), ("TPU v5 lite", 197.0), ("TPU v4", 275.0),
     ("Tesla T4", 65.0), ("AMD EPYC", None)],
)  # fmt: skip
def test_peaks_of_known_devices(kind, peak):
    assert peak_tflops_for(kind) == peak
