"""Raw text -> sharded, statically padded masked-LM TFRecords, with Apache Beam.

    python -m pipeline.build_corpus --input 'data/*.txt' --output out/corpus --vocab_size 8000
    python -m pipeline.build_corpus ... --runner DataflowRunner --project P --region R \\
        --temp_location gs://B/tmp --setup_file ./setup.py

This module is the pipeline's graph and its command line; the stages are `pipeline/stages/`, a
module each:
  ReadDocuments (keys) -> DeduplicateDocuments -> [RereadDocuments -> TrainVocab]
  -> BatchDocuments -> CutGroups (reread, tokenized, cut into packing groups as read)
  -> CreateInstances -> WriteShards -> WriteManifest
With several lengths (`--seq_len 128,512`) the graph branches after CutGroups: CreateInstances
to WriteManifest once per length, into OUTPUT/seq128/, OUTPUT/seq512/.
Flags that `CorpusConfig` does not define go to Beam's pipeline options (`--runner`,
`--direct_num_workers`, Dataflow's `--project` ...); a flag that neither knows is refused before
anything runs, where Beam alone would only warn, after the build, that it dropped it.

Determinism: every random choice derives from --seed and a content hash (of a document, of a
packing group), never from worker state or arrival order, so the same inputs, vocab and seed give
byte-identical shards and manifest on any runner and any number of workers.
Memory: documents are read line by line with a bounded line length; the shuffles carry keys and
pointers, never text or tokens: a packing group (about --group_tokens tokens) is cut from its
documents as they are read and tokenized, its instances are built at once and written to a part
file, and shards are merged per shard (about --records_per_shard records), so no step holds the
corpus: peak memory is the same at 1x and 8x.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import sys

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from common.cli import Parser, add_arguments, run_cli
from common.errors import ConfigError
from pipeline import files, schema, segment
from pipeline.config import CorpusConfig, per_length
from pipeline.curation.curate import CurateDocuments, DropRemoved
from pipeline.curation.quality import Thresholds
from pipeline.curation.samples import CURATION_DIR, write_removed_samples
from pipeline.parts import remove_tmp
from pipeline.runners.options import (
    is_dry_run,
    pipeline_options,
    refuse_unknown_flags,
    register_dask_options,
    uses_dask,
)
from pipeline.stages import progress
from pipeline.stages.create_instances import CreateInstances
from pipeline.stages.dedup import DeduplicateDocuments
from pipeline.stages.groups import BatchDocuments, CutGroups, expected_instances
from pipeline.stages.manifest import WriteManifest
from pipeline.stages.read import ReadDocuments, RereadDocuments, input_bytes
from pipeline.stages.stats import BadInputError, SumCounters
from pipeline.stages.train_vocab import TrainVocab, write_vocab
from pipeline.stages.write_shards import WriteShards
from pipeline.vocab import VocabError, VocabFile, kind_of
from pipeline.vocab.extension import check_extendable
from pipeline.vocab.release import is_release_folder, read_release

log = logging.getLogger("bertbeam.corpus")

PROG = "python -m pipeline.build_corpus"


# === The pipeline ===


def build_pipeline(
    p: beam.Pipeline, cfgs: list[CorpusConfig], given_vocab: VocabFile | None, segmenter: dict
):
    """The build's graph: one corpus per config of `cfgs` (`per_length`: they differ only in
    seq_len, max_predictions and folder), from one read, deduplication, vocab and tokenisation.
    `segmenter` is `segment.describe`'s record of --word_segmenter ({} for none)."""
    cfg = cfgs[0]
    # Memory that does not grow with the corpus: no PCollection holds its text or tokens. Files are
    # read once for keys (deduplication keeps one `Pointer` per content key: file key, file, index,
    # characters), then again for the text of the documents kept, once for the vocab's sample and
    # once to tokenize and cut into packing groups, which go to instance creation without a
    # shuffle. A tfds split cannot be read again by index: its documents are deduplicated as
    # text, held by the runner.
    rereadable = cfg.format != "tfds"  # files can be read again by pointer
    size = input_chars(cfg, p)  # one glob: the read's progress and the batches' count
    read = p | "ReadDocuments" >> ReadDocuments(cfg, pointers=rereadable, total_bytes=size or None)
    unique = read.docs | "DeduplicateDocuments" >> DeduplicateDocuments(keyed=rereadable)

    def by_file_of(docs, name: str):  # (key, Pointer) -> (file, [(index, key), ...])
        return (
            docs
            | f"ByFile{name}" >> beam.Map(lambda kp: (kp[1].path, (kp[1].index, kp[0])))
            | f"GroupByFile{name}" >> beam.GroupByKey()
        )

    def reread(docs, name: str):  # (key, pointer) -> (key, text), read again; tfds: texts already
        if not rereadable:
            return docs
        return by_file_of(docs, name) | f"Reread{name}" >> beam.ParDo(RereadDocuments(cfg))

    kept, curation_stats = unique.docs, []
    if cfg.curating:  # keys, pointers and signatures pass the shuffles here, never text
        curated = reread(unique.docs, "ForCuration") | "CurateDocuments" >> CurateDocuments(cfg)
        removed, curation_stats = curated[0], [curated[1]]
        kept = {"doc": unique.docs, "removed": removed} | "DropRemoved" >> DropRemoved()
        if cfg.curation_samples:
            samples = f"{shared_root(cfgs)}/{CURATION_DIR}"
            curation_stats.append(write_removed_samples(cfg, removed, unique.docs, reread, samples))

    def counted_before_vocab():  # what reading, deduplication and curation counted: an empty
        # vocab sample then says which of them emptied it
        return beam.pvalue.AsSingleton(
            (read.stats, unique.stats, *curation_stats)
            | "StatsBeforeVocab" >> beam.Flatten()
            | "SumStatsBeforeVocab" >> beam.CombineGlobally(SumCounters())
        )

    if given_vocab is None:
        vocab = reread(kept, "ForVocab") | "TrainVocab" >> TrainVocab(cfg, counted=counted_before_vocab())
    elif cfg.extending:
        vocab = reread(kept, "ForVocab") | "ExtendVocab" >> TrainVocab(
            cfg, base=given_vocab, counted=counted_before_vocab()
        )
    else:
        vocab = p | "GivenVocab" >> beam.Create([given_vocab])
    vocab_si = beam.pvalue.AsSingleton(vocab)

    groups = (
        kept
        | "BatchDocuments" >> BatchDocuments(cfg, size)
        | "CutGroups"
        >> beam.ParDo(CutGroups(cfg, segmenter, rereadable), vocab_si).with_outputs("stats", main="groups")
    )
    shared_stats = (read.stats, unique.stats, *curation_stats, groups.stats)

    manifests = []
    for length_cfg in cfgs:
        # One name per length when there are several (Beam labels must be unique in a graph).
        stage = (lambda name: name) if len(cfgs) == 1 else (lambda name, n=length_cfg.seq_len: f"{name}{n}")
        manifests.append(
            write_corpus(
                length_cfg, groups.groups, vocab, shared_stats, given_vocab is None, segmenter, stage, size
            )
        )
    return manifests


def input_chars(cfg: CorpusConfig, p: beam.Pipeline) -> int | None:
    """The input files' size, which sizes the batches groups are cut from (`BatchDocuments`);
    None for a tfds split (its batches are sized from its documents); 0 for a dry run."""
    if cfg.format == "tfds":
        return None
    return 0 if is_dry_run(p.options) else input_bytes(cfg.input_patterns) or 0


def shared_root(cfgs: list[CorpusConfig]) -> str:
    """Where the build's shared files go (curation samples, _tmp/): the output folder, or for
    several lengths the folder above their seq{N}/ folders."""
    return cfgs[0].output_dir if len(cfgs) == 1 else cfgs[0].output_dir.rsplit("/", 1)[0]


def write_corpus(cfg, groups, vocab, shared_stats, trained: bool, segmenter: dict, stage, size=None):
    """Packing groups -> one corpus at cfg.seq_len in cfg.output_dir: instances, shards, the vocab
    beside them and, last, the manifest. `size`: the input's characters, if known (progress)."""
    vocab_si = beam.pvalue.AsSingleton(vocab)
    vocab_info = vocab | stage("WriteVocab") >> beam.Map(write_vocab, cfg.output_dir, trained)
    expected = expected_instances(size, cfg)
    instances = groups | stage("CreateInstances") >> CreateInstances(cfg, vocab_si, expected)
    shards = instances.records | stage("WriteShards") >> WriteShards(cfg)
    stats = (
        (*shared_stats, instances.stats)
        | stage("AllStats") >> beam.Flatten()
        | stage("SumStats") >> beam.CombineGlobally(SumCounters())
    )
    return shards | stage("WriteManifest") >> WriteManifest(
        cfg,
        stats=beam.pvalue.AsSingleton(stats),
        vocab_info=beam.pvalue.AsSingleton(vocab_info),
        segmenter=segmenter,
    )


def build(cfgs: CorpusConfig | list[CorpusConfig], options: PipelineOptions):
    """Runs the build(s) `cfgs` describe (`per_length`) on the runner `options` name; returns
    Beam's PipelineResult (a Dataflow dry run returns without running)."""
    cfgs = [cfgs] if isinstance(cfgs, CorpusConfig) else list(cfgs)
    cfg = cfgs[0]
    for length_cfg in cfgs:
        log.info("corpus config: %s", json.dumps(length_cfg.to_json_dict(), sort_keys=True))
    given_vocab = load_given_vocab(cfg)
    check_quality_thresholds(cfg)
    segmenter = check_segmenter(cfg)
    dry_run = is_dry_run(options)
    if not dry_run:
        check_inputs(cfg)
        if len(cfgs) > 1:  # --output then holds only seq*/ folders: a reader finds each by length
            remove_stale_manifest(cfg.output_dir.rsplit("/", 1)[0])
        for length_cfg in cfgs:
            remove_stale_manifest(length_cfg.output_dir)
        files.remove_tree(f"{shared_root(cfgs)}/{CURATION_DIR}")  # an earlier build's samples
    p = beam.Pipeline(runner=None if dry_run else runner_for(options, cfgs), options=options)
    progress.reset()
    build_pipeline(p, cfgs, given_vocab, segmenter)
    result = p.run()
    if not dry_run:
        result.wait_until_finish()
        progress.log_totals()
        if len(cfgs) > 1:  # one length's manifest removes its own _tmp/; an older build's may be above
            remove_tmp(shared_root(cfgs))
    return result


def check_inputs(cfg: CorpusConfig) -> None:
    if cfg.format == "tfds":
        return
    for pattern in cfg.input_patterns:
        if not FileSystems.match([pattern])[0].metadata_list:
            raise BadInputError(f"--input {pattern}: no files match")


def check_quality_thresholds(cfg: CorpusConfig) -> None:
    """A --quality_thresholds file is read here, so a missing or bad one fails in one line before
    the pipeline starts (a NAME=VALUE list was checked with the config)."""
    if cfg.quality_thresholds and cfg.quality_thresholds.endswith(".json"):
        try:
            Thresholds.parse(cfg.quality_thresholds, files.read_file)
        except ValueError as e:
            raise ConfigError(f"--quality_thresholds {e}") from None


def load_given_vocab(cfg: CorpusConfig) -> VocabFile | None:
    """The given --vocab, checked before the pipeline starts: a sentencepiece .model, Google
    BERT's WordPiece vocab.txt, a Hugging Face tokenizer.json (ModernBERT's BPE), or a released
    model's folder (`pipeline/vocab/release.py`: its vocab, lower-casing and special tokens)."""
    if cfg.vocab is None:
        return None
    if is_release_folder(cfg.vocab):
        release = read_release(cfg.vocab, True if cfg.do_lower_case else None)
        vocab_file = release.vocab_file
        sha256 = hashlib.sha256(vocab_file.data).hexdigest()
        origin = {"name": release.name, "folder": cfg.vocab, "sha256": sha256}
        log.info("vocab of the release %s: %s (%s, lower case: %s)", release.name, release.vocab_path,
                 vocab_file.kind, vocab_file.lower_case)  # fmt: skip
        if cfg.extending:
            check_extendable(vocab_file)
        return dataclasses.replace(vocab_file, release=origin)
    kind = kind_of(cfg.vocab)
    try:
        with FileSystems.open(cfg.vocab, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            vocab_file = VocabFile(kind, f.read(), cfg.do_lower_case)
        vocab_file.load()
    except (OSError, RuntimeError) as e:
        raise VocabError(f"--vocab {cfg.vocab}: not a readable {kind} vocab ({e})") from None
    except VocabError as e:
        raise VocabError(f"--vocab {cfg.vocab}: {e}") from None
    if cfg.extending:
        check_extendable(vocab_file)
    return vocab_file


def check_segmenter(cfg: CorpusConfig) -> dict:
    """--word_segmenter loaded once here (with --segmenter_dict), so that one that cannot be
    imported or read fails in one line before the pipeline starts; returns what the manifest
    records of it ({} for none)."""
    dictionary = segment.read_dictionary(cfg.segmenter_dict)
    segmenter = segment.load(cfg.word_segmenter, dictionary, cfg.segmenter_dict or "")
    if segmenter is not None:
        try:
            words = segmenter("分词检查 a check")
        except Exception as e:  # a user's function: whatever it raises, say so in one line
            raise segment.SegmenterError(
                f"--word_segmenter {cfg.word_segmenter}: failed on a test sentence ({type(e).__name__}: {e})"
            ) from None
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise segment.SegmenterError(
                f"--word_segmenter {cfg.word_segmenter}: returned {type(words).__name__}, "
                "expected a list of str"
            )
    return segment.describe(cfg.word_segmenter, dictionary)


def remove_stale_manifest(output_dir: str) -> None:
    """A manifest marks a complete build; drop an old one before shards start changing."""
    path = f"{output_dir}/{schema.MANIFEST_NAME}"
    if files.exists(path):
        files.remove(path)


# === Command line ===


def parser() -> Parser:
    p = Parser(
        prog=PROG,
        description="Build sharded masked-LM TFRecords from raw text. Flags not listed here go to "
        "Beam's pipeline options (--runner, --direct_num_workers, Dataflow's --project ...).",
    )
    add_arguments(p, CorpusConfig, skip=("pair_task",))
    task = p.add_mutually_exclusive_group()
    nsp = "segment_pair: next-sentence prediction (B is the next segment or a random one)"
    sop = "segment_pair: sentence-order prediction (A and B in order or swapped)"
    task.add_argument("--nsp", dest="pair_task", action="store_const", const="nsp", help=nsp)
    task.add_argument("--sop", dest="pair_task", action="store_const", const="sop", help=sop)
    return p


def parse_args(
    argv: list[str], save_main_session: bool = False
) -> tuple[list[CorpusConfig], PipelineOptions]:
    """(the builds, one per --seq_len, and Beam's options) from the command line; an unknown flag
    is a `ConfigError`."""
    ours = parser()
    args, rest = ours.parse_known_args(argv)
    register_dask_options(rest)
    refuse_unknown_flags(rest, ours, PROG)
    return per_length(vars(args)), pipeline_options(rest, save_main_session)


def runner_for(options: PipelineOptions, cfgs: list[CorpusConfig]):
    """The runner object for `options`, or None to let Beam create it from its name: ours for
    Dask, told which folder and input files every worker must see."""
    if not uses_dask(options):
        return None
    from pipeline.runners.dask_runner import DaskRunner  # imports dask.distributed: only for this runner

    patterns = cfgs[0].input_patterns if cfgs[0].format != "tfds" else ()
    size = input_bytes(patterns) if patterns else None
    return DaskRunner(shared=(shared_root(cfgs),), inputs=tuple(patterns), input_bytes=size or 0)


def run(argv: list[str] | None = None, save_main_session: bool = False):
    """Parse the command line and build the corpus; returns the Beam PipelineResult."""
    cfgs, options = parse_args(sys.argv[1:] if argv is None else argv, save_main_session)
    return build(cfgs, options)


def summary(manifest: schema.Manifest) -> str:
    """What a finished build made and where, for the console."""
    lines = [f"corpus written to {manifest.folder} ({schema.MANIFEST_NAME}, {manifest.vocab.file})"]
    for name, split in manifest.splits.items():
        lines.append(
            f"  {name}: {split.instances:,} instances in {len(split.shards)} shards from "
            f"{split.documents:,} documents, padding {split.padding_fraction:.2%}"
        )
    skipped = ", ".join(f"{k} {v}" for k, v in manifest.input["skipped"].items()) or "none"
    repaired = ", ".join(f"{k} {v}" for k, v in manifest.input["repaired"].items()) or "none"
    lines.append(f"  skipped: {skipped}; repaired: {repaired}")
    encodings = manifest.input.get("encodings", {})
    lines.append(f"  files by encoding: {', '.join(f'{k} {v}' for k, v in encodings.items()) or 'none'}")
    if manifest.segmenter:
        info = manifest.segmenter
        lines.append(f"  whole words from {info['name']} {info['version'] or ''} ({info['mode']})")
    if not any(split.instances for split in manifest.splits.values()):
        lines.append("warning: no instances were written: every input document was empty or skipped")
    return "\n".join(lines)


def _build_and_report(argv: list[str] | None) -> None:
    cfgs, options = parse_args(sys.argv[1:] if argv is None else argv)
    build(cfgs, options)
    if not is_dry_run(options):
        for cfg in cfgs:
            print(summary(schema.read_built_manifest(cfg.output_dir)))


def main(argv: list[str] | None = None) -> int:
    return run_cli(_build_and_report, argv)


if __name__ == "__main__":
    # Progress (a line per stage every few seconds, per shard written) on the console; not when imported.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    sys.exit(main())
