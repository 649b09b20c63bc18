"""The corpus builder on a real Dask cluster (a scheduler and two worker processes on 127.0.0.1):
the same bytes as the DirectRunner's, the flags, and the runner's checks of the cluster."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import typing
import uuid

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.transforms import window
from apache_beam.utils.windowed_value import WindowedValue

from common.errors import ConfigError
from pipeline import build_corpus
from pipeline.runners import dask_runner, dask_translate
from tests.conftest import REPO, build
from tests.dask_cluster import loopback_cluster

# full_sentences (the default mode) with whole words and a sentencepiece vocab trained in the
# build; NSP pairs with a WordPiece vocab trained in the build. Small odd sizes, several shards.
WHOLE_WORDS = ("--vocab_size", "1100", "--whole_word_mask", "--seq_len", "57", "--max_predictions", "8",
               "--dupe_factor", "2", "--num_shards", "3", "--validation_fraction", "0.1")  # fmt: skip
NSP_WORDPIECE = ("--doc_per_file", "--vocab_size", "900", "--vocab_model_type", "wordpiece", "--mode",
                 "segment_pair", "--nsp", "--seq_len", "45", "--max_predictions", "7", "--dupe_factor", "1",
                 "--num_shards", "2", "--validation_fraction", "0.15")  # fmt: skip


@pytest.fixture(scope="module")
def cluster_folder(tmp_path_factory):
    return tmp_path_factory.mktemp("dask")


@pytest.fixture(scope="module")
def cluster(cluster_folder):
    with loopback_cluster(cluster_folder) as address:
        yield address


def on_dask(address: str) -> tuple[str, ...]:
    return ("--runner", "DaskRunner", "--dask_client_address", address)


def folder_bytes(folder) -> dict[str, bytes | None]:
    """Every file's bytes under `folder`, by relative path, and its folders (None): a folder one
    build leaves (`_tmp/`) and another does not is a difference too."""
    return {
        str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))
    }


# --- the builder on the cluster ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name,pattern,args", [("whole_words", "a*.rst.txt", WHOLE_WORDS),
                                               ("nsp_wordpiece", "c*.rst.txt", NSP_WORDPIECE)])  # fmt: skip
def test_same_bytes_as_the_direct_runner(
    cluster, cluster_folder, python_docs, tmp_path, name, pattern, args, caplog
):
    inputs = ("--input", str(python_docs / "library" / pattern))
    caplog.set_level(logging.INFO, logger="bertbeam.corpus")
    manifest = build(tmp_path / "dask", *inputs, *args, *on_dask(cluster))
    build(tmp_path / "direct", *inputs, *args)
    direct, dask = folder_bytes(tmp_path / "direct"), folder_bytes(tmp_path / "dask")
    assert sorted(dask) == sorted(direct) and "manifest.json" in dask  # no _tmp/ left either
    for file in direct:
        assert dask[file] == direct[file], f"{name}: {file} differs"
    assert sum(len(split["shards"]) for split in manifest["splits"].values()) >= 3
    # The workers' own log lines reach the launcher's log (dask's forward_logging): each shard's.
    shards = [r for r in caplog.records if r.getMessage().startswith("wrote ") and r.process != os.getpid()]
    assert len(shards) == sum(len(split["shards"]) for split in manifest["splits"].values())
    # Nothing went to a worker's own temp folder: every file a stage writes is under the output.
    assert [p for tmp in cluster_folder.glob("workers/tmp*") for p in tmp.iterdir()] == []
    assert len(list(cluster_folder.glob("workers/tmp*"))) == 2


@pytest.mark.slow
def test_curation_decides_the_same_on_every_runner(cluster, python_docs, tmp_path):
    """Language, C4 and near-duplicates (signatures, buckets, clusters) on the Dask cluster, the
    in-memory DirectRunner and its 2 worker processes: the same corpus and the same samples of
    what was removed, to the byte. The three longest pages are planted again with 1 % of their words
    changed. With --filter_processes 2: the DirectRunner's processes start their own, and a Dask
    worker (a daemonic process, which may not) decides in itself."""
    source = tmp_path / "in"
    source.mkdir()
    pages = sorted((python_docs / "library").glob("a*.rst.txt"))
    longest = sorted(pages, key=lambda path: (-path.stat().st_size, path.name))[:3]
    for path in pages:
        text = path.read_text(encoding="utf-8")
        (source / path.name).write_text(text, encoding="utf-8")
        if path in longest:
            n, words = longest.index(path), text.split(" ")
            for i in range(0, len(words), 100):
                words[i] = f"changed{n}x{i}"
            (source / f"near_{path.name}").write_text(" ".join(words), encoding="utf-8")
    args = ("--input", str(source / "*.txt"), "--doc_per_file", "--vocab_size", "700", "--seq_len", "41",
            "--max_predictions", "6", "--dupe_factor", "2", "--num_shards", "2", "--languages", "en",
            "--quality_filters", "c4", "--near_dedup_threshold", "0.8",
            "--filter_processes", "2")  # fmt: skip
    manifest = build(tmp_path / "dask", *args, *on_dask(cluster))
    build(tmp_path / "direct", *args)
    two_workers = ("--direct_num_workers", "2", "--direct_running_mode", "multi_processing")
    build(tmp_path / "workers", *args, *two_workers)
    assert manifest["curation"]["near_dedup"]["documents_removed"] >= 3
    assert list((tmp_path / "dask" / "curation").glob("near_duplicate.jsonl.gz"))
    direct = folder_bytes(tmp_path / "direct")
    assert folder_bytes(tmp_path / "dask") == direct
    assert folder_bytes(tmp_path / "workers") == direct


@pytest.mark.slow
def test_tfds_input_same_bytes(cluster, botchan, tmp_path):
    from tests.pipeline.test_build_corpus import TFDS_BUILDER

    data_dir = tmp_path / "tfds"  # prepared in another process, as a user's dataset is
    subprocess.run([sys.executable, "-c", TFDS_BUILDER, str(botchan), str(data_dir)], check=True,
                   capture_output=True, timeout=300)  # fmt: skip
    args = ("--format", "tfds", "--tfds_name", "tiny_books", "--tfds_data_dir", str(data_dir), "--vocab_size",
            "211", "--seq_len", "33", "--max_predictions", "5", "--dupe_factor", "2")  # fmt: skip
    manifest = build(tmp_path / "dask", *args, *on_dask(cluster))
    build(tmp_path / "direct", *args)
    assert folder_bytes(tmp_path / "dask") == folder_bytes(tmp_path / "direct")
    assert manifest["input"]["documents"] == 60


@pytest.mark.slow
def test_a_worker_that_cannot_see_the_output_stops_the_build(cluster, botchan, botchan_vocab, tmp_path,
                                                              monkeypatch):  # fmt: skip
    # A relative --output is a folder of the launcher's working directory: the workers (started in
    # another one) do not see it, as a worker on another host would not see a local folder.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        dask_runner.DaskBuildError, match=r"Dask worker tcp://127\.0\.0\.1:\d+ cannot see out"
    ):
        build_corpus.run(["--input", str(botchan), "--output", "out", "--vocab", str(botchan_vocab),
                          *on_dask(cluster)])  # fmt: skip
    assert not (tmp_path / "out" / "manifest.json").exists()
    assert not list((tmp_path / "out" / "_tmp").glob("dask-probe-*"))  # the probe is removed
    # The same for the input: the launcher matches in.txt, the workers nothing (an empty corpus).
    (tmp_path / "in.txt").write_bytes(botchan.read_bytes())
    with pytest.raises(
        dask_runner.DaskBuildError, match=r"matches 0 files for --input in\.txt, the launcher 1"
    ):
        build_corpus.run(["--input", "in.txt", "--output", str(tmp_path / "out"), "--vocab",
                          str(botchan_vocab), *on_dask(cluster)])  # fmt: skip


@pytest.mark.slow
def test_a_worker_with_other_versions_stops_the_build(cluster, botchan, botchan_vocab, tmp_path, monkeypatch):
    here = dask_runner._versions()
    monkeypatch.setattr(dask_runner, "_versions", lambda: {**here, "apache-beam": "2.0.0"})
    with pytest.raises(dask_runner.DaskBuildError, match=r"runs apache-beam 2\.77\.0 \(here 2\.0\.0\)"):
        build_corpus.run(["--input", str(botchan), "--output", str(tmp_path / "out"), "--vocab",
                          str(botchan_vocab), *on_dask(cluster)])  # fmt: skip


# --- the runner on small graphs ------------------------------------------------------------------


@beam.typehints.with_output_types(typing.Any)  # its outputs' types differ by tag
class _EmitInFinishBundle(beam.DoFn):
    def start_bundle(self):
        self.seen = 0

    def process(self, n):
        self.seen += 1
        yield beam.pvalue.TaggedOutput("stats", ("seen", 1, n))  # not a (key, value) pair
        yield n % 3, n

    def finish_bundle(self):
        yield WindowedValue(("bundle", -self.seen), 0, [window.GlobalWindow()])


class _MarkEachRun(beam.DoFn):
    """Passes elements on and leaves a file per element it processes: how often it ran."""

    def __init__(self, folder):
        self._folder = folder

    def process(self, element):
        self._folder.mkdir(exist_ok=True)
        (self._folder / uuid.uuid4().hex).write_text(repr(element))
        yield element


def _written_by(pcoll, name: str, path):
    """A sink: the sorted elements into `path` (through a ToList, as WriteManifest does)."""
    return (
        pcoll
        | f"Collect{name}" >> beam.combiners.ToList()
        | f"Write{name}" >> beam.Map(lambda items: path.write_text(repr(sorted(items))))
    )


@pytest.mark.slow
def test_tags_side_inputs_finish_bundle_and_every_leaf(cluster, tmp_path):
    """What Beam 2.77's DaskRunner gets wrong: main and tagged outputs kept apart, finish_bundle's
    outputs kept, a side input computed once and handed in, and both sinks written (not only the
    last transform's)."""
    options = PipelineOptions(["--dask_client_address", cluster])
    with beam.Pipeline(runner=dask_runner.DaskRunner(), options=options) as p:
        numbers = p | "Numbers" >> beam.Create(range(1, 24))
        out = numbers | "Emit" >> beam.ParDo(_EmitInFinishBundle()).with_outputs("stats", main="keyed")
        marked = (
            numbers
            | "Total" >> beam.CombineGlobally(sum)
            | "Mark" >> beam.ParDo(_MarkEachRun(tmp_path / "runs"))
        )
        total = beam.pvalue.AsSingleton(marked)  # read by the partitions of two ParDos, and a sink's input
        _written_by(marked, "Total", tmp_path / "total")
        scaled = numbers | "Scaled" >> beam.Map(lambda n, total: n / total, total=total)
        _written_by(scaled | "Sum" >> beam.CombineGlobally(sum), "Scaled", tmp_path / "scaled")
        grouped = (
            out.keyed
            | "Elements" >> beam.Filter(lambda kv: kv[0] != "bundle")
            | "Group" >> beam.GroupByKey()
            | "WithTotal" >> beam.Map(lambda kv, total: (kv[0], sorted(kv[1]), total), total=total)
        )
        _written_by(grouped, "Groups", tmp_path / "groups")
        seen = out.stats | "Ones" >> beam.Map(lambda stat: stat[1]) | "SumSeen" >> beam.CombineGlobally(sum)
        bundles = (
            out.keyed
            | "Bundles" >> beam.Filter(lambda kv: kv[0] == "bundle")
            | "BundleSizes" >> beam.MapTuple(lambda _, n: -n)
            | "SumBundles" >> beam.CombineGlobally(sum)
        )
        _written_by((seen, bundles) | "Both" >> beam.Flatten(), "Seen", tmp_path / "seen")
    groups = eval((tmp_path / "groups").read_text())
    assert groups == [(k, list(range(k if k else 3, 24, 3)), 276) for k in range(3)]
    assert eval((tmp_path / "seen").read_text()) == [23, 23]  # every element, in process and in finish_bundle
    assert eval((tmp_path / "total").read_text()) == [276] and eval((tmp_path / "scaled").read_text()) == [
        1.0
    ]
    assert len(list((tmp_path / "runs").iterdir())) == 1  # the side input was computed once


@pytest.mark.slow
def test_beams_own_dask_runner_mixes_a_pardos_outputs(cluster):
    """The upstream cause of "too many values to unpack (expected 2)" in ReifyWindows: Beam's
    translation gives a consumer of the main output the "stats" outputs too. If this starts
    passing, Beam fixed it and pipeline/runners/dask_translate.py can shrink."""
    from apache_beam.runners.dask.dask_runner import DaskRunner as BeamDaskRunner

    options = PipelineOptions(["--dask_client_address", cluster])
    p = beam.Pipeline(runner=BeamDaskRunner(), options=options)
    out = p | beam.Create(range(7)) | beam.ParDo(_EmitInFinishBundle()).with_outputs("stats", main="keyed")
    _ = out.keyed | beam.GroupByKey()
    result = p.run()
    try:
        with pytest.raises(ValueError, match=r"too many values to unpack \(expected 2\)"):
            result.wait_until_finish()
    finally:
        result.client.close()


class _Explode(beam.DoFn):
    """Each number -> 40 blocks of 1 MiB (and a count on "stats"): a partition's worth of them
    would be 120 MiB held at once."""

    def process(self, n):
        for i in range(40):
            yield bytes([n]) * (1 << 20) + bytes([i])
        yield beam.pvalue.TaggedOutput("stats", 40)


class _Checksum(beam.DoFn):
    """A block -> its first and last bytes; one more in finish_bundle, which must still flow on."""

    def start_bundle(self):
        self.seen = 0

    def process(self, block):
        self.seen += 1
        yield block[0] * 1000 + block[-1]

    def finish_bundle(self):
        yield WindowedValue(-self.seen, 0, [window.GlobalWindow()])


def _chain_on_dask(fuse: bool):
    """A chain of three ParDos (a tagged output read elsewhere), translated and run by dask's
    synchronous scheduler in this process; returns (results, peak traced bytes)."""
    import tracemalloc

    import dask

    p = beam.Pipeline(runner=dask_runner.DaskRunner())
    explode = beam.ParDo(_Explode()).with_outputs("stats", main="blocks")
    blocks = p | beam.Create([1, 2, 3]) | "Explode" >> explode
    sums = blocks.blocks | "Checksum" >> beam.ParDo(_Checksum()) | "Twice" >> beam.Map(lambda x: 2 * x)
    counted = blocks.stats | "Counted" >> beam.Map(lambda x: x)
    p.replace_all(dask_translate.overrides())
    translate = dask_translate.Translate(1, dask_translate.count_consumers(p) if fuse else None)
    p.visit(translate)
    translate.leaves()  # gives the chains still growing their tasks
    tracemalloc.start()
    got = dask.compute(translate.bags[sums], translate.bags[counted], scheduler="sync")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return got, peak


def test_a_chain_of_pardos_streams_its_elements_one_by_one():
    """ParDos that each read only the one before run as one task per partition, each element
    passed on as it is emitted: the 120 MiB a partition's first step makes are never held at once.
    The same chain unfused holds them (the check can fail), and both give the same values."""
    fused, fused_peak = _chain_on_dask(fuse=True)
    plain, plain_peak = _chain_on_dask(fuse=False)
    expected = sorted([2 * (n * 1000 + i) for n in (1, 2, 3) for i in range(40)] + [-240])
    assert sorted(fused[0]) == sorted(plain[0]) == expected  # finish_bundle's value flowed on
    assert list(fused[1]) == list(plain[1]) == [40, 40, 40]
    assert fused_peak < 12 << 20 < 100 << 20 < plain_peak, (fused_peak, plain_peak)


def test_other_windows_are_refused_before_anything_runs():
    p = beam.Pipeline(runner=dask_runner.DaskRunner())
    _ = p | beam.Create([1, 2]) | beam.WindowInto(window.FixedWindows(10)) | beam.Map(str)
    translate = dask_translate.Translate(partitions=2)
    p.replace_all(dask_translate.overrides())
    with pytest.raises(ConfigError, match=r"WindowInto.* FixedWindows PCollection; this runner runs global"):
        p.visit(translate)


# --- flags ---------------------------------------------------------------------------------------


def test_dask_by_its_short_name_with_its_options(botchan, botchan_vocab, tmp_path):
    cfgs, options = build_corpus.parse_args(
        ["--input", str(botchan), "--output", str(tmp_path), "--vocab", str(botchan_vocab), "--runner",
         "DaskRunner", "--dask_client_address", "tcp://127.0.0.1:8786", "--dask_workers", "3"]
    )  # fmt: skip
    assert options.view_as(StandardOptions).runner == "pipeline.runners.dask_runner.DaskRunner"
    assert options.view_as(dask_runner.DaskOptions).address == "tcp://127.0.0.1:8786"
    assert options.view_as(dask_runner.ClusterOptions).dask_workers == 3
    runner = build_corpus.runner_for(options, cfgs)
    assert isinstance(runner, dask_runner.DaskRunner) and runner.shared == (str(tmp_path),)
    assert (
        build_corpus.runner_for(
            build_corpus.parse_args(["--input", "x", "--output", "y", "--vocab_size", "900"])[1], cfgs
        )
        is None
    )


def run_cli(*args: str, env_code: str = "") -> subprocess.CompletedProcess:
    main = "import sys\nfrom pipeline import build_corpus\nsys.exit(build_corpus.main(sys.argv[1:]))"
    code = f"{env_code}\n{main}"
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow  # four command lines in fresh processes (as the other CLI cases)
def test_one_line_errors(botchan, botchan_vocab, tmp_path):
    common = ("--input", str(botchan), "--output", str(tmp_path), "--vocab", str(botchan_vocab))
    # Without dask installed (here: made unimportable), naming the runner says how to install it.
    done = run_cli(
        *common, "--runner", "DaskRunner", env_code="import sys; sys.modules['distributed'] = None"
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --runner DaskRunner needs dask.distributed (import of distributed halted; None in "
        "sys.modules): pip install 'bertbeam[dask]' (dask[distributed]) on the launcher and on every worker"
    ]
    done = run_cli(*common, "--runner", "DaskRunner", "--dask_client_adress", "tcp://127.0.0.1:1")
    assert done.returncode == 2 and "did you mean --dask_client_address?" in done.stderr.splitlines()[-1]
    done = run_cli(*common, "--dask_workers", "2")
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "error: --dask_workers is a Dask option: add --runner DaskRunner (this build runs on DirectRunner)"
    )
    done = run_cli(*common, "--runner", "DaskRunner", "--dask_client_address", "tcp://127.0.0.1:9",
                   "--dask_connection_timeout", "2")  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].startswith(
        "error: cannot reach the Dask scheduler at tcp://127.0.0.1:9: "
    )


def test_a_shard_written_again_is_described_not_lost(tmp_path):
    """A WriteShard task run again (Dask reruns a task whose result died with its worker) writes
    the same shard from the parts while they are there, and once the manifest has removed them
    (_tmp/), finds the shard in place and describes it."""
    from pipeline import parts
    from pipeline.stages.write_shards import WriteShard

    keys = [5, 2, 9]
    records = [parts.tfrecord_framed(bytes([k]) * (k + 3)) for k in keys]
    paths = [parts.part_path(str(tmp_path), "train", g) for g in (0, 1)]
    parts.write_part(paths[0], keys[:2], records[:2])
    parts.write_part(paths[1], keys[2:], records[2:])
    write = WriteShard(str(tmp_path))  # not set up: works in `process`, as on a worker
    first = list(write.process((("train", 0), paths), {"train": 1}))
    shard = (tmp_path / "train-00000-of-00001.tfrecord").read_bytes()
    assert list(write.process((("train", 0), paths), {"train": 1})) == first  # parts still there
    parts.remove_tmp(str(tmp_path))
    again = list(write.process((("train", 0), paths), {"train": 1}))
    assert again == first == [{"split": "train", "file": "train-00000-of-00001.tfrecord", "records": 3,
                               "bytes": len(shard)}]  # fmt: skip
    assert shard == b"".join(records[i] for i in (1, 0, 2))  # by key


@pytest.mark.slow
def test_a_scheduler_without_workers_is_one_line(tmp_path, botchan, botchan_vocab, monkeypatch):
    monkeypatch.setattr(dask_runner, "WAIT_FOR_WORKERS", 1)
    with loopback_cluster(tmp_path / "cluster", workers=0) as address:
        with pytest.raises(
            dask_runner.DaskBuildError, match=r"no worker joined the Dask scheduler at tcp://"
        ):
            build_corpus.run(["--input", str(botchan), "--output", str(tmp_path / "out"), "--vocab",
                              str(botchan_vocab), *on_dask(address)])  # fmt: skip
