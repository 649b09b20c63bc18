"""TrainVocab: keyed documents -> a sentencepiece or WordPiece VocabFile from a seeded sample;
write_vocab puts it beside the shards."""

from __future__ import annotations

import dataclasses
import logging
import time

import apache_beam as beam

from pipeline import schema, text
from pipeline.config import CorpusConfig
from pipeline.files import write_atomically
from pipeline.keys import content_key, seeded_key
from pipeline.schema import CURATION_STAGES, curation_summary
from pipeline.stages.stats import BadInputError
from pipeline.vocab import VocabFile, train_sentencepiece, train_wordpiece
from pipeline.vocab.extension import extend_vocab

log = logging.getLogger("bertbeam.corpus")


class TrainVocab(beam.PTransform):
    """Keyed documents -> one `VocabFile`: a sentencepiece model or a WordPiece vocab.txt trained
    on a seeded sample.

    The sample is the --vocab_sample_sentences sentences with the smallest seeded hash: the same on
    every runner, bounded in memory, and spread over the whole corpus.
    """

    def __init__(self, cfg: CorpusConfig, base: VocabFile | None = None, counted=None):
        """With `base` (a given vocab and --extend_vocab N or --extend_min_count K): that vocab plus
        the tokens learned from the sample (`vocab_extension.py`). `counted`: a side input of the stats
        counted before the vocab (read, deduplicated, curated), for the error an empty sample
        gives."""
        super().__init__()
        self._cfg = cfg
        self._base = base
        self._counted = counted

    def expand(self, keyed_docs):
        cfg = self._cfg
        return (
            keyed_docs
            | "Sentences" >> beam.FlatMap(lambda kd: text.document_sentences(kd[1]))
            | "KeyBySeededHash" >> beam.Map(lambda s: (seeded_key(cfg.seed, content_key(s)), s))
            | "Sample" >> beam.combiners.Top.Of(cfg.vocab_sample_sentences, reverse=True)
            | "Train" >> beam.Map(_train_on_sample, cfg, self._base, self._counted)
        )


def nothing_left(counted: dict | None) -> str:
    """Why a build has no text left: curation, when it removed documents (its counts per stage and
    rule), or the input itself."""
    counted = counted or {}
    summary = curation_summary(counted)
    if not any(summary[stage]["documents_removed"] for stage in CURATION_STAGES):
        return "no text to train a vocab on: every input document was empty or skipped; check --input"
    read, copies = counted.get("input/documents", 0), summary["exact_dedup"]["documents_removed"]
    parts = []
    for stage in ("language", "quality", "near_dedup"):  # the order they run in
        part = f"{stage} {summary[stage]['documents_removed']:,}"
        if stage == "quality" and summary["quality"]["rules"]:
            rules = sorted(summary["quality"]["rules"].items(), key=lambda kv: -kv[1]["documents_removed"])
            part += " (" + ", ".join(f"{rule} {c['documents_removed']:,}" for rule, c in rules) + ")"
        parts.append(part)
    return (
        f"curation removed every document: {read:,} read, {copies:,} exact copies dropped, removed by "
        f"{', '.join(parts)}; loosen the curation flags (--languages, --quality_filters, "
        "--near_dedup_threshold) or check --input"
    )


def _train_on_sample(sample: list[tuple[int, str]], cfg: CorpusConfig, base: VocabFile | None,
                     counted: dict | None = None) -> VocabFile:  # fmt: skip
    if not sample:
        raise BadInputError(nothing_left(counted))
    sentences = [s for _, s in sample]
    if base is not None:
        wanted = (f"every token used at least {cfg.extend_min_count} times" if cfg.extend_min_count else
                  f"up to {cfg.extend_vocab} tokens")  # fmt: skip
        log.info("extending the vocab by %s from %s sampled sentences", wanted, f"{len(sentences):,}")
        started = time.monotonic()
        extended = extend_vocab(base, sentences, cfg.extend_vocab, cfg.extend_min_count)
        added = extended.release["added"]
        if not added:
            log.warning("vocab extension: no token of the domain's sample that the vocab lacks is used %s; "
                        "nothing was added, the build goes on with the vocab as given",
                        f"{cfg.extend_min_count} times" if cfg.extend_min_count else "at all")  # fmt: skip
            return extended
        slots = sum(a["id"] < extended.release["base_size"] for a in added)
        log.info("added %d tokens (%d into [unused] slots) in %.1f s: %s", len(added), slots,
                 time.monotonic() - started, " ".join(a["token"] for a in added[:12]))  # fmt: skip
        return extended
    # One library call, no progress inside it: say what it is doing, and how long it took.
    kind = "WordPiece" if cfg.vocab_model_type == "wordpiece" else f"sentencepiece {cfg.vocab_model_type}"
    log.info("training a %s vocab of %d on %s sampled sentences", kind, cfg.vocab_size, f"{len(sentences):,}")
    started = time.monotonic()
    if cfg.vocab_model_type == "wordpiece":
        data = train_wordpiece(sentences, vocab_size=cfg.vocab_size, lower_case=cfg.do_lower_case)
        vocab_file = VocabFile("wordpiece", data, cfg.do_lower_case)
    else:
        model = train_sentencepiece(sentences, vocab_size=cfg.vocab_size, model_type=cfg.vocab_model_type)
        vocab_file = VocabFile("sentencepiece", model)
    log.info("trained the vocab in %.1f s", time.monotonic() - started)
    return vocab_file


def write_vocab(vocab_file: VocabFile, output_dir: str, trained: bool) -> schema.VocabInfo:
    vocab = vocab_file.load()
    write_atomically(f"{output_dir}/{vocab_file.file_name}", vocab_file.data)
    info = vocab.describe(vocab_file.file_name, trained)
    return dataclasses.replace(info, release=dict(vocab_file.release))
