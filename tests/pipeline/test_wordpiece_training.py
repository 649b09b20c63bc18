"""`--vocab_model_type wordpiece`: a Google-layout vocab.txt trained by `tokenizers`' WordPiece
trainer, the same bytes for the same sentences in every process (the trainer alone is not)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest

from pipeline import text
from pipeline.vocab import WordPieceVocab, train_wordpiece
from tests.conftest import REPO

TRAIN = """
import sys
from pathlib import Path
from pipeline.vocab import train_wordpiece
sentences = Path(sys.argv[1]).read_text(encoding="utf-8").splitlines()
sys.stdout.buffer.write(train_wordpiece(sentences, vocab_size=1500, lower_case=True))
"""


@pytest.fixture(scope="module")
def mixed_sentences(zh_sample, botchan, tmp_path_factory):
    """Chinese reviews and English prose, as sentences, in one file."""
    stats = Counter()
    chinese = text.document_sentences(text.normalize_line((zh_sample / "pos.txt").read_text("utf-8"), stats))
    english = text.document_sentences(text.normalize_line(botchan.read_text("utf-8"), stats))
    path = tmp_path_factory.mktemp("wp") / "sentences.txt"
    path.write_text("\n".join(chinese[:1500] + english[:1500]), encoding="utf-8")
    return path


@pytest.mark.slow
def test_same_sentences_same_bytes_in_every_process(mixed_sentences):
    runs = [
        subprocess.run([sys.executable, "-c", TRAIN, str(mixed_sentences)], cwd=REPO, capture_output=True,
                       check=True, timeout=120, env={**os.environ, "TOKENIZERS_PARALLELISM": parallel}).stdout
        for parallel in ("true", "true", "false")  # a Beam worker turns tokenizers' threads off
    ]  # fmt: skip
    sentences = mixed_sentences.read_text(encoding="utf-8").splitlines()
    here = [train_wordpiece(sentences, vocab_size=1500, lower_case=True) for _ in range(2)]
    assert runs[0] == runs[1] == runs[2] == here[0] == here[1]


def test_the_trained_vocab_has_bert_layout_and_every_character(mixed_sentences):
    sentences = mixed_sentences.read_text(encoding="utf-8").splitlines()
    data = train_wordpiece(sentences, vocab_size=4001, lower_case=True)
    tokens = data.decode("utf-8").splitlines()
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert len(tokens) == len(set(tokens)) == 4001
    # A size below the characters the text holds still keeps them all: no piece learned then.
    small = train_wordpiece(sentences, vocab_size=1500, lower_case=True).decode("utf-8").splitlines()
    alphabet = [t for t in small[5:] if len(t.removeprefix("##")) == 1]
    assert len(small) == 5 + len(alphabet) > 1500 and set(small) < set(tokens)
    assert not any(t != t.lower() for t in tokens[5:])  # learned lower-cased
    assert {"的", "书", "##s", "the"} <= set(tokens)
    vocab = WordPieceVocab(data, lower_case=True)
    encoded = vocab.encode(sentences)
    unk = sum(ids.count(vocab.special_ids["unk"]) for ids in encoded)
    assert unk == 0  # every character of the training text is in the vocab
    # Multi-character pieces were learned for English, and Chinese stays one character a token.
    assert sum(len(t) > 3 and not t.startswith("##") and t.isascii() for t in tokens) > 100
    hanzi = [t for t in tokens if any("\u4e00" <= c <= "\u9fff" for c in t)]
    assert len(hanzi) > 1000 and all(len(t) == 1 for t in hanzi)
