"""What a run trains on: `--data` read as one corpus, a weighted mixture of corpora, and, with
`--phases`, the corpus of each phase's sequence length.

    --data out/corpus                            one corpus folder
    --data wiki=gs://b/wiki:3,code=out/code:1    a mixture: NAME=PATH[:WEIGHT], weights -> rates
    --data mixture.json                          {"wiki": {"path": "gs://b/wiki", "weight": 3},
                                                  "code": "out/code"}
    --mixture_temperature T                      no weights: rate of a corpus ~ records^(1/T)
    --phases 128:0.9,512:0.1                     each PATH a multi-length build (PATH/seq128/ ...)

A mixture's corpora must agree on what the model sees: vocab (sha256), seq_len, max_predictions
and the records' features and pair task (the manifests say); a mismatch is one line naming the
corpus. Rates are per example: each record's corpus is drawn with the run's seed, in blocks
with a fixed quota per corpus (`pipeline/reader/order.py`), so the order is a pure function of the seed
and a resumed run seeks its position in every corpus.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re

from common.errors import BertbeamError
from pipeline import files
from pipeline.schema import Manifest, ManifestError, corpus_lengths, read_manifest
from pipeline.vocab import VocabFile


class DataError(BertbeamError):
    """--data (or --phases) names corpora that cannot train one model together; one line."""


@dataclasses.dataclass(frozen=True)
class Source:
    name: str
    path: str  # a corpus folder, or a multi-length build's folder (with --phases)
    weight: float | None = None  # relative; None: from --mixture_temperature
    named: bool = dataclasses.field(default=True, compare=False)  # False: --data DIR, named after DIR


def parse_sources(data: str) -> list[Source]:
    """--data as sources: one folder, `NAME=PATH[:WEIGHT],...` or a mixture .json file."""
    data = data.strip()
    if data.endswith(".json") and files.exists(data) and not files.is_dir(data):
        return _from_json(data)
    if "=" not in data:
        return [Source(data.rstrip("/").rsplit("/", 1)[-1] or "data", data.rstrip("/"), named=False)]
    sources = []
    for item in data.split(","):
        name, sep, rest = item.partition("=")
        if not sep or not name.strip() or not rest.strip():
            raise DataError(f"--data {item!r}: expected NAME=PATH[:WEIGHT]")
        # Split on the last ':' only when a number follows: gs://bucket paths hold one too.
        path, colon, weight = rest.rpartition(":")
        if colon and _is_number(weight):
            sources.append(Source(name.strip(), path.rstrip("/"), _weight(name, float(weight))))
        else:
            sources.append(Source(name.strip(), rest.rstrip("/")))
    return _checked(sources, "--data")


def _from_json(path: str) -> list[Source]:
    try:
        raw = json.loads(files.read_text(path))
    except json.JSONDecodeError as e:
        raise DataError(f"--data {path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(raw, dict) or not raw:
        raise DataError(f"--data {path}: expected an object {{NAME: PATH or {{path, weight}}, ...}}")
    sources = []
    for name, entry in raw.items():
        if isinstance(entry, str):
            entry = {"path": entry}
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("path"), str)
            or set(entry) - {"path", "weight"}
        ):
            raise DataError(f'--data {path}: {name}: expected a path or {{"path": ..., "weight": ...}}')
        weight = entry.get("weight")
        if weight is not None and (isinstance(weight, bool) or not isinstance(weight, int | float)):
            raise DataError(f"--data {path}: {name}: weight expected a number, found {weight!r}")
        sources.append(
            Source(name, entry["path"].rstrip("/"), None if weight is None else _weight(name, weight))
        )
    return _checked(sources, f"--data {path}")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _weight(name: str, weight: float) -> float:
    if not (weight > 0 and math.isfinite(weight)):
        raise DataError(f"--data {name}: weight expected > 0, found {weight}")
    return float(weight)


def _checked(sources: list[Source], where: str) -> list[Source]:
    names = [s.name for s in sources]
    for name in names:  # a name becomes a TensorBoard run (logs/validation-NAME) and a JSON key
        if not re.fullmatch(r"[\w.-]+", name):
            raise DataError(f"{where}: corpus name {name!r}: letters, digits, '_', '.' and '-' only")
    if len(set(names)) != len(names):
        raise DataError(f"{where}: each corpus name at most once, found {', '.join(names)}")
    weighted = [s.weight is not None for s in sources]
    if any(weighted) and not all(weighted):
        missing = ", ".join(s.name for s in sources if s.weight is None)
        raise DataError(f"{where}: weights for some corpora but not {missing}; give all or none")
    return sources


@dataclasses.dataclass(frozen=True)
class Corpora:
    """The corpora a phase reads (one, or a mixture), checked to fit one model, with their rates."""

    names: tuple[str, ...]
    manifests: tuple[Manifest, ...]
    rates: tuple[float, ...]  # per example, summing to 1

    @property
    def first(self) -> Manifest:  # all agree on what a model is built for
        return self.manifests[0]

    @property
    def mixture(self) -> bool:
        return len(self.manifests) > 1

    def folders(self) -> list[str]:
        return [m.folder for m in self.manifests]

    def describe(self, examples: int) -> dict:
        """Per corpus: folder, rate, train records, and the epochs `examples` drawn make of it."""
        return {
            name: {
                "path": m.folder,
                "rate": rate,
                "records": m.split("train").instances,
                "expected_epochs": rate * examples / max(1, m.split("train").instances),
            }
            for name, m, rate in zip(self.names, self.manifests, self.rates, strict=True)
        }


def resolve(sources: list[Source], seq_len: int | None = None, temperature: float = 1.0) -> Corpora:
    """The corpora of `sources` at `seq_len` (a multi-length build's seq{N}/; None: each folder
    itself), checked against each other, with their rates."""
    manifests = tuple(_read(source, seq_len) for source in sources)
    first = manifests[0]
    for source, manifest in zip(sources[1:], manifests[1:], strict=True):
        check_compatible(first, manifest, f"{source.name}={manifest.folder}", sources[0].name)
    if all(s.weight is not None for s in sources):
        raw = [s.weight for s in sources]
    else:
        raw = [max(1, m.split("train").instances) ** (1.0 / temperature) for m in manifests]
    total = sum(raw)
    return Corpora(tuple(s.name for s in sources), manifests, tuple(w / total for w in raw))


def _read(source: Source, seq_len: int | None) -> Manifest:
    """The corpus of `source` at `seq_len`: its folder, or its seq{N}/ in a multi-length build."""
    named = source.named
    where = f"--data {source.name}={source.path}" if named else f"--data {source.path}"
    folder = source.path
    if seq_len is not None and not files.exists(f"{folder}/manifest.json"):
        lengths = corpus_lengths(folder)
        if lengths and seq_len not in lengths:
            found = ", ".join(map(str, lengths))
            raise DataError(
                f"{where}: no seq{seq_len}/ corpus (found lengths {found}); rebuild it with "
                f"--seq_len {','.join(map(str, sorted({*lengths, seq_len})))}"
            )
        folder = f"{folder}/seq{seq_len}" if lengths else folder
    try:
        manifest = read_manifest(folder)
    except ManifestError as e:
        raise DataError(f"--data {source.name}: {e}" if named else f"--data {e}") from None
    if seq_len is not None and manifest.seq_len != seq_len:
        raise DataError(
            f"{where}: seq_len {manifest.seq_len}, the phase needs {seq_len}; give a multi-length build "
            f"(--seq_len ...,{seq_len}) or change --phases"
        )
    VocabFile.of_corpus(manifest)  # the vocab beside the shards matches its manifest
    return manifest


def check_compatible(first: Manifest, other: Manifest, other_name: str, first_name: str) -> None:
    """`other` must feed the model built for `first`: same vocab, shapes and record features."""

    def differ(what: str, found, expected) -> DataError:
        return DataError(
            f"--data {other_name}: {what} {found}, but {first_name} has {expected}; every corpus of a "
            "run needs the same vocab, seq_len, max_predictions and schema"
        )

    if other.vocab.sha256 != first.vocab.sha256:
        raise differ("vocab sha256", other.vocab.sha256[:12], first.vocab.sha256[:12])
    if other.seq_len != first.seq_len:
        raise differ("seq_len", other.seq_len, first.seq_len)
    if other.max_predictions != first.max_predictions:
        raise differ("max_predictions", other.max_predictions, first.max_predictions)
    if other.pairs != first.pairs or (other.build.get("pair_task") != first.build.get("pair_task")):
        raise differ(
            "pair task", other.build.get("pair_task") or "none", first.build.get("pair_task") or "none"
        )
    if dict(other.features) != dict(first.features):
        raise differ("features", sorted(other.features), sorted(first.features))


@dataclasses.dataclass(frozen=True)
class Phase:
    """Updates [start, end) of a run at one sequence length."""

    seq_len: int | None  # None: the corpus's own (no --phases)
    start: int
    end: int
    global_batch_size: int | None = None  # --phase_batch_sizes; None: the run's
    head_only: bool = False  # --head_warmup_steps: only the weights that started fresh train
    # The update at which the phase's data stream starts: its own start, or where the phase it was
    # split from started (the head warm-up's end does not restart the data).
    stream_start: int | None = None

    @property
    def steps(self) -> int:
        return self.end - self.start

    @property
    def first_streamed(self) -> int:
        return self.start if self.stream_start is None else self.stream_start


def split_head_warmup(phases: list[Phase], steps: int) -> list[Phase]:
    """`phases` with updates [0, steps) head-only (`--head_warmup_steps`): the phase that holds
    `steps` is cut there, its second part reading on in the same data stream."""
    if not steps:
        return phases
    result = []
    for phase in phases:
        if phase.start < steps < phase.end:
            result.append(dataclasses.replace(phase, end=steps, head_only=True))
            result.append(dataclasses.replace(phase, start=steps, stream_start=phase.first_streamed))
        else:
            result.append(dataclasses.replace(phase, head_only=phase.end <= steps))
    return result


def parse_phases(phases: str | None, batch_sizes: str | None, train_steps: int, interval: int) -> list[Phase]:
    """--phases 128:0.9,512:0.1 as Phases: fractions of train_steps, each boundary rounded to the
    `interval` (the log interval, on which Keras epochs end). None: one phase, the whole run."""
    if not phases:
        if batch_sizes:
            raise DataError("--phase_batch_sizes needs --phases")
        return [Phase(None, 0, train_steps)]
    items = []
    for item in phases.split(","):
        length, colon, fraction = item.partition(":")
        try:
            items.append((int(length), float(fraction)))
        except ValueError:
            raise DataError(f"--phases {item!r}: expected SEQ_LEN:FRACTION, e.g. 128:0.9") from None
        if not colon or items[-1][0] < 5 or not 0 < items[-1][1] <= 1:
            raise DataError(f"--phases {item!r}: expected SEQ_LEN >= 5 and a FRACTION in (0, 1]")
    if abs(sum(f for _, f in items) - 1.0) > 1e-6:
        raise DataError(f"--phases {phases}: fractions sum to {sum(f for _, f in items):g}, expected 1")
    if len({n for n, _ in items}) != len(items):
        raise DataError(f"--phases {phases}: each sequence length at most once")
    sizes: list[int | None] = [None] * len(items)
    if batch_sizes:
        try:
            sizes = [int(b) for b in batch_sizes.split(",")]
        except ValueError:
            raise DataError(f"--phase_batch_sizes {batch_sizes}: expected integers, e.g. 256,64") from None
        if len(sizes) != len(items) or min(sizes) < 1:
            raise DataError(
                f"--phase_batch_sizes {batch_sizes}: expected {len(items)} sizes >= 1, one per phase"
            )
    result, start, done = [], 0, 0.0
    for i, ((length, fraction), size) in enumerate(zip(items, sizes, strict=True)):
        done += fraction
        end = train_steps if i == len(items) - 1 else round(done * train_steps / interval) * interval
        if end <= start:
            raise DataError(
                f"--phases {phases}: phase {i + 1} (seq {length}) gets no steps once boundaries are "
                f"rounded to the {interval}-step log interval; raise its fraction or --train_steps"
            )
        result.append(Phase(length, start, end, size))
        start = end
    return result
