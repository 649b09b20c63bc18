"""What the served classifier returns: the logits, the probabilities, the label's id and its name,
for raw strings (`text`, and `text_pair` for a pair task) or, where the vocab has no graph
tokeniser, for the model inputs.

    served = tf.saved_model.load("finetune/reviews/serving")
    out = served.signatures["serving_default"](text=tf.constant(["a fine film"]))
    out["label"], out["probabilities"]             # (B,) strings, (B, L) float32
    served.signatures["tokenize"](text=...)        # the model inputs the text encodes to
"""

from __future__ import annotations

import keras
import tensorflow as tf


def predictions(classifier: keras.Model, names: list[str]):
    """For a batch of model inputs: logits, probabilities, label_id and the label's name."""
    label_names_tensor = tf.constant(names)

    def predict(inputs: dict) -> dict:
        logits = tf.cast(classifier(inputs, training=False), tf.float32)
        label_id = tf.argmax(logits, axis=-1, output_type=tf.int32)
        return {
            "logits": logits,
            "probabilities": tf.nn.softmax(logits),
            "label_id": label_id,
            "label": tf.gather(label_names_tensor, label_id),
        }

    return predict


def raw_endpoints(classifier: keras.Model, text_encoder, names: list[str], pairs: bool) -> dict:
    """ "serving_default" (raw strings to `predictions`) and "tokenize" (raw strings to the model
    inputs), each taking `text` and, for a pair task, `text_pair`."""
    predict = predictions(classifier, names)
    text = tf.TensorSpec((None,), tf.string, name="text")
    if pairs:
        specs = [text, tf.TensorSpec((None,), tf.string, name="text_pair")]
        return {
            "serving_default": (lambda t, p: predict(text_encoder(t, p)), specs),
            "tokenize": (lambda t, p: text_encoder(t, p), specs),
        }
    return {
        "serving_default": (lambda t: predict(text_encoder(t)), [text]),
        "tokenize": (lambda t: text_encoder(t), [text]),
    }
