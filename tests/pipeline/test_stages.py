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
from pipeline.stages.plan import make_plan
from pipeline.stages.read import ReadDocuments, ReadFileDocuments, RereadDocuments
from pipeline.stages.stats import BadInputError, SumCounters
from pipeline.stages.tokenize import TokenizeDocuments
from pipeline.stages.train_vocab import TrainVocab
from pipeline.stages.write_shards import WriteShards
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
    key = content_key(doc)
    with TestPipeline() as p:
        model_si = beam.pvalue.AsSingleton(p | "Model" >> beam.Create([VocabFile("sentencepiece", model)]))
        out = (
            p
            | beam.Create([[(key, doc), (content_key(""), "")]])  # a batch; the empty one is skipped
            | beam.ParDo(TokenizeDocuments(cfg(validation_fraction=0.0)), model_si).with_outputs(
                "stats", main="docs"
            )
        )
        assert_that(
            out.docs | beam.Map(lambda sd: (sd[0], sd[1].key, [s.tolist() for s in sd[1].sentences()])),
            equal_to([("train", key, expected)]),
        )
        assert_that(out.stats, equal_to([{"skipped/no_tokens": 1}]), label="stats")


def test_spilled_documents_read_back_as_written(tmp_path):
    """Tokenized documents in spill files (tokens, sentence lengths, a segmenter's unit starts),
    read back by pointer, in any order, from several files."""
    import numpy as np

    from pipeline.instances import TokenizedDoc
    from pipeline.parts import Spill, read_spilled

    rng = np.random.default_rng(5)
    docs = []
    for key, n in ((3, 7), (2**62 + 11, 1), (9, 13), (4, 5)):
        lengths = np.array([n - n // 2, n // 2], np.int32)
        units = rng.random(n) < 0.5 if key % 2 else None
        docs.append(TokenizedDoc(key, rng.integers(0, 2**30, n, dtype=np.int32), lengths, units))
    first, second = Spill(str(tmp_path / "a")), Spill(str(tmp_path / "b"))
    pointers = [first.write(d) for d in docs[:3]] + [second.write(docs[3])]
    first.close()
    second.close()
    assert [p.key for p in pointers] == [d.key for d in docs] and pointers[1].n_tokens == 1
    back = {d.key: d for d in read_spilled(pointers[::-1])}
    for doc in docs:
        got = back[doc.key]
        assert got.tokens.tolist() == doc.tokens.tolist()
        assert got.sentence_lengths.tolist() == doc.sentence_lengths.tolist()
        assert (got.unit_starts is None) == (doc.unit_starts is None)
        if doc.unit_starts is not None:
            assert got.unit_starts.tolist() == doc.unit_starts.tolist()


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


def test_read_as_keys_then_reread_gives_the_documents_and_a_changed_file_is_named(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("One doc.\n\nTwo doc.\n\nOne doc.\n", encoding="utf-8")
    config = cfg(input_patterns=(str(path),))
    keyed = [x for x in ReadFileDocuments(config, pointers=True).process(str(path)) if isinstance(x, tuple)]
    assert keyed == [
        (content_key(t), (str(path), i)) for i, t in enumerate(["One doc.", "Two doc.", "One doc."])
    ]
    wanted = [(1, content_key("Two doc.")), (2, content_key("One doc."))]
    assert list(RereadDocuments(config).process((str(path), wanted))) == [
        (content_key("Two doc."), "Two doc."),
        (content_key("One doc."), "One doc."),
    ]
    path.write_text("One doc.\n\nAnother.\n", encoding="utf-8")  # changed between the two reads
    with pytest.raises(BadInputError, match=r"a.txt: changed while the build ran \(read twice\)"):
        list(RereadDocuments(config).process((str(path), wanted)))


def test_plan_scales_groups_and_shards_with_tokens():
    config = cfg(seq_len=7, max_predictions=3, dupe_factor=3, records_per_shard=10, group_tokens=100)
    plan = make_plan({"train": 250, "validation": 9}, config)
    # 250 tokens / 5 per row = 50 rows x 3 dupes = 150 -> 15 shards; 250 // 100 = 2 groups.
    assert plan["train"] == {"tokens": 250, "groups": 2, "shards": 15, "dupes": 3}
    assert plan["validation"] == {"tokens": 9, "groups": 1, "shards": 1, "dupes": 1}
    assert make_plan({}, config)["validation"]["shards"] == 0


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
    plan = {
        "train": {"tokens": 15, "groups": 1, "shards": 2, "dupes": 1},
        "validation": {"tokens": 0, "groups": 1, "shards": 0, "dupes": 1},
    }
    with TestPipeline() as p:
        model_si = beam.pvalue.AsSingleton(p | "Model" >> beam.Create([VocabFile("sentencepiece", model)]))
        plan_si = beam.pvalue.AsSingleton(p | "Plan" >> beam.Create([plan]))
        made = p | beam.Create([("train", d) for d in docs]) | CreateInstances(config, model_si, plan_si)
        written = made.records | WriteShards(str(tmp_path), plan_si)
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
    assert not (tmp_path / "_tmp" / "parts").exists() or not list((tmp_path / "_tmp" / "parts").iterdir())
