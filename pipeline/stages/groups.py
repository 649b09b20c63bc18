"""Packing groups cut from the input as it is read: the documents kept go in batches of files (or
of tfds documents), and `CutGroups` reads each batch, tokenizes it and cuts it into packing groups
of about --group_tokens tokens, each passed on as soon as its last document is tokenized.

    (key, pointer or text) -> BatchDocuments -> ((split, batch), [file or document, ...])
                           -> CutGroups      -> (split, group, [TokenizedDoc, ...]), and stats

A group is a deterministic function of the documents kept (their keys, sizes and places in their
files) and the input's size, never of the runner, its bundles or its workers: a file's batch is
chosen by a hash of its first document, a batch's files are read in that hash's order and their
documents in file order,
and a group ends at the first document that brings it to --group_tokens, unless what is left of
the batch would make less than half a group (then the batch's last group takes it all). Instance
creation therefore never waits for the whole corpus to be tokenized, and no token passes a
shuffle (PACKING_VERSION 3; versions 1 and 2 grouped by a hash of each document, after a
barrier on the corpus's token count).
"""

from __future__ import annotations

from collections import Counter

import apache_beam as beam

from pipeline import schema
from pipeline.config import CorpusConfig
from pipeline.keys import split_of
from pipeline.stages.read import RereadDocuments
from pipeline.stages.stats import count_stats
from pipeline.stages.tokenize import DocumentTokenizer

# Characters per token, to size batches before anything is tokenized: WordPiece and sentencepiece
# vocabularies of English give 4-5, Chinese characters 1-1.5. A batch of about a group of
# English holds about two of Chinese; only how a batch is cut depends on tokens.
CHARS_PER_TOKEN = 4
# Characters per tokenizer call: one call per document kept the tokenizer's thread pool waking
# up for ~20 K characters at a time (the Python docs in BERT's format: 6.2 s read and tokenized
# against 5.2 s in batches of 256 Ki).
TOKENIZE_CHARS = 1 << 18


def _mixed(key: int) -> int:
    """A key's bits mixed (Fibonacci hashing), so that batches and splits (`split_of`: the key
    modulo a million) are independent."""
    return ((key * 0x9E3779B97F4A7C15) & ((1 << 64) - 1)) >> 16


def batches_for(chars: int, cfg: CorpusConfig) -> int:
    """How many batches a split of about `chars` characters is read in: about a group's worth each."""
    return max(1, int(chars) // (cfg.group_tokens * CHARS_PER_TOKEN))


def expected_instances(chars: int | None, cfg: CorpusConfig) -> int | None:
    """About how many instances `chars` characters of input make (progress lines' totals): full
    rows of English-sized tokens, each split at its dupe factor. None when the size is unknown."""
    if not chars:
        return None
    rows = {s: split_chars(chars, s, cfg) / CHARS_PER_TOKEN / (cfg.seq_len - 2) for s in schema.SPLITS}
    return round(rows["train"] * cfg.dupe_factor + rows["validation"])


def split_chars(chars: int, split: str, cfg: CorpusConfig) -> float:
    """A split's share of `chars`, by --validation_fraction."""
    fraction = cfg.validation_fraction
    return chars * (fraction if split == "validation" else 1 - fraction)


class BatchDocuments(beam.PTransform):
    """(key, Pointer) -> ((split, batch), [(file key, file, index, key, characters), ...]);
    or, for a tfds split (`input_chars` None: texts, no files), (key, text) ->
    ((split, batch), [(key, text), ...]).

    A file's documents go to the batch its key picks (`Pointer.file_key`), so small files share
    batches and a group can span files. The batches per split (`batches_for`) come from the
    input's size, known before the build runs (`input_chars`, the files' bytes), or for a tfds
    split from its documents' characters, counted first."""

    def __init__(self, cfg: CorpusConfig, input_chars: int | None):
        super().__init__()
        self._cfg = cfg
        self._input_chars = input_chars

    def expand(self, docs):
        cfg = self._cfg
        if self._input_chars is not None:
            batches = {s: batches_for(split_chars(self._input_chars, s, cfg), cfg) for s in schema.SPLITS}
            return (
                docs
                | "FileBatch" >> beam.Map(_file_batch, batches=batches, cfg=cfg)
                | "GroupBatches" >> beam.GroupByKey()
            )
        sizes = beam.pvalue.AsSingleton(
            docs
            | "CharactersPerDocument"
            >> beam.Map(lambda kept: (split_of(kept[0], cfg.validation_fraction), len(kept[1])))
            | "CharactersPerSplit" >> beam.CombinePerKey(sum)
            | "CharactersBySplit" >> beam.combiners.ToDict()
        )
        return (
            docs
            | "DocumentBatch" >> beam.Map(_document_batch, sizes=sizes, cfg=cfg)
            | "GroupBatches" >> beam.GroupByKey()
        )


def _file_batch(kept, batches, cfg):
    key, pointer = kept
    split = split_of(key, cfg.validation_fraction)
    return (split, _mixed(pointer.file_key) % batches[split]), (*pointer[:3], key, pointer.chars)


def _document_batch(kept, sizes, cfg):
    key, _ = kept
    split = split_of(key, cfg.validation_fraction)
    return (split, _mixed(key) % batches_for(sizes[split], cfg)), kept


class CutGroups(beam.DoFn):
    """((split, batch), sources) -> (split, group, [TokenizedDoc]) for each packing group cut from
    the batch's documents as they are read and tokenized; a "stats" output per batch.

    A group is named by the key of its first document (keys are unique once deduplicated). Its
    documents stay in memory until it is passed on: about --group_tokens tokens, up to one and a
    half times that for a batch's last group.
    """

    def __init__(self, cfg: CorpusConfig, segmenter: dict | None = None, rereadable: bool = True):
        # rereadable: sources are (file key, file, index, key, characters); else (key, text)
        self._cfg = cfg
        self._rereadable = rereadable
        self._tokenizer = DocumentTokenizer(cfg, segmenter)
        self._reread = RereadDocuments(cfg)

    def setup(self):
        self._tokenizer.setup()

    def _documents(self, sources):
        """(key, text, characters) of the batch's documents, in the order groups are cut: files
        by key (then path), documents in file order; or tfds documents by key."""
        if not self._rereadable:
            for key, text in sorted(sources):
                yield key, text, len(text)
            return
        by_file: dict[tuple[int, str], list] = {}
        for file_key, path, index, key, chars in sources:
            by_file.setdefault((file_key, path), []).append((index, key, chars))
        for (_, path), wanted in sorted(by_file.items()):
            wanted.sort()
            sizes = {key: chars for _, key, chars in wanted}
            for key, text in self._reread.process((path, [(index, key) for index, key, _ in wanted])):
                yield key, text, sizes[key]

    def process(self, batch, vocab_file):
        (split, _), sources = batch
        sources = list(sources)
        total = sum(len(s[1]) if not self._rereadable else s[4] for s in sources)
        group_tokens = self._cfg.group_tokens
        group, tokens, read, chars_seen, tokens_seen, skipped = [], 0, [], 0, 0, 0
        pending_chars = 0

        def tokenized(pending):  # TokenizedDocs of the pending documents, with their characters
            nonlocal skipped, chars_seen
            docs, empty = self._tokenizer.tokenize([(key, text) for key, text, _ in pending], vocab_file)
            sizes = {key: chars for key, _, chars in pending}
            skipped += empty
            chars_seen += sum(sizes.values()) - sum(sizes[doc.key] for doc in docs)  # read, no tokens
            return [(doc, sizes[doc.key]) for doc in docs]

        def cut(docs):
            """Documents into the group, in order; yields each group as it fills."""
            nonlocal group, tokens, chars_seen, tokens_seen
            for doc, chars in docs:
                group.append(doc)
                tokens += doc.n_tokens
                chars_seen += chars
                tokens_seen += doc.n_tokens
                left = (total - chars_seen) * tokens_seen / max(chars_seen, 1)  # tokens still to come
                if tokens >= group_tokens and left >= group_tokens / 2:
                    yield split, group[0].key, group
                    group, tokens = [], 0

        for key, text, chars in self._documents(sources):
            read.append((key, text, chars))
            pending_chars += chars
            if pending_chars >= TOKENIZE_CHARS:
                yield from cut(tokenized(read))
                read, pending_chars = [], 0
        if read:
            yield from cut(tokenized(read))
        if group:
            yield split, group[0].key, group
        if skipped:
            yield beam.pvalue.TaggedOutput("stats", count_stats(Counter({"skipped/no_tokens": skipped})))
