"""Token tagging's encoding: examples into static windows of pieces with labels, and the tagger's
scores decoded back into character-level entities (`metrics.py` scores them).

    data = encode_tagged(found.examples, vocab, labels, seq_len=128, doc_stride=64)
    data.features, data.labels                 # (W, T) int32 arrays, one row per window
    entities = predicted_entities(data, decoded) # per example: (type, start, end) in characters

Each window is [CLS] pieces [SEP], zero-padded to seq_len (static shapes); a label sits on each
unit's first piece (`alignment.py`), IGNORE elsewhere. A unit is predicted from the window where
its first piece has the most context. Decoding is Viterbi in the graph: the CRF's transitions, or
for a softmax tagger the valid-BIO constraints over its log-probabilities, so both give valid BIO.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import keras
import numpy as np

from launch.finetune.skeleton import filled
from launch.finetune.tag.alignment import piece_labels, unit_labels, units_of
from launch.finetune.tag.data import Tagged
from launch.finetune.tag.schemes import Entity, bio_constraints, entities
from launch.finetune.windows import best_windows, windows
from model.tasks import IGNORE
from model.tasks.crf import compact, expand, viterbi


@dataclasses.dataclass
class TagData:
    features: dict[str, np.ndarray]  # input_ids, input_mask, segment_ids: (W, T) int32
    labels: np.ndarray  # (W, T) int32 label ids, IGNORE where no label
    decode_mask: np.ndarray  # (W, T) bool: the positions that carry a label (first pieces, or all)
    owners: list[list[tuple[int, int, int]]]  # per example: (window, position, unit) each unit is read at
    units: list  # per example: its `Units` (characters of each unit)
    lost: int  # gold entities the tokenizer cannot hold exactly (alignment.unit_labels)

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def targets(self) -> np.ndarray:  # what the loss compares the scores with
        return self.labels


def encode_tagged(examples: Sequence[Tagged], vocab, labels: Sequence[str], seq_len: int, doc_stride: int,
                  all_pieces: bool = False) -> TagData:  # fmt: skip
    """Every example's windows; entities of types `labels` lacks are left out of the labels (their
    gold stays in the figures, where they count as missed)."""
    label_ids = {label: i for i, label in enumerate(labels)}
    known = {label[2:] for label in labels if label != "O"}
    cls, sep = vocab.special_ids["cls"], vocab.special_ids["sep"]
    encoded = vocab.encode_with_spans([example.text for example in examples])
    rows, owners, all_units, lost = [], [], [], 0
    for example, (ids, spans) in zip(examples, encoded, strict=True):
        units = units_of(example.words, spans)
        tags, unaligned = unit_labels(units, [e for e in example.entities if e[0] in known])
        lost += unaligned
        per_piece = piece_labels(units, tags, label_ids, all_pieces)
        reads = [u >= 0 and (all_pieces or p == units.first_piece[u]) for p, u in enumerate(units.piece_unit)]
        spans_of = windows(len(ids), seq_len - 2, doc_stride)
        best = best_windows(len(ids), spans_of)
        mine = []
        for w, (start, size) in enumerate(spans_of):
            piece = slice(start, start + size)
            rows.append(
                ([cls, *ids[piece], sep], [IGNORE, *per_piece[piece], IGNORE], [False, *reads[piece], False])
            )
            for p in range(start, start + size):
                unit = units.piece_unit[p]
                if best[p] == w and unit >= 0 and units.first_piece[unit] == p:
                    mine.append((len(rows) - 1, p - start + 1, unit))
        owners.append(mine)
        all_units.append(units)
    n = len(rows)
    input_ids = np.zeros((n, seq_len), np.int32)
    label_rows = np.full((n, seq_len), IGNORE, np.int32)
    decode_mask = np.zeros((n, seq_len), bool)
    for i, (ids, row_labels, reads) in enumerate(rows):
        input_ids[i, : len(ids)], label_rows[i, : len(ids)], decode_mask[i, : len(ids)] = (
            ids,
            row_labels,
            reads,
        )
    features = {"input_ids": input_ids, "input_mask": (input_ids != 0).astype(np.int32),
                "segment_ids": np.zeros((n, seq_len), np.int32)}  # fmt: skip
    # [PAD] is id 0 in every vocab this project reads (pipeline/vocab/__init__.py checks it), so the mask is
    # the real pieces; the first position is [CLS] even for an empty text.
    features["input_mask"][:, 0] = 1
    return TagData(features, label_rows, decode_mask, owners, all_units, lost)


def decoder(model: keras.Model, labels: Sequence[str], crf: bool, jit_compile: bool = True):
    """(features, mask) -> (B, T) label ids, compiled: the model's scores, Viterbi-decoded with
    the CRF's transitions or the valid-BIO constraints. On TensorFlow a `tf.function`; on JAX a
    `jax.jit` that takes the model's variables as arguments, so that each epoch's call decodes
    with that epoch's weights rather than those its first call saw."""
    decode = decoding(model, labels, crf)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.function(decode, jit_compile=jit_compile)
    import jax

    variables = model.variables

    @jax.jit
    def stateless(values, features, mask):
        with keras.StatelessScope(state_mapping=list(zip(variables, values, strict=True))):
            return decode(features, mask)

    return lambda features, mask: stateless([v.value for v in variables], features, mask)


def decoding(model: keras.Model, labels: Sequence[str], crf: bool):
    """`decoder`'s function itself, in Keras ops, for a graph that holds more (the raw-string
    SavedModel)."""
    transitions, start = bio_constraints(labels)

    def decode(features, mask):
        scores = model(features, training=False)
        if crf:
            return model.get_layer("crf").decode(scores, mask)
        compacted, lengths = compact(keras.ops.log_softmax(scores), mask)
        path = viterbi(compacted, lengths, transitions, start, keras.ops.zeros(len(labels)))
        return expand(path, mask)

    return decode


def decoded_labels(decode, data: TagData, batch: int) -> np.ndarray:
    """(W, T) label ids of every window, in full batches (the last one padded with copies of the
    first window, dropped after)."""
    n = len(data)
    take = filled(n, batch)
    out = []
    for start in range(0, len(take), batch):
        rows = take[start : start + batch]
        features = {k: v[rows] for k, v in data.features.items()}
        out.append(np.asarray(decode(features, data.decode_mask[rows])))
    return np.concatenate(out)[:n]


def predicted_entities(data: TagData, decoded: np.ndarray, labels: Sequence[str]) -> list[list[Entity]]:
    """Each example's entities in characters: its units' labels, each read from the window it is
    owned by, as BIO tags, through conlleval's chunk rules."""
    found = []
    for units, owned in zip(data.units, data.owners, strict=True):
        tags = ["O"] * len(units)
        for window, position, unit in owned:
            tags[unit] = labels[decoded[window, position]]
        found.append([(kind, units.spans[s][0], units.spans[e - 1][1]) for kind, s, e in entities(tags)])
    return found
