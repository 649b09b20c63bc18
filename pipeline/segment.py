"""Word segmenters for whole-word masking in unspaced scripts (Chinese, Japanese, Thai, ...).

  none             no segmenter: masking units are the vocab's own words (`masking.word_ids`)
  jieba            jieba.lcut(text, cut_all=False, HMM=True), with an optional user dictionary
  MODULE:FUNCTION  any importable function from one sentence's text to its list of words

A segmenter only decides which tokens are masked together: `unit_starts` turns a sentence's words
and its tokens' character spans into "this token begins a unit". A token inside one word continues
that word's unit; a token that straddles two words (a sentencepiece piece across a word boundary)
joins them into one unit. `load` runs once per worker (`DoFn.setup`); `describe` is what the
manifest records of it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import io
import logging
from collections.abc import Callable

import numpy as np

from common.errors import BertbeamError

Segmenter = Callable[[str], list[str]]
JIEBA_MODE = "lcut(cut_all=False, HMM=True)"


class SegmenterError(BertbeamError):
    """A segmenter that cannot be loaded or used; one line naming it and the cause."""


def _jieba(dictionary: bytes | None, source: str) -> Segmenter:
    try:
        import jieba
    except ImportError:
        raise SegmenterError(
            "--word_segmenter jieba: the jieba package is not installed (pip install jieba)"
        ) from None
    jieba.setLogLevel(logging.WARNING)  # not "Building prefix dict..." on every worker
    tokenizer = jieba.Tokenizer()  # our own instance: a user dictionary changes no one else's
    tokenizer.initialize()
    if dictionary is not None:
        buffer = io.BytesIO(dictionary)
        buffer.name = f"--segmenter_dict {source}"  # what jieba's own messages call the file
        try:
            tokenizer.load_userdict(buffer)
        except ValueError as e:  # not UTF-8, or a line that is no "word [freq] [tag]"
            raise SegmenterError(str(e)) from None
    return lambda sentence: tokenizer.lcut(sentence, cut_all=False, HMM=True)


def _function(name: str) -> Segmenter:
    module_name, _, function_name = name.partition(":")
    if not module_name or not function_name:
        raise SegmenterError(f"--word_segmenter {name}: expected none, jieba or MODULE:FUNCTION")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise SegmenterError(f"--word_segmenter {name}: cannot import {module_name} ({e})") from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise SegmenterError(f"--word_segmenter {name}: {module_name} has no function {function_name}")
    return function


@functools.lru_cache(maxsize=4)
def load(name: str, dictionary: bytes | None = None, source: str = "") -> Segmenter | None:
    """The segmenter `name` (None for "none"), with the user `dictionary` read from `source`, or a
    one-line `SegmenterError`. Loaded once per process: the launcher's check and an in-process
    worker share it (jieba's dictionary takes half a second to load)."""
    if name == "none":
        return None
    if name == "jieba":
        return _jieba(dictionary, source)
    return _function(name)


def read_dictionary(path: str | None) -> bytes | None:
    """A user dictionary's bytes, local or gs:// (Beam's FileSystems, so Dataflow workers read it
    too)."""
    if path is None:
        return None
    from apache_beam.io.filesystems import FileSystems

    try:
        with FileSystems.open(path) as f:
            return f.read()
    except Exception as e:  # Beam raises BeamIOError, IOError or the filesystem's own
        raise SegmenterError(f"--segmenter_dict {path}: cannot read it ({type(e).__name__})") from None


def _version(module_name: str) -> str | None:
    try:
        return importlib.metadata.version(module_name.split(".")[0])
    except importlib.metadata.PackageNotFoundError:
        return getattr(importlib.import_module(module_name), "__version__", None)


def describe(name: str, dictionary: bytes | None = None) -> dict:
    """What the manifest records: the segmenter's name, version, mode and dictionary hash."""
    if name == "none":
        return {}
    module = "jieba" if name == "jieba" else name.partition(":")[0]
    return {
        "name": name,
        "version": _version(module),
        "mode": JIEBA_MODE if name == "jieba" else "function",
        "dictionary_sha256": hashlib.sha256(dictionary).hexdigest() if dictionary is not None else None,
    }


def char_words(sentences: list[str], words: list[list[str]]) -> np.ndarray:
    """(characters,) for `sentences` back to back: the index of the word each character belongs
    to (numbered across all sentences), -1 where no word covers it (a segmenter may drop spaces).
    Words are found in order, so a word the segmenter changed (normalised, say) and that is not in
    the text covers nothing. One numpy call per document: the runs are gathered in Python."""
    run_lengths, run_words, word = [], [], 0
    for sentence, sentence_words in zip(sentences, words, strict=True):
        if "".join(sentence_words) == sentence:  # the words tile the text (jieba's do): no search
            run_lengths.extend(map(len, sentence_words))
            run_words.extend(range(word, word + len(sentence_words)))
            word += len(sentence_words)
            continue
        at = 0
        for w in sentence_words:
            found = sentence.find(w, at) if w else -1
            if found < 0:
                continue
            if found > at:
                run_lengths.append(found - at)
                run_words.append(-1)
            run_lengths.append(len(w))
            run_words.append(word)
            word += 1
            at = found + len(w)
        if at < len(sentence):
            run_lengths.append(len(sentence) - at)
            run_words.append(-1)
    return np.repeat(np.array(run_words, np.int64), np.array(run_lengths, np.int64))


def unit_starts(owner: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """(n,) bool: token i begins a masking unit unless it shares a word with token i - 1.

    `owner` is `char_words`' result, `spans` the tokens' (begin, end) character offsets in the
    same text (n, 2). Tokens are in text order, so two neighbours share a word exactly when the
    first word token i touches is not after the last word token i - 1 touches. Words are numbered
    across sentences, so a sentence's first token always begins a unit. A token that covers no
    word (an empty span, or only uncovered characters) begins a unit of its own.
    """
    starts = np.ones(len(spans), bool)
    if len(spans) < 2 or len(owner) == 0:
        return starts
    begin, end = spans[:, 0], spans[:, 1]
    padded = np.append(owner, -1)  # -1 (no word) sorts below every word
    first, last = padded[begin], padded[end - 1]  # the first and last word a token touches
    empty = end == begin
    if empty.any():  # sentencepiece's bare "▁" at a sentence's start
        first[empty] = last[empty] = -1
    if owner.min() < 0:  # a segmenter that leaves characters out: a span's edge may be one
        for i in np.flatnonzero(~empty & ((first < 0) | (last < 0))):
            inside = owner[begin[i] : end[i]]
            inside = inside[inside >= 0]
            if len(inside):
                first[i], last[i] = inside.min(), inside.max()
    starts[1:] = ~((first[1:] >= 0) & (last[:-1] >= 0) & (first[1:] <= last[:-1]))
    return starts
