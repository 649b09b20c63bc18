"""Shared fixtures: real corpora fetched by the project's own script, a vocab trained on real text,
and corpus builds shared by several tests (each build is a real DirectRunner run)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("BERTBEAM_DATA", REPO / "data"))

pytest_plugins = ["tests.reliability.summary"]  # the `report` fixture and the summary table

# Folders whose modules start first: `make test` hands whole modules to its workers (pytest-xdist's
# loadscope, so a module's fixtures are built once), and these hold the longest ones (the kill and
# resume runs: minutes each). Started last, they would leave one worker running alone at the end.
LONGEST_FIRST = ("tests/launch/test_jax", "tests/reliability/", "tests/launch/")


def pytest_collection_modifyitems(items):
    def rank(item) -> int:
        path = item.nodeid
        return next(
            (i for i, folder in enumerate(LONGEST_FIRST) if path.startswith(folder)), len(LONGEST_FIRST)
        )

    items.sort(key=rank)  # stable: the order within each folder stays as collected


@pytest.fixture(scope="session", autouse=True)
def xla_compilation_cache(tmp_path_factory):
    """TensorFlow's persistent XLA cache for this session (per worker under pytest-xdist), so
    that a run started again with the same model, resumed after a SIGKILL say, loads its train
    step's executable instead of compiling it: the kill-and-resume cases start a dozen such
    processes. Tracing still runs, the numbers do not change (the same executable), and each
    session starts empty, so nothing outlives the TensorFlow that compiled it."""
    folder = tmp_path_factory.mktemp("xla_cache")
    flag = f"--tf_xla_persistent_cache_directory={folder}"
    os.environ["TF_XLA_FLAGS"] = " ".join(filter(None, (os.environ.get("TF_XLA_FLAGS"), flag)))
    # JAX's own persistent cache, for the runs started under KERAS_BACKEND=jax.
    os.environ["JAX_COMPILATION_CACHE_DIR"] = str(folder / "jax")
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    return folder


@pytest.fixture(scope="session")
def botchan() -> Path:
    from pipeline.fetch.corpora import botchan as fetch

    return fetch(DATA)


@pytest.fixture(scope="session")
def python_docs() -> Path:
    from pipeline.fetch.corpora import python_docs as fetch

    return fetch(DATA)


@pytest.fixture(scope="session")
def zh_reviews() -> Path:
    from pipeline.fetch.corpora import zh_reviews as fetch

    return fetch(DATA)


@pytest.fixture(scope="session")
def zh_sample(zh_reviews, tmp_path_factory) -> Path:
    """The first 240 reviews of each of zh_reviews' two files (~45,000 characters of Chinese with
    some English and digits): small enough for a test build, real text throughout."""
    folder = tmp_path_factory.mktemp("zh_sample")
    for name in ("pos.txt", "neg.txt"):
        reviews = (zh_reviews / name).read_text(encoding="utf-8").split("\n\n")[:240]
        (folder / name).write_text("\n\n".join(reviews) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="session")
def botchan_vocab(botchan, tmp_path_factory) -> Path:
    """A 1000-piece sentencepiece model trained on Botchan with BERT's specials."""
    from collections import Counter

    from pipeline.text import document_sentences, normalize_line
    from pipeline.vocab import train_sentencepiece

    text = normalize_line(botchan.read_text(encoding="utf-8"), Counter())
    model = train_sentencepiece(document_sentences(text), vocab_size=1000, model_type="unigram")
    path = tmp_path_factory.mktemp("vocab") / "botchan.model"
    path.write_bytes(model)
    return path


@pytest.fixture(scope="session")
def botchan_wordpiece(botchan, tmp_path_factory) -> Path:
    """A lower-cased WordPiece vocab.txt (2,000 tokens) trained on Botchan by Hugging Face
    `tokenizers`, laid out like Google's: [PAD] first, [unused*] slots, then [UNK] [CLS] [SEP]
    [MASK] at ids that are not 1-4, then the learned tokens."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    specials = ["[PAD]", *(f"[unused{i}]" for i in range(5)), "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=2000, special_tokens=specials, show_progress=False)
    tokenizer.train_from_iterator(botchan.read_text(encoding="utf-8").splitlines(), trainer=trainer)
    tokens = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    path = tmp_path_factory.mktemp("wordpiece") / "vocab.txt"
    path.write_text("".join(f"{token}\n" for token, _ in tokens), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def botchan_bpe(botchan, tmp_path_factory) -> Path:
    """A byte-level BPE of 1,500 tokens trained on Botchan (and a few Chinese lines, for the CJK
    table), laid out as answerdotai/ModernBERT-base's tokenizer.json: no prefix space, the
    specials added after the learned tokens, a [CLS] $A [SEP] template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)  # fmt: skip
    lines = botchan.read_text(encoding="utf-8").splitlines() + ["中文的句子。", "我们的句子很好。"] * 50
    tokenizer.train_from_iterator(lines, trainer=trainer)
    specials = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]  # ModernBERT's order, after the vocab
    tokenizer.add_special_tokens(specials)
    ids = {t: tokenizer.token_to_id(t) for t in specials}
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])]
    )
    path = tmp_path_factory.mktemp("bpe") / "tokenizer.json"
    path.write_text(tokenizer.to_str())
    return path


BLOCKER = """import sys


class Blocked:
    # What a machine without TensorFlow (the GPU image) or Beam lacks: importing it fails there.
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked for this test)", name=name)


sys.meta_path.insert(0, Blocked())
"""


@pytest.fixture(scope="session")
def without_tensorflow(tmp_path_factory) -> dict:
    """An environment for a subprocess in which `import tensorflow` (and Beam, which imports it
    for some transforms) fails as on a machine without it: a sitecustomize on PYTHONPATH."""
    folder = tmp_path_factory.mktemp("without_tensorflow")
    blocked = ("tensorflow", "tensorflow_text", "tensorflow_datasets", "apache_beam", "tf_keras")
    (folder / "sitecustomize.py").write_text(BLOCKER.format(blocked=blocked))
    path = os.pathsep.join(filter(None, (str(folder), os.environ.get("PYTHONPATH"))))
    return {**os.environ, "PYTHONPATH": path}


def checkpoint_variables(model_dir: Path) -> dict:
    """The model's and optimizer's tensors in a run's newest checkpoint, by name."""
    from launch import checkpoints

    path = checkpoints.latest(str(model_dir / "checkpoints"))
    assert path, f"{model_dir}: no checkpoint"
    tensors, _ = checkpoints.read_checkpoint(path)
    return {name: t for name, t in tensors.items() if name.startswith(("model/", "optimizer/"))}


def build(output: Path, *args: str) -> dict:
    """Run the real corpus pipeline (DirectRunner) and return its manifest."""
    import json

    from pipeline import build_corpus

    build_corpus.run(["--output", str(output), *args])
    return json.loads((output / "manifest.json").read_text())


def read_records(output: Path, split: str = "train") -> dict:
    """Every record of a split, parsed with the schema's fixed-length spec, stacked as numpy."""
    import json

    manifest = json.loads((output / "manifest.json").read_text())
    files = [output / s["file"] for s in manifest["splits"][split]["shards"]]
    build = manifest["build"]
    return parse_files(
        files, build["seq_len"], build["max_predictions"], word_starts="word_starts" in manifest["features"]
    )


def parse_files(files: list[Path], seq_len: int, max_predictions: int, word_starts: bool = False) -> dict:
    import numpy as np
    import tensorflow as tf

    from pipeline.schema import parsing_spec

    spec = parsing_spec(seq_len, max_predictions, word_starts)
    rows = {name: [] for name in spec}
    for record in tf.data.TFRecordDataset([str(f) for f in files]):
        parsed = tf.io.parse_single_example(record, spec)
        for name, value in parsed.items():
            rows[name].append(value.numpy())
    return {name: np.stack(values) if values else np.zeros((0,)) for name, values in rows.items()}


@pytest.fixture(scope="session")
def small_corpus(python_docs, botchan_vocab, tmp_path_factory) -> Path:
    """A real corpus for the reader and model tests: Python docs, seq_len 32, 5 predictions, 4 shards."""
    out = tmp_path_factory.mktemp("small_corpus")
    build(
        out,
        "--input", str(python_docs / "library" / "b*.rst.txt"),
        "--vocab", str(botchan_vocab),
        "--seq_len", "32",
        "--max_predictions", "5",
        "--dupe_factor", "1",
        "--num_shards", "4",
        "--validation_fraction", "0.1",
    )  # fmt: skip
    return out


@pytest.fixture(scope="session")
def mixture_corpora(python_docs, botchan_vocab, tmp_path_factory) -> Path:
    """Two real corpora for mixtures and phases, one vocab: docs/ (library b*, ~770 train rows at
    33) and more/ (library c*, ~8,600), each built at 33 and 45 tokens (seq33/, seq45/)."""
    from pipeline import build_corpus

    root = tmp_path_factory.mktemp("mixture")
    library = python_docs / "library"
    for name, pattern in (("docs", "b*"), ("more", "c*")):
        build_corpus.run([
            "--input", str(library / f"{pattern}.rst.txt"), "--output", str(root / name),
            "--vocab", str(botchan_vocab), "--seq_len", "33,45", "--dupe_factor", "1",
            "--num_shards", "2", "--doc_per_file", "--validation_fraction", "0.2",
        ])  # fmt: skip
    return root


@pytest.fixture(scope="session")
def tiny_config(small_corpus, tmp_path_factory) -> Path:
    """A BertConfig JSON with odd sizes (H 24, 3 heads, feed-forward 44) for the 32-token corpus."""
    from model.config import BertConfig
    from pipeline.schema import read_manifest

    vocab = read_manifest(str(small_corpus)).vocab.size
    config = BertConfig(
        vocab, hidden_size=24, num_layers=2, num_heads=3, intermediate_size=44, max_position=40
    )
    path = tmp_path_factory.mktemp("bert") / "bert_config.json"
    path.write_text(config.to_json())
    return path


def unmasked(rows: dict):
    """input_ids with masked_lm_ids put back at masked_lm_positions (weight-1 entries only: the
    padding predictions point at position 0 with id 0). A numpy oracle, independent of the reader."""
    ids = rows["input_ids"].copy()
    valid = rows["masked_lm_weights"] > 0
    for r in range(len(ids)):
        ids[r, rows["masked_lm_positions"][r][valid[r]]] = rows["masked_lm_ids"][r][valid[r]]
    return ids
