"""Near-duplicate removal: MinHash's estimate against brute-force Jaccard on real text, and the
Beam stage's clusters on planted copies (TestPipeline, the real DirectRunner)."""

from __future__ import annotations

import random

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipeline.config import CorpusConfig
from pipeline.curation import minhash
from pipeline.curation.near_dedup import NearDeduplicate
from pipeline.keys import content_key


def cfg(**overrides) -> CorpusConfig:
    return CorpusConfig(
        **{"input_patterns": ("unused",), "output_dir": "unused", "vocab_size": 100,
           "near_dedup_threshold": 0.8, **overrides}
    )  # fmt: skip


@pytest.fixture(scope="module")
def words(botchan) -> list[str]:
    return botchan.read_text(encoding="utf-8").split()


def edited(text: str, share: float, seed: int) -> str:
    """`text` with `share` of its words replaced by words that occur nowhere else."""
    out = text.split()
    for i in random.Random(seed).sample(range(len(out)), round(share * len(out))):
        out[i] = f"edit{seed}x{i}"
    return " ".join(out)


def shingles(text: str) -> np.ndarray:
    return minhash.shingle_hashes(minhash.unit_hashes(text, "words"), 5)


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_the_estimate_tracks_brute_force_jaccard(words, seed):
    """Over 48 pairs of real text at similarities from 0.1 to 1, the estimate's errors have the
    spread sampling theory gives 112 independent hash functions (correlated ones, such as
    (a x + b) mod p with small a, made it three times that), on each of 3 seeds."""
    hasher = minhash.MinHasher(14, 8, seed=seed)
    errors, theory = [], []
    for n in range(48):
        base = " ".join(words[n * 700 : n * 700 + 301])
        a, b = shingles(base), shingles(edited(base, (0.0, 0.01, 0.03, 0.06, 0.1, 0.25)[n % 6], n))
        true = minhash.true_jaccard(a, b)
        errors.append(minhash.estimated_jaccard(hasher.signature(a), hasher.signature(b)) - true)
        theory.append(true * (1 - true) / hasher.size)
        if n % 6 == 0:
            assert true == 1.0 and errors[-1] == 0.0
    spread, expected = float(np.sqrt(np.mean(np.square(errors)))), float(np.sqrt(np.mean(theory)))
    assert spread < 1.5 * expected, (spread, expected)
    assert abs(float(np.mean(errors))) < 0.02  # unbiased


def test_normalising_ignores_case_punctuation_digits_and_spacing():
    assert shingles("The  cat, sat on 12 mats!").tolist() == shingles("the cat sat on 34 mats").tolist()
    assert shingles("the cat sat on the mat").size == 2  # 6 words: two 5-grams
    assert shingles("too short").size == 1  # fewer words than a shingle: one shingle
    assert shingles("!!! ...").size == 0


def test_signatures_are_a_function_of_the_seed(words):
    text = shingles(" ".join(words[:200]))
    one, again, other = (minhash.MinHasher(4, 3, seed=s).signature(text) for s in (7, 7, 8))
    assert one.tobytes() == again.tobytes()
    assert one.tobytes() != other.tobytes()
    assert one.shape == (12,)
    assert len(set(minhash.MinHasher(4, 3, seed=7).bucket_keys(one))) == 4


def test_characters_find_near_copies_in_text_without_spaces(zh_reviews):
    review = max((zh_reviews / "pos.txt").read_text(encoding="utf-8").split("\n\n"), key=len)[:300]
    copy = review[:100] + "好" + review[101:]  # one character changed
    by_chars = [minhash.shingle_hashes(minhash.unit_hashes(t, "chars"), 5) for t in (review, copy)]
    by_words = [minhash.shingle_hashes(minhash.unit_hashes(t, "words"), 5) for t in (review, copy)]
    assert minhash.true_jaccard(*by_chars) > 0.95
    # Split at spaces and punctuation, a clause is one "word": one character costs five shingles
    assert minhash.true_jaccard(*by_words) < 0.9


def test_the_candidate_curve_is_fineweb_s():
    assert minhash.candidate_probability(0.8, 14, 8) == pytest.approx(0.924, abs=1e-3)
    assert minhash.candidate_probability(0.5, 14, 8) == pytest.approx(0.053, abs=1e-3)
    assert minhash.confirm_threshold(0.8, 112) == pytest.approx(0.8 - 2 * (0.16 / 112) ** 0.5)


def run_near_dedup(texts: list[str], config: CorpusConfig, expected: list) -> None:
    with TestPipeline() as p:
        removed, _ = p | beam.Create([(content_key(t), t) for t in texts]) | NearDeduplicate(config)
        found = removed | beam.Map(lambda kr: (kr[0], kr[1].kept, kr[1].value, kr[1].bytes))
        assert_that(found, equal_to(expected))


@pytest.mark.slow  # a Beam pipeline (or jieba's dictionary) per case: `make test`, not test-quick
def test_a_cluster_keeps_one_member_whatever_the_order(words):
    base = " ".join(words[5000:5250])
    cluster = [base] + [edited(base, 0.01, seed) for seed in range(3)]  # J about 0.95 to base
    unrelated = [" ".join(words[i : i + 250]) for i in range(10_000, 12_000, 400)]
    kept = min(content_key(t) for t in cluster)
    expected = [(content_key(t), kept, 4, len(t.encode())) for t in cluster if content_key(t) != kept]
    texts = cluster + unrelated
    run_near_dedup(texts, cfg(), expected)
    random.Random(0).shuffle(texts)
    run_near_dedup(texts, cfg(), expected)


@pytest.mark.slow  # a Beam pipeline (or jieba's dictionary) per case: `make test`, not test-quick
def test_a_chain_collapses_into_one_cluster(words):
    a = " ".join(words[7000:7400])
    b = edited(a, 0.02, 5)  # true Jaccard: a~b 0.84, b~c 0.79, a~c 0.67
    c = edited(b, 0.025, 6)
    sig = {
        name: minhash.MinHasher(seed=12345).signature(shingles(t))
        for name, t in zip("abc", (a, b, c), strict=True)
    }
    needed = minhash.confirm_threshold(0.8, 112)
    # The premise: a~b and b~c are confirmed pairs, a and c are not near enough on their own.
    assert minhash.estimated_jaccard(sig["a"], sig["b"]) >= needed
    assert minhash.estimated_jaccard(sig["b"], sig["c"]) >= needed
    assert minhash.estimated_jaccard(sig["a"], sig["c"]) < needed
    kept = min(content_key(t) for t in (a, b, c))
    expected = [(content_key(t), kept, 3, len(t.encode())) for t in (a, b, c) if content_key(t) != kept]
    run_near_dedup([a, b, c], cfg(), expected)


@pytest.mark.slow  # a Beam pipeline (or jieba's dictionary) per case: `make test`, not test-quick
def test_pairs_below_the_threshold_stay(words):
    base = " ".join(words[9000:9300])
    far = edited(base, 0.15, 5)  # J about 0.45: may share a bucket, must not be confirmed
    assert minhash.true_jaccard(shingles(base), shingles(far)) < 0.6
    run_near_dedup([base, far], cfg(), [])


@pytest.mark.slow  # a Beam pipeline (or jieba's dictionary) per case: `make test`, not test-quick
def test_a_segmenters_words_are_units_too(zh_reviews):
    import jieba

    review = (zh_reviews / "pos.txt").read_text(encoding="utf-8").split("\n\n")[3].strip()
    words = minhash.units(review, "segmenter", jieba.lcut)
    chars = minhash.units(review, "chars")
    assert "".join(words) == "".join(chars)  # the same text, cut into fewer, longer units
    assert len(words) < len(chars) and max(map(len, words)) > 1


def test_ascii_text_is_cut_as_normalise_cuts_it(python_docs):
    """ASCII text skips the regular expressions (one byte map): its words and characters are
    those of `normalise` on real files and on every ASCII character."""
    texts = [path.read_text(encoding="utf-8") for path in sorted(python_docs.rglob("*.txt"))[::9]]
    rng = random.Random(4)
    texts += ["".join(map(chr, range(128)))] + ["".join(chr(rng.randrange(128)) for _ in range(301))] * 5
    texts = [t for t in texts if t.isascii()]
    assert len(texts) > 10
    for text in texts:
        normal = minhash.normalise(text)
        assert minhash.units(text, "words") == normal.split()
        assert minhash.units(text, "chars") == [c for c in normal if not c.isspace()]


def test_a_signature_is_the_minimum_of_each_hash_function(words):
    """A signature is, per hash function, the plain minimum over the document's shingles: the
    elementwise minimum of its shingles' one-shingle signatures (2,601 shingles), whatever their
    order and repeats; a function of the seed, one 32-bit value per position."""
    hasher = minhash.MinHasher(5, 3, seed=11)
    shingles = minhash.shingle_hashes(minhash.unit_hashes(" ".join(words[:2605]), "words"), 5)
    assert shingles.size > 2500
    each = np.stack([hasher.signature(shingles[i : i + 1]) for i in range(shingles.size)])
    signature = hasher.signature(shingles)
    assert signature.dtype == np.uint32 and signature.shape == (15,)
    assert signature.tolist() == each.min(axis=0).tolist()
    # Independent functions each pick their own minimum; correlated ones (the bug the estimate's
    # spread test guards against) pick much the same shingle. 15 of 2,601: a repeat is unlikely.
    assert len(set(each.argmin(axis=0).tolist())) >= 13
    shuffled = np.random.default_rng(0).permutation(np.concatenate([shingles, shingles[::7]]))
    assert hasher.signature(shuffled).tolist() == signature.tolist()
    assert minhash.MinHasher(5, 3, seed=12).signature(shingles).tolist() != signature.tolist()


def test_unit_hashes_are_each_units_hash(python_docs, zh_reviews, words):
    """Every unit's hash, computed at once over the document's bytes, is its plain definition's
    (`unit_hash`, a polynomial in Python's integers) for the unit `units` cuts: on ASCII files,
    English with quotes and accents, Chinese, and every character there is."""
    import jieba

    texts = [path.read_text(encoding="utf-8") for path in sorted(python_docs.rglob("*.txt"))[::40]]
    reviews = (zh_reviews / "pos.txt").read_text(encoding="utf-8").split("\n\n")[:20]
    texts += reviews
    odd = "\u201cCaf\u00e9\u201d \u2014 \ufb01ne \u0663\u0664 \u2160 \u212a x\x00y"  # quotes, fi, digits, NUL
    texts += [" ".join(words[:3001]), odd, "", "!?"]
    every = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    for text in texts + [every[i : i + 40_000] for i in range(0, len(every), 40_000)]:
        for unit in ("words", "chars"):
            assert minhash.unit_hashes(text, unit).tolist() == [
                minhash.unit_hash(u) for u in minhash.units(text, unit)
            ], (unit, text[:40])
    review = reviews[3]
    assert minhash.unit_hashes(review, "segmenter", jieba.lcut).tolist() == [
        minhash.unit_hash(u) for u in minhash.units(review, "segmenter", jieba.lcut)
    ]


def reference_removals(texts: list[str], config: CorpusConfig) -> list:
    """Near-dedup's decisions written plainly: every pair that shares a band's bucket (all pairs,
    or each with the smallest key in a bucket over ALL_PAIRS_UP_TO), confirmed by its estimate,
    then clusters by repeated merging; each keeps its smallest key."""
    from pipeline.curation.near_dedup import ALL_PAIRS_UP_TO

    hasher = minhash.MinHasher(config.minhash_bands, config.minhash_rows, config.seed)
    signatures = {content_key(t): hasher.signature(shingles(t)) for t in texts}
    buckets: dict[int, set] = {}
    for key, signature in signatures.items():
        for bucket in hasher.bucket_keys(signature):
            buckets.setdefault(bucket, set()).add(key)
    needed = minhash.confirm_threshold(config.near_dedup_threshold, hasher.size)
    cluster = {key: {key} for key in signatures}
    for members in map(sorted, buckets.values()):
        pairs = [(a, b) for i, a in enumerate(members) for b in members[i + 1 :]]
        if len(members) > ALL_PAIRS_UP_TO:
            pairs = [(members[0], b) for b in members[1:]]
        for a, b in pairs:
            if minhash.estimated_jaccard(signatures[a], signatures[b]) >= needed:
                merged = cluster[a] | cluster[b]
                for key in merged:
                    cluster[key] = merged
    size = {content_key(t): len(t.encode()) for t in texts}
    return [(key, min(c), len(c), size[key]) for key, c in cluster.items() if key != min(c)]


@pytest.mark.slow  # a Beam pipeline (or jieba's dictionary) per case: `make test`, not test-quick
def test_the_stage_decides_as_the_plain_definition(words):
    """Planted copies at edit rates around the threshold, and 40 identical-but-for-a-word copies
    (a bucket over ALL_PAIRS_UP_TO): the stage removes what the plain definition removes."""
    texts = [" ".join(words[i : i + 157]) for i in range(20_000, 28_000, 500)]
    texts += [edited(t, rate, seed) for seed, t in enumerate(texts) for rate in (0.01, 0.04, 0.08)]
    crowd = " ".join(words[30_000:30_400])
    texts += [edited(crowd, 0.003, seed) for seed in range(40)]
    expected = reference_removals(texts, cfg())
    assert len(expected) > 40  # the premise: many removals, of both kinds
    run_near_dedup(texts, cfg(), expected)
