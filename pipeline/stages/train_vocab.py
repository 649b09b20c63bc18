"""TrainVocab: keyed documents -> a sentencepiece or WordPiece VocabFile from a seeded sample;
write_vocab puts it beside the shards."""

from __future__ import annotations

import logging
import time

import apache_beam as beam

from pipeline import schema, text
from pipeline.config import CorpusConfig
from pipeline.files import write_atomically
from pipeline.keys import content_key, seeded_key
from pipeline.stages.stats import BadInputError
from pipeline.vocab import VocabFile, train_sentencepiece, train_wordpiece

log = logging.getLogger("bertbeam.corpus")


class TrainVocab(beam.PTransform):
    """Keyed documents -> one `VocabFile`: a sentencepiece model or a WordPiece vocab.txt trained
    on a seeded sample.

    The sample is the --vocab_sample_sentences sentences with the smallest seeded hash: the same on
    every runner, bounded in memory, and spread over the whole corpus.
    """

    def __init__(self, cfg: CorpusConfig):
        super().__init__()
        self._cfg = cfg

    def expand(self, keyed_docs):
        cfg = self._cfg
        return (
            keyed_docs
            | "Sentences" >> beam.FlatMap(lambda kd: text.document_sentences(kd[1]))
            | "KeyBySeededHash" >> beam.Map(lambda s: (seeded_key(cfg.seed, content_key(s)), s))
            | "Sample" >> beam.combiners.Top.Of(cfg.vocab_sample_sentences, reverse=True)
            | "Train" >> beam.Map(_train_on_sample, cfg)
        )


def _train_on_sample(sample: list[tuple[int, str]], cfg: CorpusConfig) -> VocabFile:
    if not sample:
        raise BadInputError(
            "no text to train a vocab on: every input document was empty or skipped; check --input"
        )
    sentences = [s for _, s in sample]
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
    return vocab.describe(vocab_file.file_name, trained)
