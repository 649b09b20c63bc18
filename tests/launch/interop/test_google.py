"""Google BERT checkpoints: a checkpoint written here under google-research/bert's exact names and
shapes loads into our model, whose encoder then computes what a numpy transcription of Google's
`modeling.py` computes from the same arrays; ours written back out reads under those names."""

import json
import math

import numpy as np
import pytest
import tensorflow as tf

from launch.interop.google import (
    GoogleCheckpointError,
    google_bert_config,
    load_google_checkpoint,
    save_google_checkpoint,
)
from model.encoder import encoder_from
from model.masked_lm import build_pretraining_model

V, H, HEADS, INNER, LAYERS, MAXPOS, T, P = 37, 12, 3, 29, 2, 16, 7, 3
GOOGLE_CONFIG = {
    "vocab_size": V, "hidden_size": H, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
    "intermediate_size": INNER, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1, "max_position_embeddings": MAXPOS, "type_vocab_size": 2,
    "initializer_range": 0.02,
}  # fmt: skip


def google_arrays(seed=0) -> dict[str, np.ndarray]:
    """Every tensor of a Google BERT pretraining checkpoint, by its name, with its shape."""
    rng = np.random.default_rng(seed)
    shapes = {
        "bert/embeddings/word_embeddings": (V, H),
        "bert/embeddings/token_type_embeddings": (2, H),
        "bert/embeddings/position_embeddings": (MAXPOS, H),
        "bert/embeddings/LayerNorm/gamma": (H,),
        "bert/embeddings/LayerNorm/beta": (H,),
        "bert/pooler/dense/kernel": (H, H),
        "bert/pooler/dense/bias": (H,),
        "cls/predictions/transform/dense/kernel": (H, H),
        "cls/predictions/transform/dense/bias": (H,),
        "cls/predictions/transform/LayerNorm/gamma": (H,),
        "cls/predictions/transform/LayerNorm/beta": (H,),
        "cls/predictions/output_bias": (V,),
        "cls/seq_relationship/output_weights": (2, H),
        "cls/seq_relationship/output_bias": (2,),
    }
    for i in range(LAYERS):
        g = f"bert/encoder/layer_{i}"
        for part in ("query", "key", "value"):
            shapes[f"{g}/attention/self/{part}/kernel"] = (H, H)
            shapes[f"{g}/attention/self/{part}/bias"] = (H,)
        shapes |= {
            f"{g}/attention/output/dense/kernel": (H, H),
            f"{g}/attention/output/dense/bias": (H,),
            f"{g}/attention/output/LayerNorm/gamma": (H,),
            f"{g}/attention/output/LayerNorm/beta": (H,),
            f"{g}/intermediate/dense/kernel": (H, INNER),
            f"{g}/intermediate/dense/bias": (INNER,),
            f"{g}/output/dense/kernel": (INNER, H),
            f"{g}/output/dense/bias": (H,),
            f"{g}/output/LayerNorm/gamma": (H,),
            f"{g}/output/LayerNorm/beta": (H,),
        }
    return {name: rng.normal(0, 0.3, shape).astype("float32") for name, shape in shapes.items()}


def write(arrays: dict, prefix: str) -> None:
    names = sorted(arrays)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(arrays[n]) for n in names])  # fmt: skip


def google_encoder(w: dict, ids, segments, mask) -> np.ndarray:
    """google-research/bert modeling.py's forward pass, in numpy (no dropout)."""

    def layer_norm(x, prefix):
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-12) * w[f"{prefix}/gamma"] + w[f"{prefix}/beta"]

    def gelu(x):  # modeling.py's tanh form
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))

    x = w["bert/embeddings/word_embeddings"][ids] + w["bert/embeddings/token_type_embeddings"][segments]
    x = layer_norm(x + w["bert/embeddings/position_embeddings"][: ids.shape[1]], "bert/embeddings/LayerNorm")
    size = H // HEADS
    adder = (1.0 - mask[:, None, None, :]) * -10000.0  # (B, 1, 1, T)
    for i in range(LAYERS):
        g = f"bert/encoder/layer_{i}"

        def heads(name, x=x, g=g):  # (B, T, H) -> (B, heads, T, size)
            y = x @ w[f"{g}/attention/self/{name}/kernel"] + w[f"{g}/attention/self/{name}/bias"]
            return y.reshape(*y.shape[:2], HEADS, size).transpose(0, 2, 1, 3)

        q, k, v = heads("query"), heads("key"), heads("value")
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(size) + adder
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(x.shape)
        attention = context @ w[f"{g}/attention/output/dense/kernel"] + w[f"{g}/attention/output/dense/bias"]
        x = layer_norm(attention + x, f"{g}/attention/output/LayerNorm")
        inner = gelu(x @ w[f"{g}/intermediate/dense/kernel"] + w[f"{g}/intermediate/dense/bias"])
        x = layer_norm(
            inner @ w[f"{g}/output/dense/kernel"] + w[f"{g}/output/dense/bias"] + x, f"{g}/output/LayerNorm"
        )
    return x


@pytest.fixture
def google_checkpoint(tmp_path):
    arrays = google_arrays()
    write(arrays, str(tmp_path / "bert_model.ckpt"))
    (tmp_path / "bert_config.json").write_text(json.dumps(GOOGLE_CONFIG))
    return tmp_path, arrays


def test_a_google_checkpoint_loads_and_computes_what_googles_code_computes(google_checkpoint):
    folder, arrays = google_checkpoint
    config = google_bert_config(str(folder / "bert_config.json"))
    assert config.hidden_act == "gelu_approximate" and config.num_layers == LAYERS
    model = build_pretraining_model(config, T, P, next_sentence=True)
    load_google_checkpoint(model, str(folder / "bert_model.ckpt"))

    rng = np.random.default_rng(1)
    ids = rng.integers(0, V, (4, T)).astype("int32")
    segments = rng.integers(0, 2, (4, T)).astype("int32")
    mask = np.ones((4, T), "int32")
    mask[1, 5:] = 0
    ours = encoder_from(model)(
        {"input_ids": ids, "input_mask": mask, "segment_ids": segments, "document_ids": mask}, training=False
    )
    expected = google_encoder(arrays, ids, segments, mask.astype("float32"))
    real = mask.astype(bool)  # padding rows differ by design: ours keep pads out of their own keys too
    np.testing.assert_allclose(ours["sequence_output"].numpy()[real], expected[real], atol=2e-4)
    pooled = np.tanh(expected[:, 0] @ arrays["bert/pooler/dense/kernel"] + arrays["bert/pooler/dense/bias"])
    np.testing.assert_allclose(ours["pooled_output"].numpy(), pooled, atol=2e-4)
    np.testing.assert_array_equal(
        model.get_layer("nsp_logits").kernel.numpy(), arrays["cls/seq_relationship/output_weights"].T
    )


def test_ours_written_in_googles_format_reads_back_under_its_names(google_checkpoint, tmp_path):
    folder, arrays = google_checkpoint
    config = google_bert_config(str(folder / "bert_config.json"))
    model = build_pretraining_model(config, T, P, next_sentence=True)
    load_google_checkpoint(model, str(folder / "bert_model.ckpt"))
    out = str(tmp_path / "out" / "bert_model.ckpt")
    save_google_checkpoint(model, out)
    written = dict(tf.train.list_variables(out))
    assert written == {name: list(value.shape) for name, value in arrays.items()}
    for name, value in arrays.items():
        np.testing.assert_array_equal(tf.train.load_variable(out, name), value, err_msg=name)


def test_a_missing_or_misshapen_variable_is_named(google_checkpoint, tmp_path):
    folder, arrays = google_checkpoint
    config = google_bert_config(str(folder / "bert_config.json"))
    model = build_pretraining_model(config, T, P, next_sentence=True)
    missing = {k: v for k, v in arrays.items() if k != "bert/encoder/layer_1/intermediate/dense/bias"}
    write(missing, str(tmp_path / "missing.ckpt"))
    named = r"missing.ckpt: no variable bert/encoder/layer_1/intermediate/dense/bias \(for transformer_1/"
    with pytest.raises(GoogleCheckpointError, match=named):
        load_google_checkpoint(model, str(tmp_path / "missing.ckpt"))
    wrong = {**arrays, "bert/embeddings/word_embeddings": np.zeros((V + 1, H), "float32")}
    write(wrong, str(tmp_path / "wrong.ckpt"))
    shaped = r"word_embeddings has shape \(38, 12\), the model's token_embedding/embeddings needs \(37, 12\)"
    with pytest.raises(GoogleCheckpointError, match=shaped):
        load_google_checkpoint(model, str(tmp_path / "wrong.ckpt"))


def test_init_checkpoint_takes_a_google_release_folder(google_checkpoint):
    from launch.checkpoints import CheckpointError
    from launch.interop.formats import warm_start

    folder, arrays = google_checkpoint
    model = build_pretraining_model(google_bert_config(str(folder / "bert_config.json")), T, P)
    warm_start(model, str(folder))  # the unpacked release: bert_config.json + bert_model.ckpt.*
    np.testing.assert_array_equal(
        model.get_layer("transformer_1").intermediate.kernel.numpy(),
        arrays["bert/encoder/layer_1/intermediate/dense/kernel"],
    )
    # The same folder now holding a release for another vocab size:
    write(
        {**arrays, "cls/predictions/output_bias": np.zeros(V + 3, "float32")}, str(folder / "bert_model.ckpt")
    )
    with pytest.raises(
        CheckpointError, match=r"^--init_checkpoint .*bert_model.ckpt: cls/predictions/output_bias has shape"
    ):
        warm_start(model, str(folder))
