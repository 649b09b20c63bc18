"""Labelled examples for fine-tuning, from JSONL, TSV/CSV with a header row, or a tfds split.

    examples = read_examples("train.tsv", LabelledFormat(text_field="sentence", label_field="label"))
    examples.texts, examples.pairs, examples.labels, examples.bad_rows   # {"empty text": 2, ...}

A row that cannot be used is counted under its reason and skipped, never fatal: an empty text,
a missing field, a TSV/CSV row with the wrong number of columns, a line that is not JSON, and
(`keep_labels`) a label the training split never had. A file that cannot be read at all, or
whose header lacks a named column, is a one-line `LabelledDataError`.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import io
import json

import tensorflow as tf

from common.errors import BertbeamError

FORMATS = ("auto", "jsonl", "tsv", "csv", "tfds")


class LabelledDataError(BertbeamError):
    """A labelled file or split that cannot be read at all; one line naming it and why."""


@dataclasses.dataclass(frozen=True)
class LabelledFormat:
    text_field: str = "text"
    text_pair_field: str | None = None
    label_field: str = "label"
    format: str = "auto"
    tfds_data_dir: str | None = None


@dataclasses.dataclass
class Examples:
    texts: list[str]
    pairs: list[str] | None  # None for single-sentence tasks
    labels: list[str]  # as strings; ints are written in decimal
    bad_rows: dict[str, int]  # reason -> rows skipped

    def __len__(self) -> int:
        return len(self.labels)


def format_of(path: str, fmt: str) -> str:
    if fmt != "auto":
        return fmt
    for suffix, kind in ((".jsonl", "jsonl"), (".json", "jsonl"), (".tsv", "tsv"), (".csv", "csv")):
        if path.endswith(suffix):
            return kind
    raise LabelledDataError(f"{path}: cannot tell the format from its name; pass --format jsonl|tsv|csv")


def read_examples(source: str, spec: LabelledFormat, keep_labels: list[str] | None = None) -> Examples:
    """`source` is a file (local or gs://), or NAME:SPLIT with format tfds (--tfds_name)."""
    fmt = format_of(source, spec.format)
    if fmt == "tfds":
        rows = _tfds_rows(source, spec)
    else:
        if not tf.io.gfile.exists(source):
            raise LabelledDataError(f"{source}: no such file")
        with tf.io.gfile.GFile(source, "rb") as f:
            raw = f.read()
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise LabelledDataError(f"{source}: not UTF-8 at byte {e.start}") from None
        rows = _jsonl_rows(text) if fmt == "jsonl" else _table_rows(source, text, fmt, spec)
    return _examples(rows, spec, keep_labels)


def _jsonl_rows(text: str):
    # "\n" only: str.splitlines() would also split inside a text holding U+2028 or U+0085, which
    # JSON writers leave unescaped.
    for line in text.split("\n"):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            yield "not JSON"
            continue
        yield row if isinstance(row, dict) else "not a JSON object"


def _table_rows(source: str, text: str, fmt: str, spec: LabelledFormat):
    # TSV as GLUE writes it: tabs only, quotes are text. CSV: the csv module's quoting.
    reader = (
        csv.reader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE)
        if fmt == "tsv"
        else csv.reader(io.StringIO(text))
    )
    header = next(reader, None)
    if header is None:
        raise LabelledDataError(f"{source}: empty; expected a header row")
    for name in (spec.text_field, spec.text_pair_field, spec.label_field):
        if name is not None and name not in header:
            raise LabelledDataError(f"{source}: no column {name!r} in the header (found {', '.join(header)})")
    for row in reader:
        if not row:
            continue
        if len(row) != len(header):
            yield "wrong column count"
            continue
        yield dict(zip(header, row, strict=True))


def _tfds_rows(source: str, spec: LabelledFormat):
    import tensorflow_datasets as tfds

    name, _, split = source.rpartition(":")
    if not name:
        raise LabelledDataError(f"{source}: expected a split of the --tfds_name dataset")
    try:
        builder = tfds.builder(name, data_dir=spec.tfds_data_dir)
        ds = builder.as_dataset(split=split)
    except Exception as e:  # noqa: BLE001 - not prepared, unknown name or split: all one line
        cause = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise LabelledDataError(f"tfds {source}: cannot read ({cause})") from None
    label_feature = (
        builder.info.features[spec.label_field] if spec.label_field in builder.info.features else None
    )
    names = getattr(label_feature, "names", None)
    for row in tfds.as_numpy(ds):
        row = {k: v.decode("utf-8") if isinstance(v, bytes) else v for k, v in row.items()}
        if names is not None and spec.label_field in row:
            row[spec.label_field] = names[int(row[spec.label_field])]
        yield row


def _examples(rows, spec: LabelledFormat, keep_labels: list[str] | None) -> Examples:
    texts, pairs, labels = [], [], []
    bad: collections.Counter[str] = collections.Counter()
    known = set(keep_labels) if keep_labels is not None else None
    fields = [spec.text_field, spec.label_field] + ([spec.text_pair_field] if spec.text_pair_field else [])
    for row in rows:
        if isinstance(row, str):
            bad[row] += 1
            continue
        missing = [name for name in fields if row.get(name) is None]
        if missing:
            bad[f"missing {missing[0]}"] += 1
            continue
        text = str(row[spec.text_field]).strip()
        pair = str(row[spec.text_pair_field]).strip() if spec.text_pair_field else None
        label = str(row[spec.label_field]).strip()
        if not text or (spec.text_pair_field and not pair):
            bad["empty text"] += 1
            continue
        if not label:
            bad["empty label"] += 1
            continue
        if known is not None and label not in known:
            bad["label not in training"] += 1
            continue
        texts.append(text)
        pairs.append(pair)
        labels.append(label)
    return Examples(texts, pairs if spec.text_pair_field else None, labels, dict(sorted(bad.items())))


def label_names(labels: list[str]) -> list[str]:
    """The label set in a fixed order: numerically when every label is an integer, else sorted."""
    distinct = set(labels)
    if all(_is_int(x) for x in distinct):
        return sorted(distinct, key=int)
    return sorted(distinct)


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True
