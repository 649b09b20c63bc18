"""The data contract between the corpus builder and the input function, written once.

One table of features (name -> dtype, length) drives the writer's `tf.train.Example`
(`pipeline/tfexample.py`), the reader's `FixedLenFeature` spec and the manifest's feature list.
Names and layout follow google-research/bert's `create_pretraining_data.py`, so our shards also
feed its and TF Model Garden's trainers; `document_ids` (always) and `word_starts` (segmented
builds only) are our additions, which their readers simply ignore.

`Manifest` is `manifest.json`, the file beside the shards, typed: what the build was asked to do,
the vocab it tokenized with, what it read and skipped, and per split the shards with their record
counts and sizes. Readers take their numbers (seq_len, max_predictions, pairs or not, the vocab)
from its properties, never from its keys.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING

from common.errors import BertbeamError

if TYPE_CHECKING:
    from pipeline.config import CorpusConfig

# 2: records may hold `word_starts` (the manifest's feature list says). Version 1 corpora lack it,
# which every reader here handles, so they stay readable.
SCHEMA_VERSION = 2  # what this code writes
READABLE_SCHEMA_VERSIONS = (1, 2)  # what it reads: a newer writer keeps older corpora readable
MANIFEST_NAME = "manifest.json"
SPLITS = ("train", "validation")


@dataclasses.dataclass(frozen=True)
class Feature:
    name: str
    dtype: str  # "int64" or "float32": the two kinds tf.train.Example stores.
    length: str  # "seq_len", "max_predictions" or "one".
    optional: bool = False  # written only by some builds; the manifest's feature list says which


FEATURES: tuple[Feature, ...] = (
    Feature("input_ids", "int64", "seq_len"),
    Feature("input_mask", "int64", "seq_len"),
    Feature("segment_ids", "int64", "seq_len"),
    Feature("masked_lm_positions", "int64", "max_predictions"),
    Feature("masked_lm_ids", "int64", "max_predictions"),
    Feature("masked_lm_weights", "float32", "max_predictions"),
    Feature("next_sentence_labels", "int64", "one"),
    # 1, 2, ... per document packed into the row, 0 on padding: keeps attention within a document.
    Feature("document_ids", "int64", "seq_len"),
    # 1 on the first token of every whole-word masking unit, 0 elsewhere (specials, padding, a
    # unit's other tokens): the segmenter's words, which the vocab alone cannot recover, so that
    # dynamic masking in tf.data keeps them. Only builds with --word_segmenter write it.
    Feature("word_starts", "int64", "seq_len", optional=True),
)


def features(word_starts: bool = False) -> tuple[Feature, ...]:
    """The features a build writes: every required one, plus word_starts for segmented builds."""
    return tuple(f for f in FEATURES if not f.optional or (word_starts and f.name == "word_starts"))


def feature_lengths(seq_len: int, max_predictions: int, word_starts: bool = False) -> dict[str, int]:
    sizes = {"seq_len": seq_len, "max_predictions": max_predictions, "one": 1}
    return {f.name: sizes[f.length] for f in features(word_starts)}


def parsing_spec(seq_len: int, max_predictions: int, word_starts: bool = False) -> dict:
    """`tf.io.parse_example` spec with every length fixed: the reader's half of the contract."""
    import tensorflow as tf

    dtypes = {"int64": tf.int64, "float32": tf.float32}
    lengths = feature_lengths(seq_len, max_predictions, word_starts)
    return {f.name: tf.io.FixedLenFeature([lengths[f.name]], dtypes[f.dtype]) for f in features(word_starts)}


def features_for_manifest(seq_len: int, max_predictions: int, word_starts: bool = False) -> dict[str, dict]:
    lengths = feature_lengths(seq_len, max_predictions, word_starts)
    return {f.name: {"dtype": f.dtype, "length": lengths[f.name]} for f in features(word_starts)}


# === The manifest ===


class ManifestError(BertbeamError):
    """A manifest that cannot be read, or that contradicts itself or its shards."""


@dataclasses.dataclass(frozen=True)
class Shard:
    file: str  # name inside the corpus folder
    records: int
    bytes: int  # the reader compares it: a truncated or replaced copy is caught before training


@dataclasses.dataclass(frozen=True)
class Split:
    documents: int
    instances: int  # records in all the split's shards
    real_tokens: int
    masked_tokens: int
    padding_fraction: float
    next_sentence_label_1: int
    dupe_factor: int
    packing_groups: int
    shards: tuple[Shard, ...]


@dataclasses.dataclass(frozen=True)
class VocabInfo:
    file: str  # vocab.model or vocab.txt, beside the shards
    sha256: str  # of the file: readers check the file beside the shards against it
    size: int
    special_ids: Mapping[str, int]  # pad, unk, cls, sep, mask
    trained: bool  # trained by this build (else given with --vocab)
    kind: str = "sentencepiece"  # or "wordpiece", "tokenizer" (corpora from before WordPiece have no kind)
    lower_case: bool = False  # wordpiece: lower-cased and accent-stripped before tokenizing
    # --vocab RELEASE_DIR: {name, folder, sha256 of the release's vocab}; with --extend_vocab also
    # base_size and added: [{id, token, pieces}], each new token's ids in the release's vocab.
    release: Mapping[str, object] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Manifest:
    schema_version: int
    features: Mapping[str, Mapping]  # name -> {dtype, length}
    build: Mapping[str, object]  # every CorpusConfig field but output_dir: the record of the build
    vocab: VocabInfo
    input: Mapping[str, object]  # files, documents, and skipped / repaired counts by reason
    splits: Mapping[str, Split]
    # The word segmenter whole-word masking used: name, version, mode, dictionary_sha256; {} none.
    segmenter: Mapping[str, object] = dataclasses.field(default_factory=dict)
    # How rows were cut from documents and grouped (`pipeline/instances.py: PACKING_VERSION`);
    # manifests from before the field are 1. Readers read every version alike.
    packing_version: int = 1
    # What curation removed, per stage (near_dedup, quality, language): documents_removed and
    # bytes_removed always (zeros for a stage that was off), and each stage's own detail.
    curation: Mapping[str, object] = dataclasses.field(default_factory=dict)
    folder: str = ""  # where it was read from (not written: a moved corpus stays valid)

    # --- the corpus view: what readers need, typed ---

    @property
    def seq_len(self) -> int:
        return int(self.build["seq_len"])

    @property
    def max_predictions(self) -> int:
        return int(self.build["max_predictions"])

    @property
    def pairs(self) -> bool:
        """Segment pairs with next-sentence (or sentence-order) labels, rather than packed text."""
        return self.build.get("mode") == "segment_pair"

    @property
    def masked_lm_prob(self) -> float:
        return float(self.build.get("masked_lm_prob", 0.15))

    @property
    def whole_word_mask(self) -> bool:
        return bool(self.build.get("whole_word_mask", False))

    @property
    def word_starts(self) -> bool:
        """The records hold `word_starts`: masking units from a segmenter."""
        return "word_starts" in self.features

    @property
    def path(self) -> str:
        return f"{self.folder}/{MANIFEST_NAME}"

    @property
    def vocab_path(self) -> str:
        return f"{self.folder}/{self.vocab.file}"

    def split(self, name: str) -> Split:
        if name not in self.splits:
            raise ManifestError(f"{self.path}: no split {name!r}; it has {', '.join(self.splits)}")
        return self.splits[name]

    def files(self, split: str) -> list[str]:
        """The split's shards, as paths, in the manifest's (file name) order."""
        return [f"{self.folder}/{shard.file}" for shard in self.split(split).shards]

    # --- the file ---

    def to_json(self) -> str:
        raw = dataclasses.asdict(self)
        del raw["folder"]
        if not raw["vocab"]["release"]:  # a manifest without a release reads as before the field
            del raw["vocab"]["release"]
        return json.dumps(raw, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, folder: str = "") -> Manifest:
        """The manifest in `text`; a missing or mistyped field, an unreadable schema version or
        shard counts that contradict the split's is a one-line `ManifestError` naming the file."""
        source = f"{folder}/{MANIFEST_NAME}" if folder else MANIFEST_NAME
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise ManifestError(f"{source}: not valid JSON ({e.msg} at line {e.lineno})") from None
        fields = _Fields(raw, source)
        version = fields.get("schema_version", int)
        if version not in READABLE_SCHEMA_VERSIONS:
            readable = ", ".join(map(str, READABLE_SCHEMA_VERSIONS))
            raise ManifestError(
                f"{source}: schema_version expected {readable}, found {version}; rebuild the corpus"
            )
        for name in ("seq_len", "max_predictions"):
            fields.get(f"build.{name}", int)
        return cls(
            schema_version=version,
            features=fields.get("features", dict),
            build=fields.get("build", dict),
            vocab=_typed(VocabInfo, fields, "vocab"),
            input=fields.get("input", dict),
            splits={name: _split(fields, name) for name in fields.get("splits", dict)},
            segmenter=fields.get("segmenter", dict) if fields.has("segmenter") else {},
            packing_version=fields.get("packing_version", int) if fields.has("packing_version") else 1,
            curation=fields.get("curation", dict) if fields.has("curation") else {},
            folder=folder,
        )


class _Fields:
    """Typed access to a parsed manifest by dotted path, failing with the file and the field."""

    def __init__(self, raw, source: str, at: str = ""):
        self.raw, self.source, self.at = raw, source, at  # at: where `raw` sits, for messages

    def has(self, path: str) -> bool:
        try:
            self.get(path, object)
        except ManifestError:
            return False
        return True

    def get(self, path: str, kind: type):
        value = self.raw
        for part in path.split("."):
            if not isinstance(value, dict) or part not in value:
                raise ManifestError(f"{self.source}: field {self.at}{path} is missing; rebuild the corpus")
            value = value[part]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ManifestError(
                f"{self.source}: field {self.at}{path} expected {kind.__name__}, found {value!r}; "
                "rebuild the corpus"
            )
        return value


def _typed(cls, fields: _Fields, prefix: str = "", **given):
    """A `cls` dataclass from the fields under `prefix`, each checked against its annotation; a
    missing field with a default takes the default (older manifests lack newer fields)."""
    hints = typing.get_type_hints(cls)
    values = dict(given)
    for f in dataclasses.fields(cls):
        if f.name in given:
            continue
        path = f"{prefix}.{f.name}" if prefix else f.name
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        if has_default and not fields.has(path):
            continue
        values[f.name] = fields.get(path, typing.get_origin(hints[f.name]) or hints[f.name])
    return cls(**values)


def _split(fields: _Fields, name: str) -> Split:
    shards = tuple(
        _typed(Shard, _Fields(entry, fields.source, at=f"splits.{name}.shards[{i}]."))
        for i, entry in enumerate(fields.get(f"splits.{name}.shards", list))
    )
    split = _typed(Split, fields, f"splits.{name}", shards=shards)
    records = sum(shard.records for shard in shards)
    if records != split.instances:
        raise ManifestError(
            f"{fields.source}: {name} has {split.instances} instances but its shards list {records} "
            "records; the manifest was edited or mixed up, rebuild the corpus"
        )
    return split


def read_manifest(folder: str) -> Manifest:
    """The manifest beside the shards in `folder` (local or gs://), or a one-line error."""
    from pipeline import files

    folder = folder.rstrip("/")
    path = f"{folder}/{MANIFEST_NAME}"
    if not files.exists(path):
        lengths = corpus_lengths(folder)
        if lengths:
            names = ", ".join(f"{folder}/seq{n}" for n in lengths)
            raise ManifestError(
                f"{folder}: a corpus at several lengths ({names}); pass one of them, or train on all "
                "with launch.pretrain --phases"
            )
        found = "does not exist" if not files.exists(folder) else "has no manifest.json"
        raise ManifestError(f"{folder}: {found}; build a corpus first (make corpus OUTPUT={folder})")
    return Manifest.from_json(files.read_text(path), folder)


def read_built_manifest(folder: str) -> Manifest:
    """`folder`'s manifest as the builder reads it (no checks for a missing or multi-length
    corpus: the builder wrote it). Readers that train or evaluate use `read_manifest`."""
    from pipeline import files

    folder = folder.rstrip("/")
    return Manifest.from_json(files.read_text(f"{folder}/{MANIFEST_NAME}"), folder)


def corpus_lengths(folder: str) -> list[int]:
    """The lengths a multi-length build (`--seq_len 128,512`) wrote under `folder`, from its
    seq{N}/manifest.json files, ascending; [] for any other folder."""
    from pipeline import files

    found = files.glob(f"{folder.rstrip('/')}/seq*/{MANIFEST_NAME}")
    names = [path.rsplit("/", 2)[-2].removeprefix("seq") for path in found]
    return sorted(int(n) for n in names if n.isdigit())


def build_manifest(
    cfg: CorpusConfig,
    shards: list[dict],
    stats: Mapping[str, int],
    vocab: VocabInfo,
    segmenter: Mapping[str, object],
) -> Manifest:
    """The manifest of a finished build, from the shards written, the summed counters and the
    segmenter's description (`segment.describe`)."""
    from pipeline.instances import PACKING_VERSION

    splits = {}
    for split in SPLITS:
        instances = stats.get(f"{split}/instances", 0)
        padding = stats.get(f"{split}/padding_tokens", 0)
        splits[split] = Split(
            documents=stats.get(f"{split}/documents", 0),
            instances=instances,
            real_tokens=stats.get(f"{split}/real_tokens", 0),
            masked_tokens=stats.get(f"{split}/masked_tokens", 0),
            padding_fraction=round(padding / (instances * cfg.seq_len), 6) if instances else 0.0,
            next_sentence_label_1=stats.get(f"{split}/next_sentence_label_1", 0),
            dupe_factor=cfg.dupe_factor if split == "train" else 1,
            packing_groups=stats.get(f"{split}/packing_groups", 0),
            shards=tuple(
                Shard(s["file"], s["records"], s["bytes"])
                for s in sorted(shards, key=lambda s: s["file"])
                if s["split"] == split
            ),
        )

    def by_prefix(prefix: str) -> dict:
        return {k.split("/", 1)[1]: v for k, v in sorted(stats.items()) if k.startswith(prefix + "/")}

    return Manifest(
        schema_version=SCHEMA_VERSION,
        features=features_for_manifest(cfg.seq_len, cfg.max_predictions, word_starts=bool(segmenter)),
        # Where the corpus lives is not a property of it: a moved or copied corpus stays valid.
        build={k: v for k, v in cfg.to_json_dict().items() if k != "output_dir"},
        vocab=vocab,
        input={
            **by_prefix("input"),
            "encodings": by_prefix("encoding"),  # files read, by the encoding they were read in
            "skipped": by_prefix("skipped"),
            "repaired": by_prefix("repaired"),
        },
        splits=splits,
        segmenter=dict(segmenter),
        packing_version=PACKING_VERSION,
        curation=curation_summary(stats),
        folder=cfg.output_dir,
    )


CURATION_STAGES = ("near_dedup", "quality", "language")


def curation_summary(stats: Mapping[str, int]) -> dict:
    """The manifest's `curation`: per stage, documents and bytes removed (zeros when it was off,
    so readers never branch); near_dedup adds its cluster sizes ({members: clusters}) and the
    signature's definition (`minhash.SIGNATURE`), quality
    its counts per rule, language the documents kept and removed per detected language. And
    `exact_dedup`: the exact copies deduplication dropped before any stage saw them (documents
    only: only a pointer of each copy travels, not its bytes), so what left the corpus adds up
    in one place."""

    def under(prefix: str) -> dict:
        return {k[len(prefix) :]: v for k, v in stats.items() if k.startswith(prefix)}

    summary = {
        stage: {
            "documents_removed": stats.get(f"curation/{stage}/documents_removed", 0),
            "bytes_removed": stats.get(f"curation/{stage}/bytes_removed", 0),
        }
        for stage in CURATION_STAGES
    }
    from pipeline.curation.minhash import SIGNATURE

    clusters = under("curation/near_dedup/clusters_of/")
    summary["near_dedup"]["cluster_sizes"] = {k: clusters[k] for k in sorted(clusters, key=int)}
    summary["near_dedup"]["signature"] = SIGNATURE  # which unit hashes and hash functions signed
    rules: dict[str, dict] = {}
    for name, value in sorted(under("curation/quality/rule/").items()):
        rule, figure = name.rsplit("/", 1)
        rules.setdefault(rule, {"documents_removed": 0, "bytes_removed": 0})[figure] = value
    summary["quality"]["rules"] = rules
    summary["language"]["kept"] = dict(sorted(under("curation/language/kept/").items()))
    summary["language"]["removed_by_language"] = dict(sorted(under("curation/language/removed/").items()))
    summary["exact_dedup"] = {"documents_removed": stats.get("skipped/duplicate_document", 0)}
    return summary
