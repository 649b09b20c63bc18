"""A span extractor served on raw strings: a question and its context in, the answer out, with no
bertbeam code to load it.

    served = tf.saved_model.load("finetune/qa/serving").signatures["serving_default"]
    out = served(question=tf.constant(["Who went?"]), context=tf.constant(["Kiyo went to Tokyo."]))
    out["answer_text"]                          # (B,) strings, "" for no answer
    out["answer_start"], out["answer_end"]      # (B,) int32 character offsets into the context, -1
    out["score"], out["null_score"]             # (B,) float32: the answer's start + end logits, [CLS]'s

Every step of evaluation's Python path (`encoding.encode_spans`, `encoding.best_answers`) runs again
as graph ops, batched: the question's pieces cut to max_query_length, the context's pieces with
their character offsets (`TextEncoder.pieces_with_spans`), windows of the room left `doc_stride`
apart, the n_best starts and ends of each window whose start has its most context there, the best
pair over a question's windows (ties to the first, as Python's loop keeps the first), "no answer"
where its score beats the best span by more than the threshold (when the model was trained on
unanswerable questions), and the context's characters with surrounding spaces stripped.
tests/launch/finetune/test_span_serving.py checks the answers equal the Python path's.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from launch.finetune.graph_ops import SPACES, best_window, dense, rows_at
from launch.finetune.text_encoder import TextEncoder


def windows_of(text_encoder: TextEncoder, question, context, max_query_length: int, doc_stride: int) -> dict:
    """Every question's windows as encode_spans lays them, [CLS] question [SEP] context range [SEP]:
    the features (W, T); each window's row, index within it, first context piece and offset (W,);
    the positions that are context (W, T), and those read best in this window; the context's
    piece spans (B, None)."""
    seq_len = text_encoder.seq_len
    asked = text_encoder.tokenize(question)[:, :max_query_length]
    ids, piece_start, piece_end = text_encoder.pieces_with_spans(context)
    n_asked, n = (tf.cast(t.row_lengths(), tf.int32) for t in (asked, ids))
    room = seq_len - n_asked - 3
    stride = tf.minimum(doc_stride, room)
    count, best = best_window(n, room, stride)
    k = tf.ragged.range(count)
    row, index = tf.cast(k.value_rowids(), tf.int32), k.flat_values
    start = index * tf.gather(stride, row)
    size = tf.minimum(tf.gather(room, row), tf.gather(n, row) - start)[:, None]
    asked_here = tf.gather(n_asked, row)[:, None]
    offset = asked_here + 2
    t = tf.range(seq_len)[None]
    piece = start[:, None] + t - offset
    in_context = (t >= offset) & (t < offset + size)
    closing = offset + size  # the last [SEP]
    ids_here = tf.where(in_context, rows_at(ids, row, piece), 0)
    ids_here = tf.where((t >= 1) & (t <= asked_here), rows_at(asked, row, t - 1), ids_here)
    ids_here = tf.where((t == asked_here + 1) | (t == closing), text_encoder.sep_id, ids_here)
    ids_here = tf.where(t == 0, text_encoder.cls_id, ids_here)
    return {
        "features": {
            "input_ids": ids_here,
            "input_mask": tf.cast(t <= closing, tf.int32),
            "segment_ids": tf.cast((t >= offset) & (t <= closing), tf.int32),
        },
        "windows": k,
        "row": row,
        "start": start,
        "offset": offset[:, 0],
        "in_context": in_context,
        "read_here": in_context & (rows_at(best, row, piece) == index[:, None]),
        "spans": (piece_start, piece_end),
    }


def raw_span_extractor(model: keras.Model, text_encoder: TextEncoder, *, max_query_length: int,
                       doc_stride: int, n_best: int, max_answer_length: int, allow_null: bool,
                       null_threshold: float):  # fmt: skip
    """The serving function: (B,) questions and contexts -> the answers (module docstring)."""
    top = min(n_best, text_encoder.seq_len)

    def serve(question, context):
        w = windows_of(text_encoder, question, context, max_query_length, doc_stride)
        logits = model(w["features"], training=False)
        starts, ends = (tf.cast(logits[name], tf.float32) for name in ("start", "end"))
        null = tf.math.segment_min(starts[:, 0] + ends[:, 0], w["windows"].value_rowids())

        # each window's n_best starts and ends over its context (top_k: ties to the lower position,
        # as a stable argsort), and the pairs best_answers keeps
        def best_of(logits):
            return tf.math.top_k(tf.where(w["in_context"], logits, -np.inf), k=top)[1]

        i, j = best_of(starts), best_of(ends)  # (W, top) positions
        ok_i = tf.gather(w["read_here"], i, batch_dims=1)
        ok_j = tf.gather(w["in_context"], j, batch_dims=1)
        i3, j3 = i[:, :, None], j[:, None, :]
        valid = ok_i[:, :, None] & ok_j[:, None, :] & (j3 >= i3) & (j3 - i3 + 1 <= max_answer_length)
        score = tf.gather(starts, i, batch_dims=1)[:, :, None] + tf.gather(ends, j, batch_dims=1)[:, None, :]
        score = tf.where(valid, score, -np.inf)

        # a question's pairs in best_answers' order (window, start rank, end rank): the first best wins
        per_question = w["windows"].with_flat_values(tf.reshape(score, [-1, top * top]))
        flat_scores = per_question.merge_dims(1, 2).to_tensor(-np.inf)  # (B, windows x top x top)
        best = tf.reduce_max(flat_scores, axis=1)
        place = tf.range(tf.shape(flat_scores)[1])[None]
        first = tf.reduce_min(tf.where(flat_scores == best[:, None], place, tf.int32.max), axis=1)
        found = tf.math.is_finite(best)
        first = tf.where(found, first, 0)
        window = tf.cast(w["windows"].row_starts(), tf.int32) + first // (top * top)
        rank_i, rank_j = first % (top * top) // top, first % top
        offset, start = tf.gather(w["offset"], window), tf.gather(w["start"], window)
        piece_start, piece_end = (dense(t, 0) for t in w["spans"])

        def piece_of(positions, rank):  # a chosen position as a context piece (0 where none was)
            piece = start + tf.gather_nd(positions, tf.stack([window, rank], 1)) - offset
            return tf.where(found, tf.clip_by_value(piece, 0, tf.shape(piece_start)[1] - 1), 0)

        begin = tf.gather(piece_start, piece_of(i, rank_i), batch_dims=1)
        end = tf.maximum(begin, tf.gather(piece_end, piece_of(j, rank_j), batch_dims=1))
        answer = tf.strings.substr(context, begin, end - begin, unit="UTF8_CHAR")

        # strip as str.strip(): a sentencepiece piece's span starts at the space its "▁" stands for
        def length(text):
            return tf.strings.length(text, unit="UTF8_CHAR")

        left = tf.strings.regex_replace(answer, f"^[{SPACES}]+", "")
        stripped = tf.strings.regex_replace(left, f"[{SPACES}]+$", "")
        begin += length(answer) - length(left)
        end = begin + length(stripped)
        none = ~found | (length(stripped) == 0)  # e.g. a lone "▁" piece: only a space
        if allow_null:
            none |= tf.cast(null, tf.float64) > tf.cast(best, tf.float64) + null_threshold
        return {
            "answer_text": tf.where(none, "", stripped),
            "answer_start": tf.where(none, -1, begin),
            "answer_end": tf.where(none, -1, end),
            "score": best,
            "null_score": null,
        }

    return serve


def raw_endpoints(model: keras.Model, text_encoder: TextEncoder, **options) -> dict:
    """The SavedModel's one signature, "serving_default": `question` and `context` (B,) strings to
    answers (`options`: raw_span_extractor's)."""
    specs = [
        tf.TensorSpec((None,), tf.string, name="question"),
        tf.TensorSpec((None,), tf.string, name="context"),
    ]
    return {"serving_default": (raw_span_extractor(model, text_encoder, **options), specs)}
