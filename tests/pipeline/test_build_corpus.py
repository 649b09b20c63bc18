"""The whole corpus pipeline on real text, run by Beam's real DirectRunner, read back with TF."""

from __future__ import annotations

import dataclasses
import glob
import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from apache_beam.options.pipeline_options import DirectOptions

from pipeline import build_corpus, text
from pipeline.config import CorpusConfig
from pipeline.keys import content_key, split_of
from pipeline.schema import feature_lengths, features
from pipeline.vocab import SentencePieceVocab as Vocab
from tests.conftest import REPO, build, read_records, unmasked
from tests.corpus_checks import assert_covers, expected_documents, pieces_of

SEQ_LEN, MAX_PRED = 64, 9  # small and unlike the defaults, so a default leaking through fails
DOCS_ARGS = ("--vocab_size", "1500", "--seq_len", str(SEQ_LEN), "--max_predictions", str(MAX_PRED),
             "--dupe_factor", "2", "--num_shards", "3", "--validation_fraction", "0.1")  # fmt: skip


@pytest.fixture(scope="module")
def docs_input(python_docs) -> str:
    return str(python_docs / "library" / "a*.rst.txt")


@pytest.fixture(scope="module")
def docs_corpus(docs_input, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("docs_corpus")
    build(out, "--input", docs_input, *DOCS_ARGS)
    return out


# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_manifest_records_build_vocab_and_counts(docs_corpus):
    manifest = json.loads((docs_corpus / "manifest.json").read_text())
    assert manifest["schema_version"] == 2
    assert "word_starts" not in manifest["features"] and manifest["segmenter"] == {}  # no segmenter
    for stage in ("near_dedup", "quality", "language"):  # curation off: zeros, never missing
        assert (
            manifest["curation"][stage]["documents_removed"]
            == manifest["curation"][stage]["bytes_removed"]
            == 0
        )
    assert manifest["input"]["encodings"] == {"utf-8": manifest["input"]["files"]}
    assert manifest["build"]["seq_len"] == SEQ_LEN and manifest["build"]["max_predictions"] == MAX_PRED
    vocab = Vocab((docs_corpus / "vocab.model").read_bytes())
    assert manifest["vocab"]["sha256"] == vocab.sha256
    assert manifest["vocab"]["special_ids"] == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert manifest["vocab"]["size"] == vocab.size == 1500
    train, validation = manifest["splits"]["train"], manifest["splits"]["validation"]
    assert [s["file"] for s in train["shards"]] == [f"train-0000{i}-of-00003.tfrecord" for i in range(3)]
    assert sum(s["records"] for s in train["shards"]) == train["instances"] > 1000
    for shard in train["shards"] + validation["shards"]:
        assert shard["bytes"] == (docs_corpus / shard["file"]).stat().st_size
    assert validation["instances"] > 0 and validation["documents"] > 0
    # Packing fills rows: only the last row of each packing group and dupe is padded.
    assert train["padding_fraction"] < 0.01
    assert manifest["input"]["skipped"]["duplicate_document"] > 0  # reST repeats short paragraphs
    assert manifest["input"]["documents"] == (
        train["documents"] + validation["documents"] + manifest["input"]["skipped"]["duplicate_document"]
    )
    assert sorted(p.name for p in docs_corpus.iterdir()) == sorted(
        ["manifest.json", "vocab.model"] + [s["file"] for s in train["shards"] + validation["shards"]]
    )


@pytest.mark.slow
def test_every_record_parses_with_static_shapes(docs_corpus):
    manifest = json.loads((docs_corpus / "manifest.json").read_text())
    for split in ("train", "validation"):
        rows = read_records(docs_corpus, split)
        n = manifest["splits"][split]["instances"]
        for name, length in feature_lengths(SEQ_LEN, MAX_PRED).items():
            assert rows[name].shape == (n, length), name
        assert int(rows["input_mask"].sum()) == manifest["splits"][split]["real_tokens"]
        assert int(rows["masked_lm_weights"].sum()) == manifest["splits"][split]["masked_tokens"]
    assert {f.name for f in features()} == set(rows)


@pytest.mark.slow
def test_masking_rules_hold_on_real_text(docs_corpus):
    rows = read_records(docs_corpus, "train")
    special = [0, 1, 2, 3, 4]
    valid = rows["masked_lm_weights"] > 0
    n_valid = valid.sum(axis=1)
    # Weights are 1 exactly on the first n positions, which are strictly increasing; padding is 0.
    assert (valid == (np.arange(MAX_PRED)[None] < n_valid[:, None])).all()
    for pos, n in zip(rows["masked_lm_positions"], n_valid, strict=True):
        assert np.all(np.diff(pos[:n]) > 0) and not pos[n:].any()
    assert not rows["masked_lm_ids"][~valid].any()
    assert not np.isin(rows["masked_lm_ids"][valid], special).any()  # specials never masked
    # The rate: round(candidates * 0.15), capped at max_predictions.
    candidates = (~np.isin(unmasked(rows), special)).sum(axis=1)
    budget = np.minimum(MAX_PRED, np.maximum(1, np.rint(candidates * 0.15)))
    assert (n_valid == budget).all()
    shown = np.take_along_axis(rows["input_ids"], rows["masked_lm_positions"], axis=1)[valid]
    original = rows["masked_lm_ids"][valid]
    assert len(shown) > 5000
    assert (shown == 4).mean() == pytest.approx(0.8, abs=0.02)
    kept = (shown == original).mean()
    assert kept == pytest.approx(0.1, abs=0.02)
    assert 1 - (shown == 4).mean() - kept == pytest.approx(0.1, abs=0.02)


@pytest.mark.slow
def test_unmasking_recovers_the_tokenized_documents(docs_corpus, docs_input):
    vocab = Vocab((docs_corpus / "vocab.model").read_bytes())
    files = sorted(Path(p) for p in glob.glob(docs_input))
    by_split = {"train": [], "validation": []}
    for doc in expected_documents(files, doc_per_file=False):
        tokens = [t for ids in vocab.encode(text.document_sentences(doc)) for t in ids]
        if tokens:
            by_split[split_of(content_key(doc), 0.1)].append(tokens)
    for split, dupes in (("train", 2), ("validation", 1)):
        assert_covers(pieces_of(read_records(docs_corpus, split)), by_split[split], dupes)


@pytest.mark.slow
def test_same_seed_same_bytes_for_1_or_2_workers_and_any_file_order(docs_corpus, docs_input, tmp_path):
    files = sorted(glob.glob(docs_input))
    reordered = ",".join(reversed(files))  # other input order, listed file by file
    build(
        tmp_path / "two",
        "--input",
        docs_input,
        *DOCS_ARGS,
        "--direct_num_workers",
        "2",
        "--direct_running_mode",
        "multi_processing",
    )
    build(tmp_path / "reordered", "--input", reordered, *DOCS_ARGS)
    reference = {p.name: p.read_bytes() for p in docs_corpus.iterdir()}
    for other in ("two", "reordered"):
        got = {p.name: p.read_bytes() for p in (tmp_path / other).iterdir()}
        assert sorted(got) == sorted(reference)
        for name in reference:
            if name == "manifest.json" and other == "reordered":
                a, b = json.loads(got[name]), json.loads(reference[name])
                a["build"]["input_patterns"] = b["build"]["input_patterns"]  # listed, not globbed
                assert a == b
            else:
                assert got[name] == reference[name], f"{other}/{name} differs"


@pytest.mark.slow
def test_another_seed_gives_other_masks(docs_input, tmp_path, docs_corpus):
    build(
        tmp_path / "seed",
        "--input",
        docs_input,
        "--vocab",
        str(docs_corpus / "vocab.model"),
        "--seq_len",
        str(SEQ_LEN),
        "--max_predictions",
        str(MAX_PRED),
        "--dupe_factor",
        "1",
        "--seed",
        "7",
        "--validation_fraction",
        "0.1",
    )
    a = read_records(tmp_path / "seed", "validation")
    b = read_records(docs_corpus, "validation")
    assert a["input_mask"].sum() == b["input_mask"].sum()  # same documents
    assert not np.array_equal(a["masked_lm_positions"], b["masked_lm_positions"])


@pytest.mark.slow
def test_segment_pair_nsp_with_whole_word_masking(python_docs, botchan_vocab, tmp_path):
    out = tmp_path / "nsp"
    manifest = build(
        out,
        "--input",
        str(python_docs / "library" / "c*.rst.txt"),
        "--doc_per_file",
        "--vocab",
        str(botchan_vocab),
        "--mode",
        "segment_pair",
        "--nsp",
        "--whole_word_mask",
        "--seq_len",
        "48",
        "--max_predictions",
        "7",
        "--dupe_factor",
        "1",
        "--validation_fraction",
        "0",
    )
    rows = read_records(out, "train")
    labels = rows["next_sentence_labels"][:, 0]
    assert 0.35 < labels.mean() < 0.65
    assert manifest["splits"]["train"]["next_sentence_label_1"] == labels.sum()
    vocab = Vocab(botchan_vocab.read_bytes())
    from pipeline.masking import MaskingTables, word_ids

    tables = MaskingTables.from_vocab(vocab)
    ids = unmasked(rows)
    words = word_ids(ids, tables)
    for r in range(len(ids)):
        real = ids[r][rows["input_mask"][r] > 0]
        seps = np.flatnonzero(real == 3)
        assert real[0] == 2 and len(seps) == 2 and seps[-1] == len(real) - 1
        assert (rows["segment_ids"][r][seps[0] + 1 : len(real)] == 1).all()
        chosen = set(rows["masked_lm_positions"][r][rows["masked_lm_weights"][r] > 0].tolist())
        for w in np.unique(words[r][list(chosen)]):
            assert set(np.flatnonzero(words[r] == w).tolist()) <= chosen  # whole words only


@pytest.mark.slow
def test_segment_pair_sop_on_botchan(botchan, botchan_vocab, tmp_path):
    out = tmp_path / "sop"
    build(
        out,
        "--input",
        str(botchan),
        "--vocab",
        str(botchan_vocab),
        "--mode",
        "segment_pair",
        "--sop",
        "--seq_len",
        "40",
        "--max_predictions",
        "6",
        "--dupe_factor",
        "1",
        "--validation_fraction",
        "0",
    )
    rows = read_records(out, "train")
    labels = rows["next_sentence_labels"][:, 0]
    assert len(labels) > 500 and 0.4 < labels.mean() < 0.6


@pytest.mark.slow
def test_jsonl_bz2_input(tmp_path, botchan_vocab):
    import bz2

    (tmp_path / "in").mkdir()
    lines = [json.dumps({"text": f"Document number {i}. It has two sentences."}) for i in range(40)]
    (tmp_path / "in" / "a.jsonl.bz2").write_bytes(
        bz2.compress(("\n".join(lines + ["{broken"]) + "\n").encode())
    )
    manifest = build(
        tmp_path / "out",
        "--input",
        str(tmp_path / "in" / "*.jsonl.bz2"),
        "--format",
        "jsonl",
        "--vocab",
        str(botchan_vocab),
        "--seq_len",
        "16",
        "--max_predictions",
        "3",
        "--dupe_factor",
        "1",
    )
    assert manifest["input"]["documents"] == 40
    assert manifest["input"]["skipped"] == {"jsonl_malformed_line": 1}
    assert manifest["splits"]["train"]["documents"] + manifest["splits"]["validation"]["documents"] == 40


TFDS_BUILDER = """
import sys
import tensorflow_datasets as tfds

paragraphs = [p for p in open(sys.argv[1], encoding="utf-8").read().split("\\n") if len(p) > 40][:60]


class TinyBooks(tfds.core.GeneratorBasedBuilder):
    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        features = tfds.features.FeaturesDict({"text": tfds.features.Text()})
        return tfds.core.DatasetInfo(builder=self, features=features)

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples()}

    def _generate_examples(self):
        for i, p in enumerate(paragraphs):
            yield i, {"text": p}


TinyBooks(data_dir=sys.argv[2]).download_and_prepare()
print(len(paragraphs))
"""


@pytest.mark.slow
def test_tfds_input(tmp_path, botchan_vocab, botchan):
    # Prepared in another process, as a user's dataset is: this process reads it from its files.
    data_dir = tmp_path / "tfds"
    made = subprocess.run(
        [sys.executable, "-c", TFDS_BUILDER, str(botchan), str(data_dir)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    paragraphs = int(made.stdout.strip().splitlines()[-1])
    manifest = build(
        tmp_path / "out",
        "--format",
        "tfds",
        "--tfds_name",
        "tiny_books",
        "--tfds_data_dir",
        str(data_dir),
        "--vocab",
        str(botchan_vocab),
        "--seq_len",
        "32",
        "--max_predictions",
        "5",
        "--dupe_factor",
        "1",
    )
    assert paragraphs == 60
    assert manifest["input"]["documents"] == paragraphs
    assert manifest["splits"]["train"]["instances"] > 0


@pytest.mark.slow
def test_dataflow_job_builds_with_our_labelled_stages():
    """Beam builds the whole Dataflow job without submitting it (no cloud account here)."""
    result = build_corpus.run(
        [
            "--input",
            "gs://my-bucket/in/*.txt",
            "--output",
            "gs://my-bucket/out",
            "--vocab_size",
            "8000",
            "--runner",
            "DataflowRunner",
            "--dry_run=True",
            "--no_auth",
            "--project",
            "test-project",
            "--region",
            "us-central1",
            "--temp_location",
            "gs://my-bucket/tmp",
            "--staging_location",
            "gs://my-bucket/staging",
            "--sdk_location",
            "container",
        ]
    )
    names = {t.unique_name for t in result.job.proto_pipeline.components.transforms.values()}
    for stage in (
        "ReadDocuments",
        "DeduplicateDocuments",
        "GroupByFileForVocab",
        "RereadForVocab",
        "TrainVocab",
        "BatchDocuments",
        "CutGroups",
        "CreateInstances",
        "WriteShards",
        "WriteManifest",
    ):
        assert stage in names
    assert "CreateInstances/PackAndMask" in names and "WriteShards/WriteShard" in names


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.build_corpus", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_cli_errors_are_one_line_and_name_the_cause(tmp_path, botchan):
    no_match = run_cli(
        "--input",
        str(tmp_path / "nothing*.txt"),
        "--output",
        str(tmp_path / "o"),
        "--vocab_size",
        "50",
    )
    assert no_match.returncode == 2
    assert (
        no_match.stderr.strip().splitlines()[-1] == f"error: --input {tmp_path}/nothing*.txt: no files match"
    )

    both = run_cli(
        "--input",
        str(botchan),
        "--output",
        str(tmp_path / "o"),
        "--vocab_size",
        "50",
        "--vocab",
        "x.model",
    )
    assert both.returncode == 2
    assert (
        both.stderr.strip().splitlines()[-1]
        == "error: give exactly one of --vocab PATH (.model, WordPiece .txt or tokenizer.json) "
        "or --vocab_size N"
    )

    import sentencepiece as spm

    plain = tmp_path / "plain.model"  # sentencepiece's defaults: <unk> <s> </s>, no BERT specials
    spm.SentencePieceTrainer.train(
        input=str(botchan), model_prefix=str(plain)[:-6], vocab_size=200, minloglevel=2
    )
    wrong = run_cli("--input", str(botchan), "--output", str(tmp_path / "o"), "--vocab", str(plain))
    assert wrong.returncode == 2
    assert (
        wrong.stderr.strip()
        .splitlines()[-1]
        .startswith(f"error: --vocab {plain}: vocab lacks the special piece [PAD]")
    )

    threads = run_cli("--input", str(botchan), "--output", str(tmp_path / "o"), "--vocab_size", "50",
                      "--direct_running_mode", "multi_threading")  # fmt: skip
    assert threads.returncode == 2
    assert (
        threads.stderr.strip()
        .splitlines()[-1]
        .startswith("error: --direct_running_mode multi_threading loses")
    )

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "data.txt").write_bytes(gzip.compress(b"zip " * 1000))
    binary = run_cli(
        "--input",
        str(tmp_path / "bin" / "*"),
        "--output",
        str(tmp_path / "o"),
        "--vocab_size",
        "50",
    )
    assert binary.returncode == 2
    last = binary.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"error: {tmp_path}/bin/data.txt: looks binary, not utf-8 text (text in another encoding "
        "needs --encoding NAME); remove it or pass --on_bad_file=skip"
    )
    assert not (tmp_path / "o" / "manifest.json").exists()


def test_misspelled_flags_are_refused_before_anything_runs(tmp_path, botchan, capsys):
    """Beam alone only warns, after the build, that it dropped flags it does not know: the corpus
    would be built without whole-word masking and with the default dupe factor."""
    out = tmp_path / "o"
    code = build_corpus.main(["--input", str(botchan), "--output", str(out), "--vocab_size", "50",
                              "--whole_wrd_mask", "--dupe_factr", "3"])  # fmt: skip
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: unknown flags --whole_wrd_mask, --dupe_factr (did you mean --whole_word_mask, "
        "--dupe_factor?): neither bertbeam nor Beam's pipeline options know them; "
        "see python -m pipeline.build_corpus --help"
    )
    assert not out.exists()
    assert build_corpus.main(["--input", str(botchan), "--output", str(out), "--vocab_size", "50", "x"]) == 2
    assert "unexpected argument 'x'" in capsys.readouterr().err
    # Beam's own options pass through, in both spellings, beside ours.
    [cfg], options = build_corpus.parse_args(["--input", "a.txt", "--output", "o", "--vocab_size", "50",
                                              "--direct_num_workers=2", "--runner", "DirectRunner",
                                              "--whole_word_mask", "--no-doc_per_file"])  # fmt: skip
    assert cfg.whole_word_mask and not cfg.doc_per_file
    assert options.view_as(DirectOptions).direct_num_workers == 2


def test_help_explains_every_flag():
    text = " ".join(build_corpus.parser().format_help().split())
    for f in dataclasses.fields(CorpusConfig):
        if f.name != "pair_task":  # --nsp / --sop
            assert " ".join(f.metadata["help"].split()) in text, f.name
    assert "--nsp" in text and "--sop" in text


@pytest.mark.slow
def test_rebuild_with_fewer_shards_leaves_no_stale_shard(tmp_path, botchan, botchan_vocab):
    common = [
        "--input",
        str(botchan),
        "--vocab",
        str(botchan_vocab),
        "--dupe_factor",
        "1",
        "--seq_len",
        "32",
        "--max_predictions",
        "5",
        "--validation_fraction",
        "0",
    ]
    build(tmp_path, *common, "--num_shards", "4")
    manifest = build(tmp_path, *common, "--num_shards", "2")
    assert sorted(p.name for p in tmp_path.glob("train-*")) == [
        "train-00000-of-00002.tfrecord",
        "train-00001-of-00002.tfrecord",
    ]
    assert not (tmp_path / "_tmp").exists()
    assert (
        sum(s["records"] for s in manifest["splits"]["train"]["shards"])
        == manifest["splits"]["train"]["instances"]
    )


@pytest.mark.slow
def test_cli_success_prints_what_was_written(tmp_path, botchan, botchan_vocab):
    done = run_cli("--input", str(botchan), "--output", str(tmp_path / "o"), "--vocab", str(botchan_vocab),
                   "--seq_len", "64", "--max_predictions", "8", "--dupe_factor", "2")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    train = manifest["splits"]["train"]
    lines = done.stdout.strip().splitlines()
    assert lines[0] == f"corpus written to {tmp_path}/o (manifest.json, vocab.model)"
    assert lines[1].startswith(f"  train: {train['instances']:,} instances in 1 shards from 1 documents")
    assert lines[-2:] == [
        "  skipped: none; repaired: none",
        "  files by encoding: utf-8 with BOM 1",  # botchan.txt starts with a BOM
    ]
    # The build, its summary included, never imports TensorFlow, so none of its start-up lines
    # (launch/__init__.py names them) reach the console.
    assert not [line for line in done.stderr.splitlines() if "InitializeLog" in line or "I0000" in line]


@pytest.mark.slow
def test_nothing_usable_in_the_input(tmp_path, botchan_vocab):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "empty.txt").write_bytes(b"")
    (tmp_path / "in" / "blank.txt").write_bytes(b" \n\n\t\n")
    train = run_cli(
        "--input", str(tmp_path / "in" / "*"), "--output", str(tmp_path / "a"), "--vocab_size", "50"
    )
    assert train.returncode == 2
    assert (
        train.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "error: no text to train a vocab on: every input document was empty or skipped; check --input"
        )
    )
    given = run_cli("--input", str(tmp_path / "in" / "*"), "--output", str(tmp_path / "b"), "--vocab",
                    str(botchan_vocab))  # fmt: skip
    assert given.returncode == 0
    assert given.stdout.strip().splitlines()[-3:] == [
        "  skipped: empty_file 2; repaired: none",
        "  files by encoding: utf-8 2",
        "warning: no instances were written: every input document was empty or skipped",
    ]


@pytest.mark.slow
def test_progress_counts_every_byte_document_and_instance(
    tmp_path, botchan, botchan_vocab, monkeypatch, caplog
):
    """Progress lines per stage while the build runs, and the same figures as Beam counters: at
    the end they equal the input's bytes (compressed ones included) and the manifest's counts."""
    import logging

    from apache_beam.metrics.metric import MetricsFilter

    from pipeline.stages import progress

    monkeypatch.setattr(progress, "EVERY_SECONDS", 0.0)  # a line per update
    (tmp_path / "in").mkdir()
    lines = [line for line in botchan.read_text(encoding="utf-8").splitlines() if line.strip()]
    documents = ["\n".join(lines[i : i + 20]) for i in range(0, len(lines), 20)]
    thirds = [documents[i::3] for i in range(3)]
    (tmp_path / "in" / "a.txt").write_text("\n\n".join(thirds[0]), encoding="utf-8")
    (tmp_path / "in" / "b.txt").write_text("\n\n".join(thirds[1]), encoding="utf-8")
    (tmp_path / "in" / "c.txt.gz").write_bytes(gzip.compress("\n\n".join(thirds[2]).encode()))
    total = sum(path.stat().st_size for path in (tmp_path / "in").iterdir())
    caplog.set_level(logging.INFO, logger="bertbeam.corpus")
    result = build_corpus.run(["--input", str(tmp_path / "in" / "*"), "--output", str(tmp_path / "out"),
                               "--vocab", str(botchan_vocab), "--seq_len", "23", "--max_predictions", "4",
                               "--dupe_factor", "3"])  # fmt: skip
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    splits = manifest["splits"].values()

    counters = {
        c.key.metric.name: c.committed
        for c in result.metrics().query(MetricsFilter().with_namespace("bertbeam"))["counters"]
    }
    assert counters["progress/read bytes"] == total
    assert counters["progress/read documents"] == manifest["input"]["documents"] > 30
    assert counters["progress/tokenized documents"] == sum(s["documents"] for s in splits)
    assert counters["progress/written_at_seq_23 instances"] == sum(s["instances"] for s in splits)

    lines = [r.getMessage() for r in caplog.records if r.name == "bertbeam.corpus"]
    reads = [line for line in lines if line.startswith("read: ")]
    shares = [int(line.split("(")[1].split(" %")[0]) for line in reads]
    assert len(reads) >= manifest["input"]["documents"] and shares == sorted(shares) and shares[-1] == 100
    assert all(" MB/s" in line for line in reads) and any(" s left" in line for line in reads)
    done = {line.split(":")[0]: line for line in lines if line.startswith("done, ")}
    assert f"{manifest['input']['documents']:,} documents" in done["done, read"]
    instances = sum(s["instances"] for s in splits)
    assert done["done, written at seq 23"].startswith(f"done, written at seq 23: {instances:,} of about ")


@pytest.mark.slow
def test_nsp_with_one_document_has_no_random_next_and_says_so(tmp_path, botchan, botchan_vocab, caplog):
    """A packing group of one document has no other document to draw NSP's random next segment
    from: as a one-document corpus always did, every pair is a true next (label 0), and a line
    says so. Two documents give random ones."""
    import logging

    caplog.set_level(logging.WARNING, logger="bertbeam.corpus")
    text = " ".join(line for line in botchan.read_text(encoding="utf-8").splitlines()[:400] if line.strip())
    args = ("--vocab", str(botchan_vocab), "--mode", "segment_pair", "--nsp", "--seq_len", "41",
            "--max_predictions", "5", "--dupe_factor", "1", "--validation_fraction", "0")  # fmt: skip
    labels = {}
    halves = [text[: len(text) // 2], text[len(text) // 2 :]]
    for docs, content in ((1, [text]), (2, halves)):
        (tmp_path / f"in{docs}.txt").write_text("\n\n".join(content), encoding="utf-8")
        build(tmp_path / f"out{docs}", "--input", str(tmp_path / f"in{docs}.txt"), *args)
        labels[docs] = read_records(tmp_path / f"out{docs}")["next_sentence_labels"].ravel()
    assert len(labels[1]) > 20 and not labels[1].any()
    assert labels[2].mean() > 0.2  # random next segments, from the other document
    warned = [r.getMessage() for r in caplog.records if "holds one document" in r.getMessage()]
    assert len(warned) == 1 and "none random" in warned[0]


@pytest.mark.slow
def test_a_corpus_of_an_earlier_layout_is_read_and_resumed_alike(docs_corpus, tmp_path):
    """A corpus whose manifest says packing version 2 (built before groups were cut from the input)
    reads the same batches as version 3, and a resume at batch 5 gives the uninterrupted stream's
    sixth batch: the layout is the builder's, the reader's order comes from the manifest's shards."""
    import shutil

    from pipeline.reader.config import InputConfig
    from pipeline.reader.dataset import make_dataset
    from pipeline.schema import read_manifest

    older = tmp_path / "older"
    shutil.copytree(docs_corpus, older)
    manifest = json.loads((older / "manifest.json").read_text())
    assert manifest["packing_version"] == 3
    manifest["packing_version"] = 2
    (older / "manifest.json").write_text(json.dumps(manifest, indent=2))
    config = InputConfig(7, seed=3)

    def batches(folder, skip=0, n=6):
        stream = make_dataset(read_manifest(str(folder)), "train", config, skip_batches=skip)
        return [batch[0]["input_ids"].numpy() for batch in stream.take(n)]

    assert read_manifest(str(older)).packing_version == 2
    ours, theirs = batches(docs_corpus), batches(older)
    assert all((a == b).all() for a, b in zip(ours, theirs, strict=True))
    assert (batches(older, skip=5, n=1)[0] == theirs[5]).all()
