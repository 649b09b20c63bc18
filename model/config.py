"""`BertConfig`: the encoder's shape, with the usual presets and a JSON round trip."""

from __future__ import annotations

import dataclasses
import json

from common.errors import ConfigError, need


@dataclasses.dataclass(frozen=True)
class BertConfig:
    vocab_size: int  # rows of the token embedding (and of the tied MLM output projection)
    hidden_size: int = 128  # H: width of every token's vector
    num_layers: int = 2  # transformer blocks
    num_heads: int = 2  # attention heads; hidden_size must divide by it
    intermediate_size: int = 512  # feed-forward width, usually 4 H
    max_position: int = 512  # longest sequence the position embedding covers
    type_vocab_size: int = 2  # segment ids (A/B)
    dropout: float = 0.1  # on embeddings, attention probabilities and block outputs
    initializer_range: float = 0.02  # stddev of the truncated-normal initializer
    layer_norm_epsilon: float = 1e-12  # as google-research/bert
    pre_layer_norm: bool = False  # False: BERT's post-LN blocks; True: pre-LN (more stable deep)
    hidden_act: str = (
        "gelu"  # "gelu": exact erf (Hugging Face); "gelu_approximate": tanh (google-research/bert)
    )
    # E, the embeddings' width; None: hidden_size. When it differs, a dense layer projects the
    # embeddings to H before the first block (ELECTRA-small's 128 -> 256), and the MLM head maps
    # back to E for the output projection tied to the token embedding.
    embedding_size: int | None = None

    def __post_init__(self):
        need(
            self.hidden_act in ("gelu", "gelu_approximate"),
            f"hidden_act: expected gelu or gelu_approximate, found {self.hidden_act!r}",
        )
        need(
            self.embedding_size is None or self.embedding_size >= 1,
            f"embedding_size: expected >= 1 or null, found {self.embedding_size}",
        )
        for name in (
            "vocab_size",
            "hidden_size",
            "num_layers",
            "num_heads",
            "intermediate_size",
            "max_position",
        ):
            need(getattr(self, name) >= 1, f"{name}: expected >= 1, found {getattr(self, name)}")
        need(
            self.hidden_size % self.num_heads == 0,
            f"hidden_size {self.hidden_size} must be divisible by num_heads {self.num_heads}",
        )

    @property
    def embedding_width(self) -> int:
        """E: the token, segment and position embeddings' width."""
        return self.embedding_size or self.hidden_size

    @classmethod
    def preset(cls, name: str, vocab_size: int, **overrides) -> BertConfig:
        need(name in PRESETS, f"unknown preset {name!r}; expected one of {', '.join(PRESETS)}")
        layers, hidden, heads = PRESETS[name]
        return cls(
            vocab_size=vocab_size,
            hidden_size=hidden,
            num_layers=layers,
            num_heads=heads,
            intermediate_size=4 * hidden,
            **overrides,
        )

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> BertConfig:
        try:
            values = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"BertConfig JSON: not valid JSON ({e.msg} at line {e.lineno})") from None
        known = {f.name for f in dataclasses.fields(cls)}
        need(not set(values) - known, f"BertConfig JSON: unknown fields {sorted(set(values) - known)}")
        need("vocab_size" in values, "BertConfig JSON: vocab_size is required")
        return cls(**values)


# name: (layers, hidden, heads), as in google-research/bert's smaller models and BERT base/large.
PRESETS = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}
