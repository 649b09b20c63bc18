"""Each Beam stage on its own: TestPipeline + assert_that with literal expectations."""

import gzip
from collections import Counter

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipeline.config import CorpusConfig
from pipeline.keys import content_key, split_of
from pipeline.stages.create_instances import CreateInstances
from pipeline.stages.dedup import DeduplicateDocuments
from pipeline.stages.groups import BatchDocuments, CutGroups
from pipeline.stages.read import Pointer, ReadDocuments, ReadFileDocuments, RereadDocuments
from pipeline.stages.stats import BadInputError, SumCounters
from pipeline.stages.tokenize import DocumentTokenizer
from pipeline.stages.train_vocab import TrainVocab
from pipeline.stages.write_shards import WriteShards, shard_counts
from pipeline.vocab import SentencePieceVocab as Vocab
from pipeline.vocab import VocabFile


def cfg(**overrides) -> CorpusConfig:
    return CorpusConfig(
        **{"input_patterns": ("unused",), "output_dir": "unused", "vocab_size": 100, **overrides}
    )


def test_read_documents_text_format_with_stats(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"\xef\xbb\xbfAlpha one.\r\nAlpha two.\r\n\r\nBeta \x00one.\n")
    (tmp_path / "b.txt.gz").write_bytes(gzip.compress(b"Gamma caf\xe9.\n\n\n"))
    (tmp_path / "c.txt").write_bytes(b"  \n\t\n")
    with TestPipeline() as p:
        out = p | ReadDocuments(cfg(input_patterns=(str(tmp_path / "*.txt"), str(tmp_path / "*.gz"))))
        assert_that(out.docs, equal_to(["Alpha one.\nAlpha two.", "Beta one.", "Gamma caf\ufffd."]))
        stats = out.stats | beam.CombineGlobally(SumCounters())
        assert_that(
            stats,
            equal_to(
                [
                    {
                        "input/files": 3,
                        "input/documents": 3,
                        "encoding/utf-8 with BOM": 1,  # a.txt; its BOM is not text
                        "encoding/utf-8": 2,
                        "repaired/control_chars": 1,
                        "repaired/invalid_utf8_line": 1,
                        "skipped/empty_file": 1,
                    }
                ]
            ),
            label="stats",
        )


def test_read_documents_skips_binary_and_truncated_files_when_asked(tmp_path):
    (tmp_path / "good.txt").write_text("Good text.\n")
    (tmp_path / "archive.txt").write_bytes(gzip.compress(b"not text once compressed " * 500))
    (tmp_path / "cut.txt.gz").write_bytes(gzip.compress(b"Lost line.\n" * 1000)[:60])
    with TestPipeline() as p:
        out = p | ReadDocuments(cfg(input_patterns=(str(tmp_path / "*"),), on_bad_file="skip"))
        assert_that(out.docs, equal_to(["Good text."]))
        stats = out.stats | beam.CombineGlobally(SumCounters())
        assert_that(
            stats | beam.Map(lambda s: {k: v for k, v in s.items() if k.startswith("skipped")}),
            equal_to([{"skipped/bad_file_binary": 1, "skipped/bad_file_unreadable": 1}]),
            label="stats",
        )


def test_read_documents_fails_on_a_binary_file_by_default(tmp_path):
    (tmp_path / "archive.txt").write_bytes(gzip.compress(b"not text once compressed " * 500))
    with pytest.raises(Exception, match=r"archive\.txt: looks binary"):
        with TestPipeline() as p:
            _ = p | ReadDocuments(cfg(input_patterns=(str(tmp_path / "*"),)))


def test_jsonl_documents(tmp_path):
    (tmp_path / "d.jsonl").write_text('{"body": "One."}\n{"body": "Two.\\nMore."}\nnot json\n{"x": 1}\n')
    with TestPipeline() as p:
        out = p | ReadDocuments(
            cfg(input_patterns=(str(tmp_path / "d.jsonl"),), format="jsonl", text_field="body")
        )
        assert_that(out.docs, equal_to(["One.", "Two.\nMore."]))


def test_deduplicate_documents_counts_copies():
    with TestPipeline() as p:
        out = p | beam.Create(["same", "other", "same", "same"]) | DeduplicateDocuments()
        assert_that(
            out.docs,
            equal_to([(content_key("same"), "same"), (content_key("other"), "other")]),
        )
        stats = out.stats | beam.CombineGlobally(SumCounters())
        assert_that(stats, equal_to([{"skipped/duplicate_document": 2}]), label="stats")


def test_train_vocab_is_deterministic_with_special_ids(botchan, tmp_path):
    lines = [line for line in botchan.read_text(encoding="utf-8").splitlines() if line.strip()][:800]
    config = cfg(vocab_size=300, vocab_sample_sentences=500)
    models = []
    for i, order in enumerate((lines, lines[::-1])):  # sample and order must not follow input order
        path = tmp_path / f"{i}.model"
        with TestPipeline() as p:
            vocab = p | beam.Create([(content_key(s), s) for s in order]) | TrainVocab(config)
            vocab | beam.Map(lambda v, path=path: path.write_bytes(v.data))
        models.append(path.read_bytes())
    assert models[0] == models[1]
    vocab = Vocab(models[0])
    assert vocab.special_ids == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert vocab.size == 300
    # [MASK] in the text is text, not the mask token (control symbols are never matched).
    assert 4 not in vocab.encode(["a [MASK] here"])[0]


def test_tokenize_documents_encodes_sentences_once(botchan_vocab):
    model = botchan_vocab.read_bytes()
    vocab = Vocab(model)
    doc = "It was fine. Then it rained!\nA new line"
    expected = vocab.encode(["It was fine.", "Then it rained!", "A new line"])
    tokenizer = DocumentTokenizer(cfg(validation_fraction=0.0))
    tokenizer.setup()
    # A batch; the empty document has no tokens and is counted, not returned.
    docs, empty = tokenizer.tokenize([(7, doc), (8, "")], VocabFile("sentencepiece", model))
    assert [(d.key, [s.tolist() for s in d.sentences()]) for d in docs] == [(7, expected)] and empty == 1


def _cut(config, sources, model):
    """CutGroups' packing groups of one batch, as (split, group, [(key, tokens)])."""
    cut = CutGroups(config, rereadable=isinstance(sources[0], tuple) and len(sources[0]) == 5)
    cut.setup()
    out = list(cut.process((("train", 0), sources), VocabFile("sentencepiece", model)))
    return [(split, group, [(d.key, d.n_tokens) for d in docs]) for split, group, docs in out]


def test_groups_are_cut_from_documents_as_read_and_the_last_takes_a_small_rest(tmp_path, botchan_vocab):
    """A batch of two files -> groups of consecutive documents (files by key, documents in file
    order), each closed at the document that brings it to --group_tokens, but the last one takes
    what is left when that is under half a group; every document once; the same groups whatever
    order the batch's pointers arrive in."""
    model = botchan_vocab.read_bytes()
    texts = {
        "a.txt": [f"Document {i} of the first file says {'words ' * (i + 3)}." for i in range(9)],
        "b.txt": [f"Second file, document {i}, {'text ' * (2 * i + 1)}." for i in range(4)],
    }
    sources = []
    for name, docs in texts.items():
        (tmp_path / name).write_text("\n\n".join(docs) + "\n", encoding="utf-8")
        file_key = content_key(docs[0])
        sources += [(file_key, str(tmp_path / name), i, content_key(d), len(d)) for i, d in enumerate(docs)]
    config = cfg(group_tokens=40, validation_fraction=0.0)
    groups = _cut(config, sources, model)
    assert groups == _cut(config, sources[::-1], model)  # arrival order does not matter
    first = min(texts, key=lambda name: content_key(texts[name][0]))
    order = [content_key(d) for d in texts[first] + texts[({*texts} - {first}).pop()]]
    assert [key for _, _, docs in groups for key, _ in docs] == order  # each once, in read order
    sizes = [sum(n for _, n in docs) for _, _, docs in groups]
    assert all(size >= 40 for size in sizes[:-1]) and len(groups) >= 3
    for _, group, docs in groups:  # closed at the first document that reaches 40 tokens
        assert group == docs[0][0] and sum(n for _, n in docs[:-1]) < 40
    # The last group took the rest: under half a group would have been left after its 40th token.
    last = groups[-1][2]
    upto = next(i for i in range(len(last)) if sum(n for _, n in last[: i + 1]) >= 40)
    assert upto == len(last) - 1 or sum(n for _, n in last[upto + 1 :]) < 40 / 2 * 1.5
    # tfds documents (texts, no files): the same rule, in key order.
    texts_only = [(content_key(d), d) for docs in texts.values() for d in docs]
    tfds_groups = _cut(config, texts_only, model)
    assert sorted(k for _, _, docs in tfds_groups for k, _ in docs) == sorted(order)


def test_small_files_share_batches_and_copies_keep_the_least_pointer():
    """BatchDocuments puts a file's documents in one batch by its file key, so with 40 small files
    and room for 4 batches, batches hold several files; deduplication keeps the least pointer of a
    document's copies whatever order they come in (where a copy is decides its batch)."""
    config = cfg(group_tokens=10, validation_fraction=0.0)
    docs = []
    for f in range(40):
        for i in range(3):
            docs.append(
                (content_key(f"file {f} doc {i}"), Pointer(content_key(f"file {f} doc 0"), f"f{f}", i, 40))
            )
    copy = (content_key("shared"), Pointer(1, "z", 0, 5)), (content_key("shared"), Pointer(0, "y", 9, 5))
    with TestPipeline() as p:
        batches = p | "Docs" >> beam.Create(docs) | BatchDocuments(config, input_chars=4 * 10 * 4)

        def whole_files_sharing_four_batches(found):
            files = [[s[1] for s in sources] for _, sources in found]
            assert len(found) <= 4 and {b for (_, b), _ in found} <= {0, 1, 2, 3}, found
            assert sorted(f for names in files for f in set(names)) == sorted(f"f{f}" for f in range(40))
            assert all(names.count(f) == 3 for names in files for f in names)  # a file's 3 documents

        assert_that(batches, whole_files_sharing_four_batches)
        for name, order in (("ab", copy), ("ba", copy[::-1])):
            kept = (
                p
                | f"Copies{name}" >> beam.Create(list(order))
                | f"Dedup{name}" >> DeduplicateDocuments(keyed=True)
            )
            assert_that(
                kept.docs, equal_to([(content_key("shared"), Pointer(0, "y", 9, 5))]), label=f"kept{name}"
            )


def test_a_part_holds_its_records_in_key_order_and_equal_keys_by_bytes(tmp_path):
    """A part file is its records sorted as (key, record) pairs sort: by key, and records with
    equal keys (a one-in-10**9 draw, planted here) by their bytes, whatever order they came in."""
    from pipeline.parts import read_part, write_part

    keys = [2**62 + 5, 7, 2**40, 7, 0, 7, 11]
    records = [b"gg", b"zz", b"x", b"ab", b"", b"abc", b"q"]
    tied = list(zip(keys, records, strict=True))
    distinct = [pair for i, pair in enumerate(tied) if i not in (3, 5)]
    for name, pairs in (("tied", tied), ("distinct", distinct)):
        path = str(tmp_path / f"{name}.part")
        write_part(path, [k for k, _ in pairs], [r for _, r in pairs])
        got_keys, ends, data = read_part(path)
        starts = [0, *ends[:-1].tolist()]
        got = [data[s:e] for s, e in zip(starts, ends.tolist(), strict=True)]
        assert list(zip(got_keys.tolist(), got, strict=True)) == sorted(pairs), name
    # A key range reads only its records: what a shard takes of a part.
    for low, high in ((7, 2**40), (0, 1), (8, 11), (2**40, 2**63)):
        got_keys, ends, data = read_part(path, low, high)
        starts = [0, *ends[:-1].tolist()][: len(ends)]
        got = [data[s:e] for s, e in zip(starts, ends.tolist(), strict=True)]
        assert list(zip(got_keys.tolist(), got, strict=True)) == [
            (k, r) for k, r in sorted(distinct) if low <= k < high
        ], (low, high)


def test_read_as_keys_then_reread_gives_the_documents_and_a_changed_file_is_named(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("One doc.\n\nTwo doc.\n\nOne doc.\n", encoding="utf-8")
    config = cfg(input_patterns=(str(path),))
    keyed = [x for x in ReadFileDocuments(config, pointers=True).process(str(path)) if isinstance(x, tuple)]
    texts = ["One doc.", "Two doc.", "One doc."]  # the file is known by its first document's key
    assert keyed == [
        (content_key(t), Pointer(content_key(texts[0]), str(path), i, 8)) for i, t in enumerate(texts)
    ]
    wanted = [(1, content_key("Two doc.")), (2, content_key("One doc."))]
    assert list(RereadDocuments(config).process((str(path), wanted))) == [
        (content_key("Two doc."), "Two doc."),
        (content_key("One doc."), "One doc."),
    ]
    path.write_text("One doc.\n\nAnother.\n", encoding="utf-8")  # changed between the two reads
    with pytest.raises(BadInputError, match=r"a.txt: changed while the build ran \(read twice\)"):
        list(RereadDocuments(config).process((str(path), wanted)))


def test_shards_are_counted_from_records_and_their_key_ranges_tile_the_keys():
    from pipeline.parts import key_range

    config = cfg(records_per_shard=10, num_validation_shards=3)
    assert shard_counts({"train": 151, "validation": 2}, config) == {"train": 16, "validation": 3}
    assert shard_counts({"train": 0}, config) == {"train": 0}
    assert shard_counts({"train": 5}, cfg(num_shards=4)) == {"train": 4}
    for n in (1, 3, 16):
        ranges = [key_range(s, n) for s in range(n)]
        assert ranges[0][0] == 0 and ranges[-1][1] == 2**63
        assert all(
            a[1] == b[0] and a[0] < a[1] for a, b in zip(ranges, ranges[1:] + [(2**63, None)], strict=True)
        )


def test_split_is_by_document_hash_and_near_the_fraction():
    keys = [content_key(f"doc {i}") for i in range(20_000)]
    held_out = sum(split_of(k, 0.1) == "validation" for k in keys) / len(keys)
    assert held_out == pytest.approx(0.1, abs=0.01)
    assert Counter(split_of(k, 0.0) for k in keys) == Counter({"train": 20_000})


def test_create_instances_and_write_shards(tmp_path, botchan_vocab):
    """Three tiny documents -> packed, masked rows in every planned shard, nothing lost."""
    import numpy as np

    from pipeline.instances import TokenizedDoc
    from tests.conftest import parse_files, unmasked

    model = botchan_vocab.read_bytes()
    docs = [
        TokenizedDoc(11, np.array([100, 101, 102, 103, 104], np.int32), np.array([2, 3], np.int32)),
        TokenizedDoc(22, np.array([200, 201, 202], np.int32), np.array([3], np.int32)),
        TokenizedDoc(33, np.array([300, 301, 302, 303, 304, 305, 306], np.int32), np.array([7], np.int32)),
    ]
    config = cfg(output_dir=str(tmp_path), seq_len=7, max_predictions=2, dupe_factor=1, num_shards=2)
    with TestPipeline() as p:
        model_si = beam.pvalue.AsSingleton(p | "Model" >> beam.Create([VocabFile("sentencepiece", model)]))
        made = p | beam.Create([("train", 11, docs)]) | CreateInstances(config, model_si)
        written = made.records | WriteShards(config)
        assert_that(
            written | beam.Map(lambda s: s["file"]),
            equal_to(["train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"]),
        )
        stats = made.stats | beam.CombineGlobally(SumCounters())
        # 15 tokens + 3 [SEP] = 18 -> 3 rows of 6 after [CLS]; real tokens 18 + 3 [CLS].
        assert_that(
            stats | beam.Map(lambda s: (s["train/documents"], s["train/instances"], s["train/real_tokens"])),
            equal_to([(3, 3, 21)]),
            label="stats",
        )
    rows = parse_files(sorted(tmp_path.glob("train-*.tfrecord")), seq_len=7, max_predictions=2)
    ids = unmasked(rows)
    stream = sorted(ids[rows["input_mask"] > 0].tolist())
    assert stream == sorted([2] * 3 + [3] * 3 + [t for d in docs for t in d.tokens.tolist()])
