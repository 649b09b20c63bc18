"""Heuristic quality rules for documents, Gopher's (Rae et al. 2021, MassiveText) and C4's (Raffel
et al. 2020), as datatrove defines and defaults them. Python and numpy (a document's tokens as
arrays, `tokens.py`); nothing here knows about Beam (`filter_documents.py` applies them).

`first_failure(text, filters, thresholds)` returns the first rule a document fails, with the figure
it measured, or None. Rules run in a fixed order (Gopher's repetition rules, Gopher's quality rules,
then C4's), so a document fails for one reason however many apply.

Scripts. A document whose letters are mostly CJK is measured in characters where words make no
sense: its "words" are its CJK characters and its other words, the word-length and stop-word rules
do not apply, and neither do the n-gram repetition rules (common character n-grams repeat in any
Chinese text); line and paragraph repetition, symbols, bullets, ellipses, and C4 apply, C4 with
CJK sentence ends (。！？) as terminal punctuation and characters as a line's words.

C4 rewrites documents (it drops the lines it does not like). bertbeam never rewrites one (a
document's identity is the hash of its text, and it is read again from its file), so C4 here
decides whole documents: one whose lines C4 would keep hold fewer than `c4_min_sentences`
sentences is removed, as C4 would remove what was left of it.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import json
import re

import numpy as np

from pipeline.curation import minhash, tokens
from pipeline.text import char_class, split_sentences

FILTERS = ("gopher", "c4")
_CJK = char_class(tokens.CJK_RANGES)
_TOKENS = re.compile(rf"[{_CJK}]|[^\s{_CJK}\W]+|[^\w\s]+")  # a CJK character, a word, or punctuation
_CJK_CHAR = re.compile(rf"[{_CJK}]")
_PARAGRAPHS = re.compile(r"\n{2,}")
_LINES = re.compile(r"\n+")
STOP_WORDS = frozenset(("the", "be", "to", "of", "and", "that", "have", "with"))  # Gopher's
_BULLETS = ("•", "-", "*", "·", "‣", "◦")
_ELLIPSES = ("...", "…")
_TERMINAL = ('.', '?', '!', '"', "'")  # C4's  # fmt: skip
_CJK_TERMINAL = ("。", "！", "？", "」", "』", "”")
_POLICY = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """Every rule's limit, datatrove's defaults; `--quality_thresholds` overrides any of them."""

    gopher_min_words: int = 50
    gopher_max_words: int = 100_000
    gopher_min_mean_word_length: float = 3.0
    gopher_max_mean_word_length: float = 10.0
    gopher_max_hash_ratio: float = 0.1  # "#" per word
    gopher_max_ellipsis_ratio: float = 0.1  # "..." and "…" per word
    gopher_max_bullet_lines: float = 0.9
    gopher_max_ellipsis_lines: float = 0.3
    gopher_min_alpha_words: float = 0.8  # share of words with a letter
    gopher_min_stop_words: int = 2
    gopher_max_duplicate_lines: float = 0.3
    gopher_max_duplicate_line_chars: float = 0.2
    gopher_max_duplicate_paragraphs: float = 0.3
    gopher_max_duplicate_paragraph_chars: float = 0.2
    gopher_max_top_2gram: float = 0.20  # characters in the most frequent n-gram's occurrences
    gopher_max_top_3gram: float = 0.18
    gopher_max_top_4gram: float = 0.16
    gopher_max_duplicate_5gram: float = 0.15  # characters in n-grams seen before in the document
    gopher_max_duplicate_6gram: float = 0.14
    gopher_max_duplicate_7gram: float = 0.13
    gopher_max_duplicate_8gram: float = 0.12
    gopher_max_duplicate_9gram: float = 0.11
    gopher_max_duplicate_10gram: float = 0.10
    c4_min_sentences: int = 5
    c4_min_line_words: int = 3
    c4_max_word_chars: int = 1000

    @classmethod
    def parse(cls, value: str | None, read=None) -> Thresholds:
        """`--quality_thresholds`: NAME=VALUE[,NAME=VALUE...], or a JSON file of {NAME: VALUE}
        (`read(path) -> bytes` opens it: local or gs://). An unknown name or a bad value is a
        ValueError naming it."""
        if not value:
            return cls()
        if value.endswith(".json"):
            try:
                given = json.loads(read(value))
            except (OSError, ValueError) as e:
                raise ValueError(f"{value}: not a readable JSON object of thresholds ({e})") from None
            if not isinstance(given, dict):
                raise ValueError(
                    f"{value}: expected a JSON object of thresholds, found {type(given).__name__}"
                )
        else:
            pairs = [item.split("=", 1) for item in value.split(",") if item]
            if any(len(p) != 2 for p in pairs):
                raise ValueError(f"{value!r}: expected NAME=VALUE[,NAME=VALUE...] or a .json file")
            given = dict(pairs)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values = {}
        for name, raw in given.items():
            if name not in fields:
                raise ValueError(f"unknown threshold {name!r}; known: {', '.join(fields)}")
            kind = int if fields[name].type in ("int", int) else float
            try:
                values[name] = kind(raw)
            except (TypeError, ValueError):
                raise ValueError(f"threshold {name}: expected a number, found {raw!r}") from None
        return cls(**values)


def is_cjk_document(text: str) -> bool:
    """Most of its letters are CJK characters."""
    if _CJK_CHAR.search(text) is None:  # most documents: no need to count their letters
        return False
    letters = sum(map(str.isalpha, text))
    return letters > 0 and len(_CJK_CHAR.findall(text)) > letters / 2


@functools.lru_cache(maxsize=2)  # both Gopher families read the words of the same document
def _tokens(text: str) -> tokens.Tokens:
    """`_TOKENS.findall(text)` as arrays (`tokens.py`, tested against it)."""
    return tokens.tokenize(text, STOP_WORDS)


def _duplicates(parts: list[str]) -> tuple[int, int]:
    """(parts seen before in the list, their characters)."""
    seen, count, chars = set(), 0, 0
    for part in parts:
        if part in seen:
            count, chars = count + 1, chars + len(part)
        else:
            seen.add(part)
    return count, chars


class _NGrams:
    """A document's words as 64-bit hashes, for n-gram counts in numpy: an n-gram is the wrapping
    polynomial of its words' hashes (`minhash.combine`), its length the characters of its words."""

    def __init__(self, words: tokens.Tokens):
        self.ids = words.hashes
        self.ends = np.concatenate(([0], np.cumsum(words.lengths)))
        self._repeated: dict[int, np.ndarray] = {}  # n -> which n-gram positions repeat an earlier one

    def grams(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(one hash per n-gram position, its characters without spaces)."""
        if self.ids.size < n:
            return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
        return minhash.combine(self.ids, n), self.chars(n)

    def chars(self, n: int) -> np.ndarray:
        """The characters of each n-gram position's words, without spaces."""
        return self.ends[n:] - self.ends[:-n]

    def top_chars(self, n: int, enough: float = 0) -> int:
        """Characters covered by the most frequent n-gram's occurrences, spaces between its words
        included (its length x its count); ties go to the one that occurs first, as
        `Counter.most_common` does. As in `duplicate_chars`, a bound stands for the figure when it
        is below `enough` (from `_bucket_counts`: in most text far below the limit, and found
        without the sort that the exact figure needs)."""
        grams, chars = self.grams(n)
        if grams.size == 0:
            return 0
        if enough > 0:
            counts = _bucket_counts(grams)  # each at least its own n-gram's count
            bound = int(((chars + (n - 1)) * counts).max())
            if bound < enough:
                return bound
        ordered = np.sort(grams)  # counts from runs of a plain sort: twice as fast as np.unique's
        starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
        counts = np.diff(np.append(starts, ordered.size))
        most = counts.max()
        at = 0 if most == 1 else int(np.flatnonzero(np.isin(grams, ordered[starts[counts == most]]))[0])
        return int(chars[at] + n - 1) * int(most)

    def duplicate_chars(self, n: int, enough: float) -> int:
        """Characters in n-grams that occurred earlier in the document, scanning left to right and
        jumping past each repeat (Gopher's definition, as datatrove counts it). The scan only runs
        when it could reach `enough`: the characters of every repeated occurrence bound it, and
        in most text they are far below the limit; that bound is then the figure returned (the
        rule passes either way, and only a failing rule's figure is reported).

        An n-gram that repeats starts with an m-gram that repeats (m < n), so the positions found
        repeated for a smaller m bound it too, without sorting the n-grams: most documents
        stop there for n = 6..10."""
        if self.ids.size < n:
            return 0
        chars = self.chars(n)
        smaller = [m for m in self._repeated if m < n]
        if smaller:
            bound = int(chars[self._repeated[max(smaller)][: chars.size]].sum())
            if bound < enough:
                return bound
        grams = minhash.combine(self.ids, n)
        repeated = _repeats(grams)
        self._repeated[n] = repeated
        bound = int(chars[repeated].sum())
        if bound < enough:
            return bound
        # The scan, visiting only repeated positions one by one: a first occurrence is never in
        # `seen` when the scan reaches it, so a run of them is added at once.
        values, lengths, repeats = grams.tolist(), chars.tolist(), np.flatnonzero(repeated).tolist()
        seen, total, i, k = set(), 0, 0, 0
        while (k := bisect.bisect_left(repeats, i, k)) < len(repeats):
            j = repeats[k]
            seen.update(values[i:j])
            if values[j] in seen:
                total, i = total + lengths[j], j + n
            else:
                seen.add(values[j])
                i = j + 1
        return total


_BUCKETS = 1 << 16  # at most: 512 KiB of counts, so that the bincount stays in the core's cache


def _bucket_counts(grams: np.ndarray) -> np.ndarray:
    """For each n-gram position, how many positions fall into its bucket (the top bits of its
    hash, about one bucket per position): never less than the count of its own n-gram, so a
    figure taken from these counts bounds the exact one from above, without a sort."""
    bits = min(max(grams.size.bit_length(), 4), _BUCKETS.bit_length() - 1)
    buckets = (grams >> np.uint64(64 - bits)).astype(np.intp)
    return np.bincount(buckets, minlength=1 << bits)[buckets]


def _repeats(values: np.ndarray) -> np.ndarray:
    """Which positions hold a value seen earlier in the array. A plain sort finds the values that
    repeat (in text, few); first indices are then taken among their occurrences alone, which
    spares the stable argsort that `np.unique` with first indices runs over the whole array."""
    ordered = np.sort(values)
    again = np.unique(ordered[1:][ordered[1:] == ordered[:-1]])
    repeated = np.zeros(values.size, dtype=bool)
    if again.size:
        top = np.zeros(1 << 16, dtype=bool)  # a 64 KiB filter on the top bits first: most positions
        top[again >> np.uint64(48)] = True  # leave here, and the search below sees only the rest
        near = np.flatnonzero(top[values >> np.uint64(48)])
        found = np.minimum(np.searchsorted(again, values[near]), again.size - 1)
        at = near[again[found] == values[near]]
        _, first = np.unique(values[at], return_index=True)
        repeated[at] = True
        repeated[at[first]] = False
    return repeated


def gopher_repetition(text: str, cjk: bool, t: Thresholds):
    """Yields (rule, measured, passes) for Gopher's repetition rules."""
    size = max(len(text), 1)
    # The reader's documents hold no blank line (`text._finish`): one paragraph, lines at each "\n".
    blank = "\n\n" in text
    paragraphs = _PARAGRAPHS.split(text.strip()) if blank else [text.strip()]
    count, chars = _duplicates(paragraphs)
    yield (
        "gopher_duplicate_paragraphs",
        count / len(paragraphs),
        count / len(paragraphs) <= t.gopher_max_duplicate_paragraphs,
    )
    yield (
        "gopher_duplicate_paragraph_chars",
        chars / size,
        chars / size <= t.gopher_max_duplicate_paragraph_chars,
    )
    lines = _LINES.split(text) if blank else text.split("\n")
    count, chars = _duplicates(lines)
    yield "gopher_duplicate_lines", count / len(lines), count / len(lines) <= t.gopher_max_duplicate_lines
    yield "gopher_duplicate_line_chars", chars / size, chars / size <= t.gopher_max_duplicate_line_chars
    if cjk:
        return
    grams = _NGrams(_tokens(text))
    for n in (2, 3, 4):
        share = grams.top_chars(n, enough=getattr(t, f"gopher_max_top_{n}gram") * size) / size
        yield f"gopher_top_{n}gram", share, share <= getattr(t, f"gopher_max_top_{n}gram")
    for n in range(5, 11):
        limit = getattr(t, f"gopher_max_duplicate_{n}gram")
        share = grams.duplicate_chars(n, enough=limit * size) / size
        yield f"gopher_duplicate_{n}gram", share, share <= limit


def gopher_quality(text: str, cjk: bool, t: Thresholds):
    """Yields (rule, measured, passes) for Gopher's quality rules."""
    words = _tokens(text)
    n_real, real_chars = int(words.real.sum()), int(words.lengths[words.real].sum())
    alpha, stops = int(words.alpha.sum()), int(words.stop.sum())
    yield "gopher_word_count", n_real, t.gopher_min_words <= n_real <= t.gopher_max_words
    n_words = max(len(words), 1)
    if not cjk and n_real:
        mean = real_chars / n_real
        yield (
            "gopher_mean_word_length",
            mean,
            t.gopher_min_mean_word_length <= mean <= t.gopher_max_mean_word_length,
        )
    hashes = text.count("#") / n_words
    yield "gopher_hash_ratio", hashes, hashes <= t.gopher_max_hash_ratio
    ellipses = sum(text.count(e) for e in _ELLIPSES) / n_words
    yield "gopher_ellipsis_ratio", ellipses, ellipses <= t.gopher_max_ellipsis_ratio
    lines = text.splitlines() or [""]
    bullets = sum(line.lstrip().startswith(_BULLETS) for line in lines) / len(lines)
    yield "gopher_bullet_lines", bullets, bullets <= t.gopher_max_bullet_lines
    ending = sum(line.rstrip().endswith(_ELLIPSES) for line in lines) / len(lines)
    yield "gopher_ellipsis_lines", ending, ending <= t.gopher_max_ellipsis_lines
    yield "gopher_alpha_words", alpha / n_words, alpha / n_words >= t.gopher_min_alpha_words
    if not cjk:
        yield "gopher_stop_words", stops, stops >= t.gopher_min_stop_words


def c4(text: str, cjk: bool, t: Thresholds):
    """Yields (rule, measured, passes) for C4's rules, over the lines C4 would keep. Once enough
    sentences are counted, only a "{" or "lorem ipsum" further on could fail the document: without
    either in the text, the count stops there (the figure is exact whenever the rule fails)."""
    settled = "{" not in text and "lorem ipsum" not in text.lower()
    sentences = 0
    for line in text.splitlines():
        if settled and sentences >= t.c4_min_sentences:
            break
        line = line.strip()
        words = list(line.replace(" ", "")) if cjk else line.split()
        if max(map(len, line.split()), default=0) > t.c4_max_word_chars:
            continue
        terminal = line.endswith(_TERMINAL + (_CJK_TERMINAL if cjk else ())) and not line.endswith("...")
        if not terminal or len(words) < t.c4_min_line_words:
            continue
        lowered = line.lower()
        if "lorem ipsum" in lowered:
            yield "c4_lorem_ipsum", 1, False
            return
        if "javascript" in lowered:
            continue
        if "{" in line:
            yield "c4_curly_brace", 1, False
            return
        if any(p in lowered for p in _POLICY):
            continue
        sentences += len(split_sentences(line))
    yield "c4_too_few_sentences", sentences, sentences >= t.c4_min_sentences


RULES = {"gopher": (gopher_repetition, gopher_quality), "c4": (c4,)}


def first_failure(text: str, filters: tuple[str, ...], t: Thresholds) -> tuple[str, float] | None:
    """(rule, measured figure) of the first rule `text` fails among `filters`, or None."""
    cjk = is_cjk_document(text)
    for name in FILTERS:
        if name in filters:
            for rules in RULES[name]:
                for rule, measured, passes in rules(text, cjk, t):
                    if not passes:
                        return rule, round(float(measured), 6)
    return None
