"""Labelled examples for fine-tuning, from JSONL, TSV/CSV with a header row, or a tfds split.

    examples = read_examples("train.tsv", LabelledFormat(text_field="sentence", label_field="label"))
    examples.texts, examples.pairs, examples.labels, examples.bad_rows   # {"empty text": 2, ...}

A row that cannot be used stops the read with one line naming the file, the line and the reason,
or with on_bad_row="skip" is counted under its reason and skipped: an empty text, a missing
field, a TSV/CSV row with the wrong number of columns, a line that is not JSON, and
(`keep_labels`) a label the training split never had. A file that cannot be read at all, or
whose header lacks a named column, is a one-line `LabelledDataError`.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import io
import json

from common.errors import BertbeamError
from pipeline import files

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


def read_examples(source: str, spec: LabelledFormat, keep_labels: list[str] | None = None,
                  on_bad_row: str = "error") -> Examples:  # fmt: skip
    """`source` is a file (local or gs://), or NAME:SPLIT with format tfds (--tfds_name). A bad row
    stops the read with one line naming the file, the line and the reason, or (on_bad_row="skip")
    is skipped and counted under its reason."""
    fmt = format_of(source, spec.format)
    if fmt == "tfds":
        rows = _tfds_rows(source, spec)
    else:
        if not files.exists(source):
            raise LabelledDataError(f"{source}: no such file")
        raw = files.read_file(source)
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise LabelledDataError(f"{source}: not UTF-8 at byte {e.start}") from None
        rows = _jsonl_rows(text) if fmt == "jsonl" else _table_rows(source, text, fmt, spec)
    return _examples(rows, spec, keep_labels, source, on_bad_row)


def _jsonl_rows(text: str):
    # "\n" only: str.splitlines() would also split inside a text holding U+2028 or U+0085, which
    # JSON writers leave unescaped.
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            yield number, "not JSON"
            continue
        yield number, row if isinstance(row, dict) else "not a JSON object"


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
            yield reader.line_num, "wrong column count"
            continue
        yield reader.line_num, dict(zip(header, row, strict=True))


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
    for number, row in enumerate(tfds.as_numpy(ds), 1):
        row = {k: v.decode("utf-8") if isinstance(v, bytes) else v for k, v in row.items()}
        if names is not None and spec.label_field in row:
            row[spec.label_field] = names[int(row[spec.label_field])]
        yield number, row


def _examples(
    rows, spec: LabelledFormat, keep_labels: list[str] | None, source: str, on_bad_row: str
) -> Examples:
    texts, pairs, labels = [], [], []
    bad: collections.Counter[str] = collections.Counter()
    for number, row in rows:
        reason = row if isinstance(row, str) else _bad_reason(row, spec, keep_labels)
        if reason is not None:
            if on_bad_row == "error":
                where = f"row {number}" if spec.format == "tfds" else f"line {number}"
                raise LabelledDataError(f"{source}: {where}: {reason} (--on_bad_row skip skips such rows)")
            bad[reason] += 1
            continue
        texts.append(str(row[spec.text_field]).strip())
        pairs.append(str(row[spec.text_pair_field]).strip() if spec.text_pair_field else None)
        labels.append(str(row[spec.label_field]).strip())
    return Examples(texts, pairs if spec.text_pair_field else None, labels, dict(sorted(bad.items())))


def _bad_reason(row: dict, spec: LabelledFormat, keep_labels: list[str] | None) -> str | None:
    """Why a parsed row cannot be used, or None."""
    fields = [spec.text_field, spec.label_field] + ([spec.text_pair_field] if spec.text_pair_field else [])
    missing = [name for name in fields if row.get(name) is None]
    if missing:
        return f"missing {missing[0]}"
    if not str(row[spec.text_field]).strip() or (
        spec.text_pair_field and not str(row[spec.text_pair_field]).strip()
    ):
        return "empty text"
    label = str(row[spec.label_field]).strip()
    if not label:
        return "empty label"
    if keep_labels is not None and label not in keep_labels:
        return "label not in training"
    return None


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
