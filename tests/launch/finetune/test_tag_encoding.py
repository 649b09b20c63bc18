"""Windows and back: a tagger that outputs the gold labels gets every entity back character for
character, through windows much shorter than the texts, a piece at every window edge; the
entities the tokenizer cannot hold are the ones counted lost."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from launch.finetune.tag.data import Tagged, words_of
from launch.finetune.tag.encoding import encode_tagged, predicted_entities
from launch.finetune.tag.metrics import tag_figures
from launch.finetune.tag.schemes import bio_labels
from model.tasks import IGNORE
from pipeline.vocab import VocabFile

NAMES = {"PER": ["Kiyo", "Porcupine", "Red Shirt", "Madonna"], "LOC": ["Tokyo"]}


def botchan_examples(botchan, count: int) -> list[Tagged]:
    """Botchan's sentences that name someone, with every name marked (real text, real names)."""
    text = " ".join(botchan.read_text(encoding="utf-8").split())
    pattern = re.compile("|".join(re.escape(n) for names in NAMES.values() for n in names))
    kind = {name: k for k, names in NAMES.items() for name in names}
    found = []
    for sentence in re.split(r"(?<=[.!?]) ", text):
        spans = tuple((kind[m.group()], m.start(), m.end()) for m in pattern.finditer(sentence))
        if spans:
            found.append(Tagged(sentence, spans, words_of(sentence)))
    random.Random(0).shuffle(found)
    return found[:count]


@pytest.mark.parametrize("all_pieces", [False, True])
@pytest.mark.parametrize(("seq_len", "stride"), [(64, 30), (13, 3), (9, 1)])
def test_gold_labels_give_gold_entities_through_windows(
    botchan, botchan_wordpiece, seq_len, stride, all_pieces
):
    examples = botchan_examples(botchan, 61)
    labels = bio_labels(NAMES)
    vocab = VocabFile("wordpiece", botchan_wordpiece.read_bytes(), True).load()
    data = encode_tagged(examples, vocab, labels, seq_len, stride, all_pieces)
    assert data.features["input_ids"].shape == (len(data), seq_len)
    if seq_len < 20:
        assert len(data) > 3 * len(examples)  # most texts span several windows
    # labels sit only where the decoder reads
    assert ((data.labels != IGNORE) == data.decode_mask).all()
    assert data.lost == 0
    predicted = predicted_entities(data, np.where(data.labels == IGNORE, 0, data.labels), labels)
    assert [sorted(p) for p in predicted] == [sorted(e.entities) for e in examples]
    figures = tag_figures(examples, predicted, data.lost)
    assert figures["entity_f1"] == 1.0 and figures["entities"] == sum(len(e.entities) for e in examples)


def test_a_wrong_unit_costs_exactly_its_entity(botchan, botchan_wordpiece):
    examples = botchan_examples(botchan, 17)
    labels = bio_labels(NAMES)
    vocab = VocabFile("wordpiece", botchan_wordpiece.read_bytes(), True).load()
    data = encode_tagged(examples, vocab, labels, 16, 5)
    decoded = np.where(data.labels == IGNORE, 0, data.labels)
    window, position, _ = next(o for o in data.owners[0] if labels[decoded[o[0], o[1]]].startswith("B-"))
    decoded[window, position] = 0  # the first entity's B- is read as O: its I- (if any) opens it anew
    predicted = predicted_entities(data, decoded, labels)
    assert predicted[1:] == [list(e.entities) for e in examples[1:]]
    assert len(set(predicted[0]) ^ set(examples[0].entities)) >= 1
    assert tag_figures(examples, predicted, 0)["entity_recall"] < 1.0


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"crf": True}, "--crf goes with --task tag"),
        ({"label_all_pieces": True}, "--label_all_pieces goes with --task tag"),
        ({"task": "tag", "doc_stride": 30}, "--doc_stride 30: expected 1 to --seq_len - 3 \\(29\\)"),
        ({"task": "tag", "text_pair_field": "b"}, "--task tag reads its own files"),
        ({"doc_stride": 8}, "--doc_stride goes with --task tag or span"),
        ({"task": "span", "max_query_length": 29}, "--max_query_length 29: expected 1 to --seq_len - 4"),
        ({"task": "span", "max_query_length": 8, "n_best": 0}, "--n_best: expected >= 1"),
        ({"task": "tag", "crf": True, "crf_lr_multiplier": 0.0}, "--crf_lr_multiplier: expected > 0"),
    ],
)
def test_tagging_flag_mistakes_are_one_line(flags, message):
    from common.errors import ConfigError
    from launch.finetune.config import FinetuneConfig

    with pytest.raises(ConfigError, match=message):
        FinetuneConfig(train="t", validation="v", output="o", init_checkpoint="hf:r", seq_len=32, **flags)
