"""Tagging files read into text with character entities, and their labels put onto real pieces:
WordPiece and sentencepiece on English, a character WordPiece vocab on Chinese with digits and
Latin runs, first-piece and all-pieces labelling, windows with a piece at every window edge, and
every bad row as one line naming the file and the line."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from launch.finetune.tag.alignment import piece_labels, unit_labels, units_of
from launch.finetune.tag.data import TaggedDataError, read_tagged, words_of
from launch.finetune.tag.schemes import bio_labels, entities
from launch.finetune.windows import best_windows, windows
from model.tasks import IGNORE
from pipeline.text import document_sentences, normalize_line
from pipeline.vocab import VocabFile, train_wordpiece

CONLL = """-DOCSTART- -X- -X- O

John NNP B-NP B-PER
lives VBZ B-VP O
in IN B-PP O
New NNP B-NP B-LOC
York NNP I-NP I-LOC
. . O O

Unbelievable JJ O S-MISC
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text, encoding="utf-8")
    return str(tmp_path / name)


def test_conll_jsonl_and_offsets_give_the_same_example(tmp_path):
    found = read_tagged(write(tmp_path, "a.conll", CONLL))
    assert found.scheme == "bioes" and found.types == ["LOC", "MISC", "PER"] and found.bad_rows == {}
    first = found.examples[0]
    assert first.text == "John lives in New York ."
    assert [first.text[s:e] for _, s, e in first.entities] == ["John", "New York"]
    tokens = ["John", "lives", "in", "New", "York", "."]
    tags = ["B-PER", "O", "O", "B-LOC", "I-LOC", "O"]
    spans = [
        {"start": 0, "end": 4, "label": "PER"},
        {"start": 14, "end": 22, "label": "LOC", "text": "New York"},
    ]
    rows = [
        {"tokens": tokens, "tags": tags},
        {"text": "John lives in New York .", "entities": spans},
        {"text": "John  lives in New York .", "tokens": tokens, "tags": tags},
    ]
    jsonl = read_tagged(write(tmp_path, "a.jsonl", "".join(json.dumps(r) + "\n" for r in rows)))
    assert [e.entities for e in jsonl.examples[:2]] == [first.entities] * 2
    assert jsonl.examples[1].words == first.words  # the pre-tokenizer's words are the file's tokens here
    assert jsonl.examples[2].entities == (("PER", 0, 4), ("LOC", 15, 23))  # the given text's offsets


def test_a_character_per_line_file_is_the_sentence_as_written(tmp_path):
    chars = list("我在2008年去了New York")
    chars = [c for c in chars if c != " "]
    tags = ["O", "O", "B-DATE", "I-DATE", "I-DATE", "I-DATE", "I-DATE", "O", "O", *["B-LOC"] + ["I-LOC"] * 6]
    found = read_tagged(
        write(tmp_path, "zh.bio", "".join(f"{c} {t}\n" for c, t in zip(chars, tags, strict=True)))
    )
    example = found.examples[0]
    assert example.text == "我在2008年去了NewYork"
    assert [example.text[s:e] for _, s, e in example.entities] == ["2008年", "NewYork"]
    assert len(example.words) == len(chars)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("t.conll", "John B-PER\nlives\n", "t.conll:2: expected a token and its tag, found 'lives'"),
        ("t.conll", "John X-PER\n", "t.conll:1: tag 'X-PER': expected O, or B-"),
        ("t.jsonl", '{"tokens": ["a", "b"], "tags": ["O"]}\n', "t.jsonl:1: 2 tokens, 1 tags"),
        ("t.jsonl", '\n{"text": "abc", "entities": [{"start": 1, "end": 9, "label": "X"}]}\n',
         "t.jsonl:2: entity 1-9 \\(X\\): the text has 3 characters"),
        ("t.jsonl", '{"text": "abc", "entities": [{"start": 0, "end": 2, "label": "X", "text": "bc"}]}\n',
         "t.jsonl:1: entity 0-2 holds 'ab', not 'bc'"),
        ("t.jsonl", '{"text": "a b", "tokens": ["a", "c"], "tags": ["O", "O"]}\n', "token 1 'c' is not next"),
        ("t.jsonl", '{"text": "abc", "entities": [{"start": 0, "end": 2, "label": "X"}, '
                    '{"start": 1, "end": 3, "label": "Y"}]}\n', "entity Y at 1 starts inside the one before"),
        ("t.jsonl", "{not json\n", "t.jsonl:1: not a JSON object"),
    ],
)  # fmt: skip
def test_bad_rows_are_one_line_or_counted(tmp_path, name, text, message):
    path = write(
        tmp_path,
        name,
        text + ('{"tokens": ["ok"], "tags": ["B-X"]}\n' if name.endswith(".jsonl") else "\nok B-X\n"),
    )
    with pytest.raises(TaggedDataError, match=message):
        read_tagged(path)
    skipped = read_tagged(path, on_bad_row="skip")
    assert len(skipped) == 1 and sum(skipped.bad_rows.values()) == 1, skipped.bad_rows
    assert skipped.examples[0].entities == (("X", 0, 2),)


def test_words_split_like_berts_pre_tokenizer():
    text = "Héllo, 世界! x2 déjà-vu"
    assert [text[s:e] for s, e in words_of(text)] == ["Héllo", ",", "世", "界", "!", "x2", "déjà", "-", "vu"]


# === Alignment on real vocabs ===


@pytest.fixture(scope="module")
def zh_wordpiece(zh_sample):
    text = normalize_line(
        "\n".join(p.read_text(encoding="utf-8") for p in sorted(zh_sample.glob("*.txt"))), Counter()
    )
    return VocabFile(
        "wordpiece", train_wordpiece(document_sentences(text), vocab_size=3000, lower_case=True), True
    )


def align(vocab_file, example, all_pieces=False):
    vocab = vocab_file.load()
    ids, spans = vocab.encode_with_spans([example.text])[0]
    units = units_of(example.words, spans)
    tags, lost = unit_labels(units, example.entities)
    label_ids = {t: i for i, t in enumerate(bio_labels(k for k, _, _ in example.entities))}
    return ids, spans, units, tags, lost, piece_labels(units, tags, label_ids, all_pieces), label_ids


def test_chinese_characters_map_to_pieces_and_digit_runs_merge(zh_wordpiece, tmp_path):
    chars = [c for c in "他说2008年的iPhone很好用" if c != " "]
    tags = [
        "O",
        "O",
        "B-DATE",
        "I-DATE",
        "I-DATE",
        "I-DATE",
        "I-DATE",
        "O",
        "B-PRODUCT",
        *["I-PRODUCT"] * 5,
        "O",
        "O",
        "O",
    ]
    example = read_tagged(
        write(tmp_path, "zh.bio", "".join(f"{c} {t}\n" for c, t in zip(chars, tags, strict=True)))
    ).examples[0]
    ids, spans, units, unit_tags, lost, labels, label_ids = align(zh_wordpiece, example)
    # every CJK character is a unit of its own; the digits and letters (a word each in the file)
    # merge where a piece spans several of them
    texts = [example.text[s:e] for s, e in units.spans]
    assert [t for t in texts if len(t) == 1 and "\u4e00" <= t <= "\u9fff"] == list("他说年的很好用")
    assert "".join(texts) == example.text and len(texts) < len(chars)
    assert lost == 0
    predicted = [(k, units.spans[s][0], units.spans[e - 1][1]) for k, s, e in entities(unit_tags)]
    assert tuple(predicted) == example.entities  # character-exact round trip
    first = [units.first_piece[u] for u in range(len(units))]
    assert [labels[p] for p in first] == [label_ids[t] for t in unit_tags]
    assert sum(label != IGNORE for label in labels) == len(units)  # the rest of "iPhone"'s pieces ignored


def test_wordpiece_and_sentencepiece_label_first_or_all_pieces(botchan_wordpiece, botchan_vocab):
    from launch.finetune.tag.data import Tagged

    text = "Mr. Yamaarashi teaches mathematics in Matsuyama"
    spans = (("PER", 4, 14), ("LOC", 38, 47))
    example = Tagged(text, spans, words_of(text))
    for vocab_file in (VocabFile("wordpiece", botchan_wordpiece.read_bytes(), True),
                       VocabFile("sentencepiece", botchan_vocab.read_bytes())):  # fmt: skip
        ids, pieces, units, tags, lost, labels, label_ids = align(vocab_file, example)
        assert lost == 0 and len(units) == len(example.words) == 7  # "Mr", ".", ...
        assert len(ids) > 7  # the names split into several pieces
        for unit, (start, end) in enumerate(units.spans):
            mine = [p for p, u in enumerate(units.piece_unit) if u == unit]
            assert pieces[mine[0]][0] <= start and pieces[mine[-1]][1] >= end  # the pieces cover the word
            assert [labels[p] for p in mine[1:]] == [IGNORE] * (len(mine) - 1)
        all_labels = align(vocab_file, example, all_pieces=True)[5]
        b_per, i_per = label_ids["B-PER"], label_ids["I-PER"]
        per = tags.index("B-PER")
        per_pieces = [all_labels[p] for p, u in enumerate(units.piece_unit) if u == per]
        assert per_pieces == [b_per] + [i_per] * (len(per_pieces) - 1) and len(per_pieces) > 1


def test_an_entity_edge_inside_a_unit_is_counted_lost():
    from launch.finetune.tag.data import Tagged

    example = Tagged("abc def", (("X", 1, 3),), ((0, 3), (4, 7)))
    units = units_of(example.words, [(0, 3), (4, 7)])
    assert unit_labels(units, example.entities) == (["B-X", "O"], 1)


def test_windows_cover_every_piece_and_pick_the_most_context():
    assert windows(0, 5, 2) == [(0, 0)]
    assert windows(5, 5, 2) == [(0, 5)]
    spans = windows(11, 5, 3)
    assert spans == [(0, 5), (3, 5), (6, 5)]
    best = best_windows(11, spans)
    assert best == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2]  # piece 3: 1 each side in window 0, 0 in window 1
    for n, length, stride in ((1, 1, 1), (7, 3, 1), (13, 4, 3), (9, 9, 4), (17, 6, 5)):
        spans = windows(n, length, stride)
        covered = {p for start, size in spans for p in range(start, start + size)}
        assert covered == set(range(n)) and all(size <= length for _, size in spans)
        for piece, w in enumerate(best_windows(n, spans)):
            start, size = spans[w]
            assert start <= piece < start + size
