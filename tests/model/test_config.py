import pytest

from model.config import PRESETS, BertConfig


def test_presets_and_json_round_trip():
    assert {
        name: (c.num_layers, c.hidden_size, c.num_heads)
        for name in PRESETS
        for c in [BertConfig.preset(name, vocab_size=37)]
    } == {  # fmt: skip
        "tiny": (2, 128, 2),
        "mini": (4, 256, 4),
        "small": (4, 512, 8),
        "medium": (8, 512, 8),
        "base": (12, 768, 12),
        "large": (24, 1024, 16),
        "modern-tiny": (3, 128, 2),
        "modern-mini": (6, 256, 4),
        "modern-small": (6, 512, 8),
        "modern-base": (22, 768, 12),
        "modern-large": (28, 1024, 16),
    }
    config = BertConfig.preset("mini", vocab_size=37, pre_layer_norm=True, dropout=0.0)
    assert BertConfig.from_json(config.to_json()) == config
    assert config.intermediate_size == 1024


def test_bad_configs_are_refused():
    with pytest.raises(ValueError, match="hidden_size 12 must be divisible by num_heads 5"):
        BertConfig(vocab_size=37, hidden_size=12, num_heads=5)
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        BertConfig.preset("huge", vocab_size=37)
    with pytest.raises(ValueError, match=r"unknown fields \['colour'\]"):
        BertConfig.from_json('{"vocab_size": 37, "colour": "red"}')
