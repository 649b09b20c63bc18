"""Google BERT's WordPiece vocab.txt as the corpus vocabulary: tokenization equal to Google's own
tokenizer (transcribed below as the oracle), whole-word masking over "##" continuations, and the
manifest's record of the vocab."""

from __future__ import annotations

import hashlib
import unicodedata
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from pipeline import text
from pipeline.keys import content_key, split_of
from pipeline.masking import MaskingTables, word_ids
from pipeline.vocab import VocabError, WordPieceVocab
from tests.conftest import build, read_records, unmasked
from tests.corpus_checks import assert_covers, expected_documents, pieces_of

# ------------------------------------------------------------------------------------------------
# The oracle: google-research/bert tokenization.py (BasicTokenizer + WordpieceTokenizer), transcribed.


def _is_whitespace(c):
    return c in " \t\n\r" or unicodedata.category(c) == "Zs"


def _is_control(c):
    return c not in "\t\n\r" and unicodedata.category(c).startswith("C")


def _is_punctuation(c):
    cp = ord(c)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(c).startswith("P")


def _is_chinese_char(cp):
    ranges = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
              (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]  # fmt: skip
    return any(lo <= cp <= hi for lo, hi in ranges)


def _basic_tokenize(text_: str, lower: bool) -> list[str]:
    cleaned = []
    for c in text_:
        if ord(c) in (0, 0xFFFD) or _is_control(c):
            continue
        cleaned.append(" " if _is_whitespace(c) else c)
    spaced = "".join(f" {c} " if _is_chinese_char(ord(c)) else c for c in cleaned)
    out = []
    for token in spaced.split():
        if lower:
            token = token.lower()
            token = "".join(c for c in unicodedata.normalize("NFD", token) if unicodedata.category(c) != "Mn")
        word = ""
        for c in token:
            if _is_punctuation(c):
                out += [word] if word else []
                out.append(c)
                word = ""
            else:
                word += c
        out += [word] if word else []
    return out


def google_wordpiece(text_: str, vocab: dict[str, int], lower: bool) -> list[int]:
    ids = []
    for token in _basic_tokenize(text_, lower):
        if len(token) > 200:
            ids.append(vocab["[UNK]"])
            continue
        start, pieces = 0, []
        while start < len(token):
            end = len(token)
            while end > start:
                piece = ("##" if start else "") + token[start:end]
                if piece in vocab:
                    break
                end -= 1
            if end == start:
                pieces = [vocab["[UNK]"]]
                break
            pieces.append(vocab[piece])
            start = end
        ids += pieces
    return ids


def read_vocab(path: Path) -> dict[str, int]:
    return {t: i for i, t in enumerate(path.read_text(encoding="utf-8").splitlines())}


# ------------------------------------------------------------------------------------------------

SAMPLES = [
    "Héllo, Wörld! It's a naïve café—isn't it?",
    "東京は日本の首都です。漢字かな交じり",
    "emoji 👍🏽 and e\u0301 combining, tabs\tand\u00a0nbsp",
    "[MASK] is text here, as is [CLS].",
    "x" * 250 + " supercalifragilisticexpialidocious",
]


@pytest.mark.parametrize("lower", [True, False])
def test_tokenization_matches_google_on_real_text(botchan, botchan_wordpiece, lower):
    vocab = WordPieceVocab(botchan_wordpiece.read_bytes(), lower_case=lower)
    table = read_vocab(botchan_wordpiece)
    normalized = text.normalize_line(botchan.read_text(encoding="utf-8"), Counter())
    sentences = text.document_sentences(normalized)[:3000] + SAMPLES
    assert len(sentences) > 2000
    ours = vocab.encode(sentences)
    for sentence, ids in zip(sentences, ours, strict=True):
        assert ids == google_wordpiece(sentence, table, lower), sentence
    # Lower-casing matters for this vocab (it was learned lower-cased): the cased run has more [UNK].
    unk = table["[UNK]"]
    assert sum(ids.count(unk) for ids in ours) > 0 if not lower else True
    assert table["[MASK]"] not in [t for ids in ours for t in ids]


def test_tables_mark_continuations_and_bracketed_tokens(botchan_wordpiece):
    vocab = WordPieceVocab(botchan_wordpiece.read_bytes(), lower_case=True)
    table = read_vocab(botchan_wordpiece)
    is_special, starts_word, _ = vocab.tables()
    assert vocab.special_ids == {"pad": 0, "unk": 6, "cls": 7, "sep": 8, "mask": 9}
    assert is_special[:10].all() and not is_special[10:].any()  # [unused*] are never drawn
    continuation = [i for t, i in table.items() if t.startswith("##")]
    assert len(continuation) > 100 and not starts_word[continuation].any()
    assert starts_word[[i for t, i in table.items() if not t.startswith("##")]].all()


@pytest.mark.slow
def test_bad_vocab_files_are_one_line_errors(tmp_path):
    ok = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\n"
    cases = {
        "no_mask.txt": ("[PAD]\n[UNK]\n[CLS]\n[SEP]\na\n", "lacks the special token [MASK]"),
        "pad_late.txt": ("[UNK]\n[PAD]\n[CLS]\n[SEP]\n[MASK]\n", "[PAD] on line 2, expected line 1"),
        "dupe.txt": (ok + "a\n", "line 7: 'a' repeats line 6"),
        "blank.txt": (ok + "\nb\n", "line 7: '' is empty"),
    }
    for name, (body, message) in cases.items():
        path = tmp_path / name
        path.write_text(body)
        code, err = _cli_error(["--input", str(path), "--output", str(tmp_path / "o"), "--vocab", str(path)])
        assert code == 2 and err.startswith(f"error: --vocab {path}: ") and message in err, err
        assert len(err.splitlines()) == 1
    (tmp_path / "latin1.txt").write_bytes(ok.encode() + b"caf\xe9\n")
    with pytest.raises(VocabError, match=f"not UTF-8 at byte {len(ok) + 3}"):
        WordPieceVocab((tmp_path / "latin1.txt").read_bytes())
    code, err = _cli_error(
        [
            "--input",
            str(tmp_path / "dupe.txt"),
            "--output",
            str(tmp_path / "o"),
            "--vocab_size",
            "50",
            "--do_lower_case",
        ]  # fmt: skip
    )
    assert (
        code == 2
        and "--do_lower_case applies to WordPiece (--vocab vocab.txt or --vocab_model_type wordpiece)" in err
    )


def _cli_error(argv):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "pipeline.build_corpus", *argv], capture_output=True, text=True, timeout=120
    )
    return done.returncode, done.stderr.strip().splitlines()[-1]  # the line after the config log


@pytest.mark.slow
def test_corpus_with_wordpiece_vocab_whole_word_masking(python_docs, botchan_wordpiece, tmp_path):
    files = sorted((python_docs / "library").glob("b*.rst.txt"))
    out = tmp_path / "wp"
    manifest = build(
        out,
        "--input", str(python_docs / "library" / "b*.rst.txt"),
        "--doc_per_file",
        "--vocab", str(botchan_wordpiece),
        "--do_lower_case",
        "--whole_word_mask",
        "--seq_len", "45",
        "--max_predictions", "7",
        "--dupe_factor", "2",
        "--validation_fraction", "0.2",
    )  # fmt: skip
    data = botchan_wordpiece.read_bytes()
    assert manifest["vocab"] == {
        "file": "vocab.txt",
        "kind": "wordpiece",
        "lower_case": True,
        "trained": False,
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": 2000,
        "special_ids": {"pad": 0, "unk": 6, "cls": 7, "sep": 8, "mask": 9},
    }
    assert (out / "vocab.txt").read_bytes() == data and not (out / "vocab.model").exists()

    # Content: every document, tokenized by Google's tokenizer, is in the rows (dupe_factor times).
    table = read_vocab(botchan_wordpiece)
    by_split = {"train": [], "validation": []}
    for doc in expected_documents(files, doc_per_file=True):
        tokens = [t for s in text.document_sentences(doc) for t in google_wordpiece(s, table, True)]
        if tokens:
            by_split[split_of(content_key(doc), 0.2)].append(tokens)
    for split, dupes in (("train", 2), ("validation", 1)):
        rows = read_records(out, split)
        assert_covers(pieces_of(rows, cls=7, sep=8), by_split[split], dupes)

    # Whole words: a masked "##" token's whole word is masked with it, and some words have several.
    vocab = WordPieceVocab(data, lower_case=True)
    tables = MaskingTables.from_vocab(vocab)
    rows = read_records(out, "train")
    ids = unmasked(rows)
    words = word_ids(ids, tables)
    multi = 0
    for r in range(len(ids)):
        chosen = rows["masked_lm_positions"][r][rows["masked_lm_weights"][r] > 0]
        assert not np.isin(ids[r][chosen], [0, 6, 7, 8, 9]).any()
        for w in np.unique(words[r][chosen]):
            members = np.flatnonzero(words[r] == w)
            assert set(members.tolist()) <= set(chosen.tolist())
            multi += len(members) > 1
    assert multi > 50


@pytest.mark.slow
def test_reader_dynamic_masking_with_a_wordpiece_corpus(botchan, botchan_wordpiece, tmp_path):
    from pipeline.reader.dataset import InputConfig, make_dataset
    from pipeline.reader.dynamic_masking import DynamicMasking
    from pipeline.schema import read_manifest

    out = tmp_path / "wp"
    build(out, "--input", str(botchan), "--vocab", str(botchan_wordpiece), "--do_lower_case",
          "--seq_len", "33", "--max_predictions", "5", "--dupe_factor", "1")  # fmt: skip
    manifest = read_manifest(str(out))
    config = InputConfig(7, training=False, seed=3, dynamic_masking=DynamicMasking.for_corpus(manifest))
    ds = make_dataset(manifest, "train", config)
    mask_id, special = 9, [0, 6, 7, 8, 9]
    masked = labels = 0
    for x, y, w in ds.take(10):
        assert x["input_ids"].shape == (7, 33) and x["masked_lm_positions"].shape == (7, 5)
        real = w["mlm"].numpy() > 0
        assert not np.isin(y["mlm"].numpy()[real], special).any()  # labels are real tokens
        at = np.take_along_axis(x["input_ids"].numpy(), x["masked_lm_positions"].numpy(), axis=1)
        masked += int((at[real] == mask_id).sum())
        labels += int(real.sum())
    assert 0.65 < masked / labels < 0.95  # BERT's 80 % [MASK], with the vocab's own [MASK] id
