"""The checkpoint file both backends read and write, against the TensorFlow checkpoints bertbeam
wrote before it: a run from before the format resumes with every variable, and its next save is
a safetensors file that reads back the same."""

from __future__ import annotations

import json

import keras
import numpy as np
import tensorflow as tf

from launch.checkpoints import Checkpoints, model_variables, optimizer_variables, read_checkpoint
from launch.optimizer import build_optimizer
from model.config import BertConfig
from model.masked_lm import build_pretraining_model


def model_and_optimizer(seed: int):
    keras.utils.set_random_seed(seed)
    model = build_pretraining_model(BertConfig(53, 12, 1, 3, 20, 16), 11, 3)  # odd, tiny
    optimizer = build_optimizer("adamw", learning_rate=1e-3, warmup_steps=2, total_steps=10)
    optimizer.build(model.trainable_variables)
    for i, variable in enumerate(optimizer.variables):  # slots and counter away from their zeros
        variable.assign(np.full(variable.shape, i + seed, keras.backend.standardize_dtype(variable.dtype)))
    return model, optimizer


def test_a_tensorflow_checkpoint_from_before_resumes_and_saves_in_the_new_format(tmp_path):
    old_model, old_optimizer = model_and_optimizer(1)
    # What bertbeam wrote before: tf.train.Checkpoint of two dicts of tf.Variables, by a manager.
    legacy = tf.train.Checkpoint(
        model={k: v.value for k, v in model_variables(old_model).items()},
        optimizer={k: v.value for k, v in optimizer_variables(old_optimizer).items()},
    )
    folder = tmp_path / "checkpoints"
    tf.train.CheckpointManager(legacy, str(folder), max_to_keep=3).save(checkpoint_number=7)
    assert Checkpoints.latest_step(str(folder)) == 7

    model, optimizer = model_and_optimizer(2)  # other weights, other slots
    checkpoints = Checkpoints(model, optimizer, str(folder), keep=3)
    assert checkpoints.restore() == int(old_optimizer.iterations.numpy())
    old = {**{f"model/{k}": v for k, v in model_variables(old_model).items()},
           **{f"optimizer/{k}": v for k, v in optimizer_variables(old_optimizer).items()}}  # fmt: skip
    assert old.keys() == checkpoints.variables().keys()
    for key, variable in checkpoints.variables().items():
        np.testing.assert_array_equal(np.asarray(variable.numpy()), np.asarray(old[key].numpy()), err_msg=key)

    path = checkpoints.save(8)
    assert path == f"{folder}/ckpt-8" and json.loads((folder / "checkpoints.json").read_text()) == {
        "checkpoints": ["ckpt-8"]
    }
    tensors, metadata = read_checkpoint(path)
    assert metadata["step"] == "8" and metadata["backend"] == "tensorflow"
    assert tensors.keys() == old.keys()
    for key, variable in old.items():
        np.testing.assert_array_equal(tensors[key], np.asarray(variable.numpy()), err_msg=key)
    assert Checkpoints.latest_step(str(folder)) == 8
