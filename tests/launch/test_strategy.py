import json
import subprocess
import sys

import pytest
import tensorflow as tf

from launch.strategy import StrategyError, choose_strategy


def test_cpu_and_auto_on_a_cpu_machine_use_the_default_strategy(monkeypatch):
    monkeypatch.delenv("TPU_NAME", raising=False)
    assert choose_strategy("cpu") is tf.distribute.get_strategy()
    assert choose_strategy("auto").num_replicas_in_sync == 1


def test_missing_hardware_is_a_one_line_error(monkeypatch):
    with pytest.raises(
        StrategyError, match="^--strategy gpu: no GPU is visible to TensorFlow; use --strategy cpu"
    ):
        choose_strategy("gpu")
    with pytest.raises(
        StrategyError, match="^--strategy tpu: no TPU found at 'local' .*use --strategy gpu\\|cpu$"
    ):
        choose_strategy("tpu", tpu="local")
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(StrategyError, match="TF_CONFIG is not set"):
        choose_strategy("multi_worker")
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {}}')
    with pytest.raises(StrategyError, match="TF_CONFIG is not a valid cluster spec"):
        choose_strategy("multi_worker")
    with pytest.raises(
        StrategyError, match="--strategy quantum: expected one of auto, cpu, gpu, tpu, multi_worker"
    ):
        choose_strategy("quantum")


def test_multi_worker_from_tf_config_in_a_fresh_process():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = {"cluster": {"worker": [f"127.0.0.1:{port}"]}, "task": {"type": "worker", "index": 0}}
    script = (
        "import tensorflow as tf; from launch.strategy import choose_strategy; "
        "s = choose_strategy('multi_worker'); "
        "print(isinstance(s, tf.distribute.MultiWorkerMirroredStrategy), s.num_replicas_in_sync)"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                            env={**__import__("os").environ, "TF_CONFIG": json.dumps(config)})  # fmt: skip
    assert result.stdout.strip().splitlines()[-1] == "True 1", result.stderr[-2000:]
