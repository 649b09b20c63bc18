"""A Hugging Face tokenizer.json as the corpus vocabulary (ModernBERT's kind: byte-level BPE with
BERT's specials after the learned tokens, so [PAD] is not 0): the ids are the tokenizer's own on
real text, whole words follow its "Ġ" marks, and a corpus built with it holds every document."""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import numpy as np
import pytest

from pipeline import text
from pipeline.keys import content_key, split_of
from pipeline.masking import MaskingTables, word_ids
from pipeline.vocab import TokenizerVocab, VocabError, VocabFile, kind_of
from tests.conftest import build, read_records, unmasked
from tests.corpus_checks import assert_covers, expected_documents, pieces_of


def test_ids_are_the_tokenizers_own_on_real_text(botchan, botchan_bpe):
    """A document's sentences, encoded one by one, give the ids the tokenizer gives the running
    text (each sentence after a space, as it stands in the document)."""
    from tokenizers import Tokenizer

    vocab = TokenizerVocab(botchan_bpe.read_bytes())
    reference = Tokenizer.from_file(str(botchan_bpe))
    normalized = text.normalize_line(botchan.read_text(encoding="utf-8"), Counter())
    sentences = text.document_sentences(normalized)[100:400]
    ours = [i for ids in vocab.encode(sentences) for i in ids]
    theirs = reference.encode(" " + " ".join(sentences), add_special_tokens=False).ids
    assert ours == theirs and len(ours) > 3000
    spans = vocab.encode_with_spans(sentences[:20])
    for sentence, (ids, offsets) in zip(sentences, spans, strict=False):
        assert ids == reference.encode(" " + sentence, add_special_tokens=False).ids
        assert offsets[0][0] == 0 and offsets[-1][1] == len(sentence)


def test_tables_mark_byte_level_word_starts_specials_and_cjk(botchan_bpe):
    vocab = TokenizerVocab(botchan_bpe.read_bytes())
    assert vocab.special_ids == {"pad": 1503, "unk": 1500, "cls": 1501, "sep": 1502, "mask": 1504}
    is_special, starts_word, cjk = vocab.tables()
    assert is_special.sum() == 5 and is_special[1500:].all()
    ids = vocab.encode(["the schoolmaster laughed"])[0]
    pieces = [vocab.tokens[i] for i in ids]
    assert [starts_word[i] for i in ids] == [p.startswith("\u0120") for p in pieces]
    assert sum(starts_word[i] for i in ids) == 3 and len(ids) > 3  # three words, one in pieces
    chinese = vocab.encode(["我们的句子"])[0]
    assert any(cjk[i] for i in chinese) and not cjk[ids].any()


def test_bad_tokenizer_files_are_one_line_errors(botchan_bpe, tmp_path):
    spec = json.loads(botchan_bpe.read_text())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] != "[MASK]"]
    cases = [
        (b"{not json", "not a tokenizers tokenizer.json"),
        (json.dumps(spec).encode(), r"lacks \[MASK\] or <mask>"),
    ]
    for data, message in cases:
        with pytest.raises(VocabError, match=message) as e:
            TokenizerVocab(data)
        assert "\n" not in str(e.value)
    assert kind_of("ModernBERT-base/tokenizer.json") == "tokenizer"


@pytest.mark.slow  # builds a corpus end to end
def test_a_corpus_built_with_it_holds_every_document_in_whole_words(python_docs, botchan_bpe, tmp_path):
    files = sorted((python_docs / "library").glob("b*.rst.txt"))
    out = tmp_path / "bpe"
    manifest = build(
        out,
        "--input",
        str(python_docs / "library" / "b*.rst.txt"),
        "--doc_per_file",
        "--vocab",
        str(botchan_bpe),
        "--whole_word_mask",
        "--seq_len",
        "45",
        "--max_predictions",
        "7",
        "--dupe_factor",
        "2",
        "--validation_fraction",
        "0.2",
    )
    data = botchan_bpe.read_bytes()
    assert manifest["vocab"]["kind"] == "tokenizer" and manifest["vocab"]["file"] == "tokenizer.json"
    assert manifest["vocab"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert (out / "tokenizer.json").read_bytes() == data
    vocab = VocabFile("tokenizer", data).load()
    ids = vocab.special_ids

    by_split = {"train": [], "validation": []}
    for doc in expected_documents(files, doc_per_file=True):
        tokens = [t for e in vocab.encode(text.document_sentences(doc)) for t in e]
        if tokens:
            by_split[split_of(content_key(doc), 0.2)].append(tokens)
    for split, dupes in (("train", 2), ("validation", 1)):
        rows = read_records(out, split)
        assert_covers(pieces_of(rows, cls=ids["cls"], sep=ids["sep"]), by_split[split], dupes)

    rows = read_records(out, "train")
    # Padding is the vocab's own [PAD] (not 0), and input_mask says so.
    np.testing.assert_array_equal(rows["input_mask"] == 0, rows["input_ids"] == ids["pad"])
    assert (rows["input_mask"] == 0).any()
    tables = MaskingTables.from_vocab(vocab)
    original = unmasked(rows)
    words = word_ids(original, tables)
    multi = 0
    for r in range(len(original)):
        chosen = rows["masked_lm_positions"][r][rows["masked_lm_weights"][r] > 0]
        assert not np.isin(original[r][chosen], list(ids.values())).any()
        for w in np.unique(words[r][chosen]):
            members = np.flatnonzero(words[r] == w)
            assert set(members.tolist()) <= set(chosen.tolist())
            multi += len(members) > 1
    assert multi > 50
