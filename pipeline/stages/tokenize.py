"""DocumentTokenizer: (key, document) pairs -> TokenizedDoc, sentences split and encoded once;
`CutGroups` (groups.py) calls it on each batch of a packing group's documents as they are read."""

from __future__ import annotations

import itertools
import os

import numpy as np

from pipeline import segment, text
from pipeline.config import CorpusConfig
from pipeline.instances import TokenizedDoc
from pipeline.stages import progress as _progress
from pipeline.stages.stats import BadInputError


class DocumentTokenizer:
    """A batch of (key, document) -> a TokenizedDoc per document with tokens (and how many had
    none): split into sentences, encoded once; with a word segmenter, each token also gets its
    "begins a masking unit" flag.

    Batches (up to a few hundred Ki characters), because one tokenizer call and one segmenter
    loop per batch, rather than per document, cut the segmented build's tokenizing time by a
    sixth on the Chinese reviews (the two libraries stop evicting each other's tables from the
    cache between every document). A document's result does not depend on its batch.
    """

    def __init__(self, cfg: CorpusConfig, segmenter: dict | None = None):
        self._cfg = cfg
        self._segmenter_info = segmenter or {}  # segment.describe's record, checked against what loads
        self._launcher_pid = os.getpid()  # made with the graph: progress, and whether in process
        self._loaded = None
        self._segment = None

    def setup(self):
        # tokenizers' own thread pool (encode_batch) on every core, or not: read by tokenizers at
        # each call, the bytes are the same either way. Beam workers in processes of their own
        # (multi_processing, Dataflow) are one per core already, and there the pool only competes
        # with the other workers and with the segmenter: measured on 2 cores, the Chinese reviews
        # tokenized 1.4x faster without it. The in-process runner (in_memory, the default) is one
        # worker, and the pool encodes WordPiece 1.6x faster on 2 cores (bench/corpus.py --corpora
        # google). A segmenter is pure Python and holds the GIL: no pool then either.
        in_process = os.getpid() == self._launcher_pid
        pool = in_process and self._cfg.word_segmenter == "none"
        os.environ["TOKENIZERS_PARALLELISM"] = "true" if pool else "false"
        cfg = self._cfg
        dictionary = segment.read_dictionary(cfg.segmenter_dict)
        if segment.describe(cfg.word_segmenter, dictionary) != self._segmenter_info:
            raise BadInputError(
                f"--segmenter_dict {cfg.segmenter_dict}: changed while the build ran; run it again"
            )
        self._segment = segment.load(cfg.word_segmenter, dictionary, cfg.segmenter_dict or "")

    def tokenize(self, batch: list[tuple[int, str]], vocab_file) -> tuple[list[TokenizedDoc], int]:
        """(the documents with tokens, in the batch's order; how many had none)."""
        if self._loaded is None or self._loaded[0] != vocab_file:
            self._loaded = (vocab_file, vocab_file.load())  # arrives as a side input: load once
        vocab = self._loaded[1]
        documents = [text.document_sentences(document) for _, document in batch]
        sentences = [sentence for document in documents for sentence in document]
        if self._segment is None:
            encoded, starts = vocab.encode(sentences), None
        else:
            encoded, starts = self._encode_units(sentences, vocab)
        docs, sentence_at, token_at = [], 0, 0
        for (key, _), document in zip(batch, documents, strict=True):
            ids = [e for e in encoded[sentence_at : sentence_at + len(document)] if e]
            sentence_at += len(document)
            if not ids:
                continue
            lengths = np.array([len(e) for e in ids], np.int32)
            n = int(lengths.sum())
            tokens = np.fromiter(itertools.chain.from_iterable(ids), np.int32, n)
            units = None if starts is None else starts[token_at : token_at + n]
            token_at += n
            docs.append(TokenizedDoc(key, tokens, lengths, units))
        progress = _progress.stage("tokenized", unit="documents", launcher_pid=self._launcher_pid)
        progress.add(len(batch), tokens=token_at)
        return docs, len(batch) - len(docs)

    def _encode_units(self, sentences: list[str], vocab) -> tuple[list[list[int]], np.ndarray]:
        """The sentences' ids, and each token's "begins a unit" flag (all sentences back to back),
        from the segmenter's words and the tokens' character spans: one numpy pass per batch.
        Words are numbered across the batch, so every sentence's first token begins a unit."""
        encoded, spans, offsets, offset = [], [], [], 0
        for sentence, (ids, sentence_spans) in zip(
            sentences, vocab.encode_with_spans(sentences), strict=True
        ):
            encoded.append(ids)
            spans.append(sentence_spans)
            offsets.append(offset)
            offset += len(sentence)
        counts = [len(ids) for ids in encoded]
        flat = itertools.chain.from_iterable(itertools.chain.from_iterable(spans))
        spans = np.fromiter(flat, np.int64, 2 * sum(counts)).reshape(-1, 2)
        spans += np.repeat(np.array(offsets, np.int64), counts)[:, None]  # offsets in the batch's text
        owner = segment.char_words(sentences, [self._segment(s) for s in sentences])
        return encoded, segment.unit_starts(owner, spans)
