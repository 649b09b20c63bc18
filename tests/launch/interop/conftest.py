"""What the format tests share: the Botchan WordPiece vocab, lower-cased as an uncased release's."""

import pytest

from pipeline.vocab import VocabFile


@pytest.fixture(scope="module")
def wordpiece(botchan_wordpiece) -> VocabFile:
    return VocabFile("wordpiece", botchan_wordpiece.read_bytes(), lower_case=True)
