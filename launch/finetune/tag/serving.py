"""A tagger served on raw strings: text in, entities out, with no bertbeam code to load it.

    served = tf.saved_model.load("finetune/ner/serving").signatures["serving_default"]
    out = served(text=tf.constant(["Kiyo went to Tokyo."]))
    out["entity_type"], out["entity_text"]     # (B, E) strings, "" past a text's own entities
    out["entity_start"], out["entity_end"]     # (B, E) int32 character offsets, -1 past them
    out["entity_count"]                        # (B,) int32

Every step of fine-tuning's Python path (encoding.py) is done again here as graph ops, batched:
the words are `data.words_of`'s (WORD_SPLITS is its rule for RE2), the pieces and their
character offsets `TextEncoder.pieces_with_spans` (the vocab's own ids and offsets), units as
`alignment.units_of`, windows and the window each unit is read from as `windows.windows` and
`best_windows` (launch/finetune/), decoding as `encoding.decoder`, and entities by conlleval's
rules (`schemes.entities`). So a text served gives the entities that fine-tuning's evaluation would
predict for it as a JSONL text row (tests/launch/finetune/test_tag_serving.py checks it, window edges
included). The graph has data-dependent shapes (a text's words, windows, entities): it serves, on
any device, but is not compiled with XLA; the tagger inside it is the one trained under XLA.
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
import tensorflow as tf
import tensorflow_text as tft

from launch.finetune.graph_ops import SPACES, best_window, dense, rows_at
from launch.finetune.tag.data import CJK
from launch.finetune.tag.encoding import decoding
from launch.finetune.tag.schemes import split_tag
from launch.finetune.text_encoder import TextEncoder, chars_before, without_nul

# `words_of`'s rule (a CJK ideograph alone, a run of other word characters, any other character
# that is not a space alone) for RE2, whose \w and \s are ASCII only. Python's Unicode \w is
# letters, numbers and "_"; its \s the characters str.isspace() lists. RE2's Unicode tables are
# older past the BMP (test_tag_serving.py checks every BMP character agrees).
CJK_CLASS = "[" + "".join(c if c == "-" else f"\\x{{{ord(c):X}}}" for c in CJK) + "]"
WORD_SPLITS = f"{CJK_CLASS}|[^\\p{{L}}\\p{{N}}_{SPACES}]"
BIG = 2**30  # past any character offset: pads sorted rows so searches never land on padding


def graph_words(text: tf.Tensor) -> tuple[tf.RaggedTensor, tf.RaggedTensor]:
    """(B,) strings -> each word's (start, end) in characters, as `data.words_of`."""
    words, starts, ends = tft.regex_split_with_offsets(
        without_nul(text), f"[{SPACES}]+|{WORD_SPLITS}", WORD_SPLITS
    )
    rows = tf.gather(text, words.value_rowids())
    return tuple(words.with_flat_values(chars_before(rows, o.flat_values)) for o in (starts, ends))


def segment(values, ids, count: tf.Tensor, reduce):
    """`reduce` of `values` (B, N) into `count` segments by `ids` (B, N); ids < 0 go nowhere."""
    ids = tf.where(ids >= 0, ids, count)
    return reduce(tf.reshape(values, [-1]), tf.reshape(ids, [-1]), count + 1)[:count]


def units(words: tuple, pieces: tuple):
    """`alignment.units_of` for a batch: dense (B, W + 1) unit spans and first pieces (-1: none)
    and (B, P + 1) piece units (-1: on no word), from ragged word and piece spans."""
    word_start, word_end = (dense(t, BIG) for t in words)
    piece_start, piece_end = (dense(t, BIG) for t in pieces)
    batch, n_words, n_pieces = tf.shape(word_start)[0], tf.shape(word_start)[1], tf.shape(piece_start)[1]

    def rows_of(x):  # each element's row
        return tf.broadcast_to(tf.range(batch)[:, None], tf.shape(x))

    word_ok = tf.sequence_mask(words[0].row_lengths(), n_words)
    piece_ok = tf.sequence_mask(pieces[0].row_lengths(), n_pieces)
    first = tf.searchsorted(word_end, piece_start, side="right")  # words ending by the piece's start
    past = tf.searchsorted(word_start, piece_end, side="left")  # words starting before its end
    on_word = piece_ok & (past > first) & (piece_end > piece_start)
    # a piece over words first..past-1 joins words first+1..past-1 to the unit of `first`
    spread = on_word & (past > first + 1)
    at = tf.boolean_mask(rows_of(first), spread)
    ones = tf.ones_like(at)
    steps = tf.zeros([batch, n_words + 1], tf.int32)
    steps = tf.tensor_scatter_nd_add(steps, tf.stack([at, tf.boolean_mask(first + 1, spread)], 1), ones)
    steps = tf.tensor_scatter_nd_add(steps, tf.stack([at, tf.boolean_mask(past, spread)], 1), -ones)
    new_unit = word_ok & ~(tf.cumsum(steps, axis=1)[:, :n_words] > 0)
    unit_of_word = tf.cumsum(tf.cast(new_unit, tf.int32), axis=1) - 1
    piece_unit = tf.where(on_word, tf.gather(unit_of_word, tf.minimum(first, n_words - 1), batch_dims=1), -1)

    def per_unit(values, of, valid, reduce):  # (B, W + 1) by unit, each row's units in its own range
        ids = tf.where(valid, rows_of(of) * n_words + of, -1)
        return tf.reshape(segment(values, ids, batch * n_words, reduce), [batch, n_words])

    spans = (
        per_unit(word_start, unit_of_word, word_ok, tf.math.unsorted_segment_min),
        per_unit(word_end, unit_of_word, word_ok, tf.math.unsorted_segment_max),
    )
    positions = tf.broadcast_to(tf.range(n_pieces)[None], tf.shape(piece_unit))
    first_piece = per_unit(positions, piece_unit, on_word, tf.math.unsorted_segment_min)
    n_units = tf.reduce_sum(tf.cast(new_unit, tf.int32), axis=1)
    real = (tf.range(n_words)[None] < n_units[:, None]) & (first_piece < n_pieces)  # not padding, a piece
    first_piece = tf.where(real, first_piece, -1)
    return spans, first_piece, piece_unit


def raw_tagger(tagger: keras.Model, text_encoder: TextEncoder, labels: Sequence[str], crf: bool,
               all_pieces: bool, doc_stride: int):  # fmt: skip
    """The serving function: (B,) strings -> the entities (module docstring)."""
    decode = decoding(tagger, labels, crf)
    seq_len = text_encoder.seq_len
    length = seq_len - 2
    kinds = [split_tag(label)[1] for label in labels]
    names = ["", *sorted({k for k in kinds if k})]
    kind_of = tf.constant([names.index(k) for k in kinds], tf.int32)
    begins = tf.constant([split_tag(label)[0] == "B" for label in labels])
    outside = labels.index("O")

    def serve(text):
        ids, *pieces = text_encoder.pieces_with_spans(text)
        (unit_start, unit_end), first_piece, piece_unit = units(graph_words(text), tuple(pieces))
        n = tf.cast(ids.row_lengths(), tf.int32)
        reads = piece_unit >= 0
        if not all_pieces:
            reads &= (
                tf.gather(first_piece, tf.maximum(piece_unit, 0), batch_dims=1)
                == tf.range(tf.shape(piece_unit)[1])[None]
            )
        count, best = best_window(n, length, doc_stride)

        # every window of every text, [CLS] pieces [SEP] padded to seq_len, as encode_tagged lays them
        k = tf.ragged.range(count)
        row, start = k.value_rowids(), k.flat_values * doc_stride
        size = tf.minimum(length, tf.gather(n, row) - start)
        t = tf.range(seq_len)[None]
        piece = start[:, None] + t - 1
        in_piece = (t >= 1) & (t <= size[:, None])
        row = tf.cast(row, tf.int32)
        piece_ids = rows_at(ids, row, piece)
        sep = tf.where(t == size[:, None] + 1, text_encoder.sep_id, 0)
        special = tf.where(t == 0, text_encoder.cls_id, sep)
        features = {
            "input_ids": tf.where(in_piece, piece_ids, special),
            "input_mask": tf.cast(t <= size[:, None] + 1, tf.int32),
            "segment_ids": tf.zeros_like(piece_ids),
        }
        decoded = decode(features, in_piece & rows_at(reads, row, piece))

        # each unit's label from the window its first piece is read in
        owned = first_piece >= 0
        window = tf.gather(best, tf.maximum(first_piece, 0), batch_dims=1)
        at = tf.stack([tf.cast(k.row_starts(), tf.int32)[:, None] + window,
                       first_piece - window * doc_stride + 1], axis=-1)  # fmt: skip
        label = tf.where(owned, tf.gather_nd(decoded, tf.where(owned[..., None], at, 0)), outside)

        # conlleval's chunks over BIO: a chunk starts at B-X, or at I-X after anything but X
        kind = tf.gather(kind_of, label)
        before = tf.pad(kind[:, :-1], [[0, 0], [1, 0]])
        starts = (kind > 0) & (tf.gather(begins, label) | (before != kind))
        per_row = tf.reduce_sum(tf.cast(starts, tf.int32), axis=1)
        first_of_row = tf.cumsum(per_row, exclusive=True)
        total = tf.reduce_sum(per_row)
        counted = first_of_row[:, None] + tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1
        entity = tf.where(kind > 0, counted, -1)  # the entity each unit is in
        begin = segment(unit_start, entity, total, tf.math.unsorted_segment_min)
        end = segment(unit_end, entity, total, tf.math.unsorted_segment_max)
        rows = tf.boolean_mask(tf.broadcast_to(tf.range(tf.shape(kind)[0])[:, None], tf.shape(kind)), starts)
        found = {
            "entity_type": tf.gather(tf.constant(names), tf.boolean_mask(kind, starts)),
            "entity_start": begin,
            "entity_end": end,
            "entity_text": tf.strings.substr(tf.gather(text, rows), begin, end - begin, unit="UTF8_CHAR"),
        }
        pads = {"entity_type": "", "entity_text": "", "entity_start": -1, "entity_end": -1}
        out = {
            name: tf.RaggedTensor.from_row_lengths(values, per_row).to_tensor(pads[name])
            for name, values in found.items()
        }
        return out | {"entity_count": per_row}

    return serve


def raw_endpoints(tagger: keras.Model, text_encoder: TextEncoder, labels: Sequence[str], crf: bool,
                  all_pieces: bool, doc_stride: int) -> dict:  # fmt: skip
    """The SavedModel's one signature, "serving_default": `text` (B,) strings to entities."""
    serve = raw_tagger(tagger, text_encoder, labels, crf, all_pieces, doc_stride)
    return {"serving_default": (serve, [tf.TensorSpec((None,), tf.string, name="text")])}
