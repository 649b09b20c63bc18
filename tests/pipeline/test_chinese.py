"""Chinese whole-word masking from a word segmenter, on real Chinese text (zh_reviews, fetched).

The oracle is independent of the pipeline: transformers' BertTokenizer on the corpus's
vocab.txt gives each token's characters, jieba (called here, on the same sentences) gives the
words, and every row of the shards is located in that reference stream. A masked unit must then be
a union of whole words: each word lying wholly inside a row is masked entirely or not at all."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from pipeline import build_corpus, text
from pipeline.keys import content_key, split_of
from pipeline.reader.dataset import InputConfig, make_dataset
from pipeline.reader.dynamic_masking import DynamicMasking
from pipeline.schema import read_manifest
from tests.conftest import build, read_records, unmasked
from tests.corpus_checks import expected_documents
from tests.lazy import transformers
from tests.pipeline.segmenters import pairs
from tests.pipeline.test_google_compat import run_pretraining_input

SEQ_LEN, MAX_PRED = 47, 9
PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4  # a trained vocab's specials
ZH_ARGS = ("--vocab_size", "2500", "--vocab_model_type", "wordpiece", "--word_segmenter", "jieba",
           "--whole_word_mask", "--seq_len", str(SEQ_LEN), "--max_predictions", str(MAX_PRED),
           "--dupe_factor", "2", "--num_shards", "3", "--validation_fraction", "0.1")  # fmt: skip


@pytest.fixture(scope="module")
def zh_corpus(zh_sample, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("zh_corpus")
    build(out, "--input", str(zh_sample / "*.txt"), *ZH_ARGS)
    return out


def jieba_segmenter(dictionary: Path | None = None):
    import jieba

    tokenizer = jieba.Tokenizer()
    if dictionary is not None:
        tokenizer.load_userdict(str(dictionary))
    return lambda sentence: tokenizer.lcut(sentence, cut_all=False, HMM=True)


def bert_encoder(vocab_txt: Path):
    """sentence -> [(id, begin, end)]: transformers' BertTokenizer (char offsets) on a vocab.txt."""
    tokenizer = transformers.BertTokenizer(vocab=str(vocab_txt), do_lower_case=False)

    def encode(sentence):
        encoded = tokenizer(sentence, add_special_tokens=False, return_offsets_mapping=True)
        return [(i, b, e) for i, (b, e) in zip(encoded["input_ids"], encoded["offset_mapping"], strict=True)]

    return encode


def sentencepiece_encoder(model: Path):
    """sentence -> [(id, begin, end)]: sentencepiece's own pieces, byte offsets made char offsets."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_file=str(model))

    def encode(sentence):
        chars = [0] + np.cumsum([len(c.encode()) for c in sentence]).tolist()
        char_at = {byte: i for i, byte in enumerate(chars)}
        pieces = processor.encode(sentence, out_type="proto").pieces
        return [(p.id, char_at[p.begin], char_at[p.end]) for p in pieces]

    return encode


class Reference:
    """Every document's tokens back to back (a -1 after each document), and each token's word:
    the word of its first character, -1 for [UNK] and for a token that covers no character."""

    def __init__(self, documents: list[str], encode, segment):
        tokens, words, word = [], [], 0
        for document in documents:
            for sentence in text.document_sentences(document):
                owner, at = {}, 0
                for w in segment(sentence):
                    start = sentence.find(w, at)
                    owner.update({c: word for c in range(start, start + len(w))})
                    word, at = word + 1, start + len(w)
                for token, begin, end in encode(sentence):
                    tokens.append(token)
                    words.append(-1 if token == UNK or end == begin else owner[begin])
            tokens.append(-1)
            words.append(-1)
        self.tokens = np.array(tokens, np.int32)
        self.words = np.array(words)
        self.word_sizes = np.bincount(self.words[self.words >= 0])
        self.blob = self.tokens.tobytes()

    def locate(self, piece: np.ndarray) -> int | None:
        """The token index where `piece` occurs, if it occurs exactly once."""
        needle, found = piece.astype(np.int32).tobytes(), []
        at = self.blob.find(needle)
        while at >= 0 and len(found) < 2:
            if at % 4 == 0:
                found.append(at // 4)
            at = self.blob.find(needle, at + 1)
        return found[0] if len(found) == 1 else None


def check_whole_words(tokens, selected, document_ids, reference: Reference) -> tuple[int, int, float]:
    """Asserts that each word wholly inside a row is masked entirely or not at all; returns (words
    checked, masked words of several tokens, share of row pieces located in the reference)."""
    checked = multi = located = pieces = 0
    for r in range(len(tokens)):
        # Runs of text between [CLS], [SEP] and padding: a document's piece, or segment A or B.
        text_ = (tokens[r] != CLS) & (tokens[r] != SEP) & (document_ids[r] > 0)
        edges = np.flatnonzero(np.diff(np.r_[0, text_.astype(np.int8), 0]))
        for begin, end in zip(edges[::2], edges[1::2], strict=True):
            at = np.arange(begin, end)
            if len(at) < 6:  # too short to be located for sure
                continue
            pieces += 1
            start = reference.locate(tokens[r][at])
            if start is None:
                continue
            located += 1
            words = reference.words[start : start + len(at)]
            for w in np.unique(words[words >= 0]):
                inside = words == w
                if inside.sum() < reference.word_sizes[w]:  # cut by the row's edge
                    continue
                flags = selected[r][at][inside]
                assert flags.all() or not flags.any(), f"row {r}: word {w} partly masked: {flags}"
                checked += 1
                multi += bool(flags.all() and len(flags) > 1)
    return checked, multi, located / max(pieces, 1)


def check_rows(rows: dict, reference: Reference) -> tuple[int, int, float]:
    """`check_whole_words` on parsed records (stored or dynamic masks)."""
    return check_whole_words(unmasked(rows), selected_of(rows), rows["document_ids"], reference)


def selected_of(rows: dict) -> np.ndarray:
    selected = np.zeros(rows["input_ids"].shape, bool)
    for r in range(len(selected)):
        selected[r, rows["masked_lm_positions"][r][rows["masked_lm_weights"][r] > 0]] = True
    return selected


@pytest.fixture(scope="module")
def reference(zh_sample, zh_corpus) -> Reference:
    documents = expected_documents(sorted(zh_sample.glob("*.txt")), doc_per_file=False)
    return Reference(documents, bert_encoder(zh_corpus / "vocab.txt"), jieba_segmenter())


@pytest.mark.slow
def test_manifest_records_the_segmenter_and_the_trained_wordpiece_vocab(zh_corpus):
    import jieba

    manifest = read_manifest(str(zh_corpus))
    assert manifest.segmenter == {
        "name": "jieba",
        "version": jieba.__version__,
        "mode": "lcut(cut_all=False, HMM=True)",
        "dictionary_sha256": None,
    }
    assert manifest.word_starts and manifest.features["word_starts"] == {"dtype": "int64", "length": SEQ_LEN}
    assert (manifest.vocab.kind, manifest.vocab.trained, manifest.vocab.file) == (
        "wordpiece",
        True,
        "vocab.txt",
    )
    lines = (zh_corpus / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert lines[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and len(lines) == manifest.vocab.size
    assert {"的", "我", "书"} <= set(lines)  # Chinese characters are tokens of their own


@pytest.mark.slow
def test_masked_units_are_whole_jieba_words(zh_corpus, reference):
    for split in ("train", "validation"):
        rows = read_records(zh_corpus, split)
        checked, multi, located = check_rows(rows, reference)
        assert located > 0.95, f"{split}: only {located:.0%} of the row pieces found in the reference"
        assert checked > 1000 and multi > (100 if split == "train" else 5), (split, checked, multi)


@pytest.mark.slow
def test_the_stored_word_starts_are_the_units_and_rows_start_units(zh_corpus):
    rows = read_records(zh_corpus)
    starts, tokens = rows["word_starts"].astype(bool), unmasked(rows)
    special = np.isin(tokens, [PAD, UNK, CLS, SEP, MASK])
    assert not starts[special].any()
    assert starts[:, 1][~special[:, 1]].all()  # a word cut by the row's start is a unit of its own
    after_sep = np.zeros_like(starts)
    after_sep[:, 1:] = (tokens[:, :-1] == SEP) & (tokens[:, 1:] != PAD)
    assert starts[after_sep].all()
    # Chinese words of several characters: about a third of the real tokens continue a unit.
    share = 1 - starts[~special].mean()
    assert 0.2 < share < 0.6, share


@pytest.mark.slow
def test_masking_rate_and_80_10_10_on_chinese(zh_corpus):
    rows = read_records(zh_corpus)
    tokens, selected = unmasked(rows), selected_of(rows)
    candidates = ~np.isin(tokens, [PAD, UNK, CLS, SEP, MASK])
    assert not (selected & ~candidates).any()
    rate = selected.sum() / candidates.sum()
    assert 0.12 < rate <= 0.16, rate  # whole words that would overflow the budget are skipped
    masked_to = rows["input_ids"][selected]
    original = tokens[selected]
    n = len(original)
    assert n > 3000
    assert 0.77 < (masked_to == MASK).sum() / n < 0.83
    assert 0.07 < (masked_to == original).sum() / n < 0.13


@pytest.mark.slow
def test_dynamic_masking_in_tf_data_keeps_the_same_units(zh_corpus, reference):
    manifest = read_manifest(str(zh_corpus))
    masking = DynamicMasking.for_corpus(manifest)
    assert masking.stored_units and masking.starts_word is None
    config = InputConfig(16, training=False, seed=11, dynamic_masking=masking)
    stored = read_records(zh_corpus)
    stored_masks = {
        tuple(row): frozenset(pos[w > 0].tolist())
        for row, pos, w in zip(
            unmasked(stored), stored["masked_lm_positions"], stored["masked_lm_weights"], strict=True
        )
    }
    total_multi = changed = rows_seen = 0
    for features, labels, weights in make_dataset(manifest, "train", config):
        rows = {
            "input_ids": features["input_ids"].numpy(),
            "masked_lm_positions": features["masked_lm_positions"].numpy(),
            "masked_lm_ids": labels["mlm"].numpy(),
            "masked_lm_weights": weights["mlm"].numpy(),
        }
        tokens, selected = unmasked(rows), selected_of(rows)
        _, multi, located = check_whole_words(tokens, selected, features["document_ids"].numpy(), reference)
        assert located > 0.9
        total_multi += multi
        for row, sel in zip(tokens, selected, strict=True):
            rows_seen += 1
            changed += stored_masks[tuple(row)] != frozenset(np.flatnonzero(sel).tolist())
    assert total_multi > 100
    assert changed > 0.9 * rows_seen  # fresh masks, not the stored ones


@pytest.mark.slow
def test_googles_reader_parses_segmented_shards(zh_corpus):
    manifest = read_manifest(str(zh_corpus))
    theirs = list(run_pretraining_input(manifest.files("validation"), SEQ_LEN, MAX_PRED, batch_size=4))
    rows = read_records(zh_corpus, "validation")
    assert len(theirs) == len(rows["input_ids"]) // 4 > 0
    np.testing.assert_array_equal(theirs[0]["input_ids"].numpy(), rows["input_ids"][:4])


@pytest.mark.slow
def test_same_bytes_with_1_and_2_workers(zh_sample, zh_corpus, tmp_path):
    out = tmp_path / "two"
    build(out, "--input", str(zh_sample / "*.txt"), *ZH_ARGS,
          "--direct_num_workers", "2", "--direct_running_mode", "multi_processing")  # fmt: skip
    reference = {p.name: p.read_bytes() for p in zh_corpus.iterdir()}
    assert sorted(p.name for p in out.iterdir()) == sorted(reference)
    for p in out.iterdir():
        assert p.read_bytes() == reference[p.name], f"{p.name} differs with 2 workers"


@pytest.mark.slow
def test_a_module_function_segmenter_is_used_as_given(zh_sample, zh_corpus, tmp_path):
    out = tmp_path / "pairs"
    name = "tests.pipeline.segmenters:pairs"
    build(out, "--input", str(zh_sample / "pos.txt"), "--vocab", str(zh_corpus / "vocab.txt"),
          "--word_segmenter", name, "--whole_word_mask", "--seq_len", str(SEQ_LEN),
          "--max_predictions", str(MAX_PRED), "--dupe_factor", "1")  # fmt: skip
    manifest = read_manifest(str(out))
    assert manifest.segmenter == {
        "name": name,
        "version": None,
        "mode": "function",
        "dictionary_sha256": None,
    }
    documents = expected_documents([zh_sample / "pos.txt"], doc_per_file=False)
    encode = bert_encoder(zh_corpus / "vocab.txt")
    reference = Reference(documents, encode, pairs)
    rows = read_records(out)
    checked, multi, located = check_rows(rows, reference)
    assert located > 0.95 and checked > 1000 and multi > 100
    # And not jieba's words: under pairs, jieba's units are split somewhere.
    by_jieba = Reference(documents, encode, jieba_segmenter())
    with pytest.raises(AssertionError, match="partly masked"):
        check_rows(rows, by_jieba)


@pytest.mark.slow
def test_a_user_dictionary_makes_its_words_units(zh_sample, zh_corpus, tmp_path):
    """jieba alone cuts 杜拉拉 (the heroine of a novel many reviews discuss) as 杜 | 拉拉, or
    with the character before it; with the user dictionary it is one word, so one unit."""
    dictionary = tmp_path / "user.dict"
    dictionary.write_text("杜拉拉 100 nr\n升职记 100 n\n", encoding="utf-8")
    common = ("--input", str(zh_sample / "pos.txt"), "--vocab", str(zh_corpus / "vocab.txt"),
              "--word_segmenter", "jieba", "--whole_word_mask", "--seq_len", str(SEQ_LEN),
              "--max_predictions", str(MAX_PRED), "--dupe_factor", "1")  # fmt: skip
    build(tmp_path / "plain", *common)
    build(tmp_path / "dict", *common, "--segmenter_dict", str(dictionary))
    manifest = json.loads((tmp_path / "dict" / "manifest.json").read_text())
    assert manifest["segmenter"]["dictionary_sha256"] == hashlib.sha256(dictionary.read_bytes()).hexdigest()
    vocab = {t: i for i, t in enumerate((zh_corpus / "vocab.txt").read_text(encoding="utf-8").splitlines())}
    name = np.array([vocab[c] for c in "杜拉拉"])

    def starts_at_the_name(folder):
        rows = read_records(folder)
        tokens, starts = unmasked(rows), rows["word_starts"]
        found = []
        for r, c in zip(*np.nonzero(tokens[:, :-2] == name[0]), strict=True):
            if (tokens[r, c : c + 3] == name).all() and c + 3 < SEQ_LEN and starts[r, c + 3]:
                found.append(tuple(starts[r, c : c + 3]))
        return found

    plain, with_dict = starts_at_the_name(tmp_path / "plain"), starts_at_the_name(tmp_path / "dict")
    assert len(with_dict) >= 4 and set(with_dict) == {(1, 0, 0)}
    assert any(s != (1, 0, 0) for s in plain)
    documents = expected_documents([zh_sample / "pos.txt"], doc_per_file=False)
    reference = Reference(documents, bert_encoder(zh_corpus / "vocab.txt"), jieba_segmenter(dictionary))
    rows = read_records(tmp_path / "dict")
    checked, _, located = check_rows(rows, reference)
    assert located > 0.95 and checked > 1000


def test_segmenter_errors_are_one_line_before_the_pipeline_starts(zh_sample, tmp_path, capsys):
    out = tmp_path / "o"
    base = ["--input", str(zh_sample / "pos.txt"), "--output", str(out), "--vocab_size", "300"]
    gbk = tmp_path / "gbk.dict"
    gbk.write_bytes("杜拉拉 100 nr\n".encode("gbk"))
    cases = [
        (["--word_segmenter", "jieba"], "--word_segmenter jieba needs --whole_word_mask"),
        (
            ["--word_segmenter", "no_such_module:cut", "--whole_word_mask"],
            "--word_segmenter no_such_module:cut: cannot import no_such_module (No module named "
            "'no_such_module')",
        ),
        (
            ["--word_segmenter", "tests.pipeline.segmenters:nothing", "--whole_word_mask"],
            "--word_segmenter tests.pipeline.segmenters:nothing: tests.pipeline.segmenters has no "
            "function nothing",
        ),
        (
            ["--word_segmenter", "jieba", "--whole_word_mask", "--segmenter_dict", str(tmp_path / "no.dict")],
            f"--segmenter_dict {tmp_path}/no.dict: cannot read it",
        ),
        (
            ["--word_segmenter", "tests.pipeline.segmenters:broken", "--whole_word_mask"],
            "--word_segmenter tests.pipeline.segmenters:broken: failed on a test sentence (RuntimeError: "
            "no model loaded)",
        ),
        (
            ["--word_segmenter", "tests.pipeline.segmenters:not_a_list", "--whole_word_mask"],
            "--word_segmenter tests.pipeline.segmenters:not_a_list: returned str, expected a list of str",
        ),
        (["--segmenter_dict", "x.dict", "--whole_word_mask"], "--segmenter_dict is a jieba user dictionary"),
        (
            ["--word_segmenter", "jieba", "--whole_word_mask", "--segmenter_dict", str(gbk)],
            f"dictionary file --segmenter_dict {gbk} must be utf-8",
        ),
        (["--encoding", "klingon"], "--encoding: unknown encoding 'klingon'"),
    ]
    for flags, message in cases:
        assert build_corpus.main(base + flags) == 2, flags
        assert capsys.readouterr().err.strip().splitlines()[-1].startswith(f"error: {message}"), flags
        assert not out.exists()


@pytest.mark.slow
def test_with_a_sentencepiece_vocab_pieces_across_words_join_them(zh_sample, tmp_path):
    """sentencepiece learns pieces such as 这本书 or 的心 that cross jieba's words: such a piece
    joins the words it touches into one unit, and units stay unions of whole words."""
    out = tmp_path / "sp"
    build(out, "--input", str(zh_sample / "*.txt"), "--vocab_size", "4000", "--word_segmenter", "jieba",
          "--whole_word_mask", "--seq_len", str(SEQ_LEN), "--max_predictions", str(MAX_PRED),
          "--dupe_factor", "1", "--validation_fraction", "0")  # fmt: skip
    documents = expected_documents(sorted(zh_sample.glob("*.txt")), doc_per_file=False)
    reference = Reference(documents, sentencepiece_encoder(out / "vocab.model"), jieba_segmenter())
    rows = read_records(out)
    checked, multi, located = check_rows(rows, reference)
    assert located > 0.95 and checked > 1000 and multi > 100


@pytest.mark.slow
def test_hf_export_tokenizer_and_googles_tokenizer_give_the_shards_ids(
    zh_sample, zh_corpus, botchan, tmp_path
):
    """The trained vocab.txt exported for Hugging Face loads as a standard BERT tokenizer; it and
    google-research/bert's tokenizer (transcribed in test_wordpiece.py) tokenize real Chinese and
    English text to the ids the shards hold."""
    from collections import Counter

    from launch.interop.hf_bert import save_hf
    from model.config import BertConfig
    from model.masked_lm import build_pretraining_model
    from pipeline.vocab import VocabFile
    from tests.corpus_checks import assert_covers, pieces_of
    from tests.pipeline.test_wordpiece import google_wordpiece, read_vocab

    manifest = read_manifest(str(zh_corpus))
    vocab_file = VocabFile.of_corpus(manifest)
    bert = BertConfig(manifest.vocab.size, hidden_size=12, num_layers=1, num_heads=3, intermediate_size=20,
                      max_position=SEQ_LEN)  # fmt: skip
    model = build_pretraining_model(bert, SEQ_LEN, MAX_PRED, next_sentence=False)
    save_hf(model, bert, vocab_file, str(tmp_path / "hf"))
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert type(hf).__name__ == "BertTokenizer"
    table = read_vocab(zh_corpus / "vocab.txt")

    def google(document):
        return [t for s in text.document_sentences(document) for t in google_wordpiece(s, table, False)]

    documents = expected_documents(sorted(zh_sample.glob("*.txt")), doc_per_file=False)
    english = text.document_sentences(text.normalize_line(botchan.read_text("utf-8"), Counter()))[:400]
    for sample in documents + english:
        assert hf(sample, add_special_tokens=False)["input_ids"] == google(sample), sample
    assert hf("[CLS] 你好")["input_ids"][:2] == [CLS, CLS]  # the template and the special tokens
    # The shards hold exactly those ids: every document, twice (dupe_factor 2) in train.
    by_split = {"train": [], "validation": []}
    for document in documents:
        by_split[split_of(content_key(document), 0.1)].append(google(document))
    for split, dupes in (("train", 2), ("validation", 1)):
        assert_covers(pieces_of(read_records(zh_corpus, split)), by_split[split], dupes)


@pytest.mark.slow
def test_segment_pairs_keep_whole_words(zh_sample, zh_corpus, tmp_path):
    """A/B pairs cut and swap segments (truncation trims either end): units still follow jieba's
    words inside each segment."""
    out = tmp_path / "sop"
    build(out, "--input", str(zh_sample / "*.txt"), "--vocab", str(zh_corpus / "vocab.txt"), "--mode",
          "segment_pair", "--sop", "--word_segmenter", "jieba", "--whole_word_mask", "--seq_len", "41",
          "--max_predictions", "7", "--dupe_factor", "1", "--validation_fraction", "0")  # fmt: skip
    documents = expected_documents(sorted(zh_sample.glob("*.txt")), doc_per_file=False)
    reference = Reference(documents, bert_encoder(zh_corpus / "vocab.txt"), jieba_segmenter())
    rows = read_records(out)
    assert rows["next_sentence_labels"].sum() > 0.3 * len(rows["next_sentence_labels"])  # swapped pairs
    checked, multi, located = check_rows(rows, reference)
    assert located > 0.95 and checked > 1000 and multi > 100
