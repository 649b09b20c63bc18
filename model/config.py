"""`BertConfig`: the encoder's shape (the 2018 BERT block, or ModernBERT's), with the usual presets
and a JSON round trip."""

from __future__ import annotations

import dataclasses
import json

from common.errors import ConfigError, need

ARCHITECTURES = ("bert", "modernbert")


@dataclasses.dataclass(frozen=True)
class BertConfig:
    vocab_size: int  # rows of the token embedding (and of the tied MLM output projection)
    hidden_size: int = 128  # H: width of every token's vector
    num_layers: int = 2  # transformer blocks
    num_heads: int = 2  # attention heads; hidden_size must divide by it
    intermediate_size: int = 512  # feed-forward width, usually 4 H
    max_position: int = 512  # longest sequence the position embedding covers
    type_vocab_size: int = 2  # segment ids (A/B)
    dropout: float = 0.1  # on embeddings, block outputs and (unless attention_dropout) attention
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
    # "bert": the 2018 block (model/bert.py); "modernbert": ModernBERT's (model/modernbert.py):
    # pre-norm without biases, GeGLU, rotary positions, local and global attention, no segments.
    architecture: str = "bert"
    # modernbert only: the sliding window's width (a token sees those within local_attention // 2
    # on either side), one global layer every n (layer i is global when i % n == 0), and RoPE's
    # base on each kind of layer, as transformers' ModernBertConfig.
    local_attention: int = 128
    global_attn_every_n_layers: int = 3
    global_rope_theta: float = 160_000.0
    local_rope_theta: float = 10_000.0
    # On the attention probabilities; None: `dropout`. At 0 attention runs through
    # keras.ops.dot_product_attention as one fused kernel where the device has one. BERT's presets
    # keep 0.1: 0 (MosaicBERT's choice) lost a point of NER entity F1 on a tiny model, just beyond
    # the seeds' spread (docs/benchmarks/dropout.md); ModernBERT's have no dropout at all.
    attention_dropout: float | None = None
    # The tokenizer's tokens, where vocab_size pads past them (`padded`: a multiple of 128, as
    # Megatron and MosaicBERT pad, so the embedding and the MLM output are whole matmul tiles on a
    # GPU or TPU). Rows from tokenizer_size on are never read, and their MLM logits are masked, so
    # they never get probability. None: vocab_size, no padding.
    tokenizer_size: int | None = None

    def __post_init__(self):
        need(
            self.architecture in ARCHITECTURES,
            f"architecture: expected one of {', '.join(ARCHITECTURES)}, found {self.architecture!r}",
        )
        if self.modern:
            need(
                not self.pre_layer_norm,
                "pre_layer_norm: modernbert blocks are always pre-norm; leave it false",
            )
            for name in ("local_attention", "global_attn_every_n_layers"):
                need(getattr(self, name) >= 1, f"{name}: expected >= 1, found {getattr(self, name)}")
            need(
                (self.hidden_size // self.num_heads) % 2 == 0,
                f"hidden_size / num_heads: rotary positions need an even head width, found "
                f"{self.hidden_size // self.num_heads}",
            )
        need(
            self.hidden_act in ("gelu", "gelu_approximate"),
            f"hidden_act: expected gelu or gelu_approximate, found {self.hidden_act!r}",
        )
        need(
            self.tokenizer_size is None or 1 <= self.tokenizer_size <= self.vocab_size,
            f"tokenizer_size: expected 1..{self.vocab_size} (vocab_size) or null, "
            f"found {self.tokenizer_size}",
        )
        for name in ("dropout", "attention_dropout"):
            rate = getattr(self, name)
            need(rate is None or 0 <= rate < 1, f"{name}: expected a rate in [0, 1), found {rate}")
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
    def modern(self) -> bool:
        return self.architecture == "modernbert"

    @property
    def final_norm(self) -> bool:
        """A LayerNorm after the last block: pre-norm blocks leave their output unnormalised."""
        return self.pre_layer_norm or self.modern

    def is_global(self, layer: int) -> bool:
        """modernbert: layer `layer` attends over the whole row (else over its window)."""
        return layer % self.global_attn_every_n_layers == 0

    @property
    def tokens(self) -> int:
        """The tokenizer's tokens: the rows every input id and every MLM prediction falls in."""
        return self.vocab_size if self.tokenizer_size is None else self.tokenizer_size

    def padded(self, multiple: int) -> BertConfig:
        """This shape with its token rows rounded up to a multiple of `multiple` (1: as it is);
        the tokens stay `tokens`."""
        need(multiple >= 1, f"vocab multiple: expected >= 1, found {multiple}")
        rows = -(-self.vocab_size // multiple) * multiple
        if rows == self.vocab_size:
            return self
        return dataclasses.replace(self, vocab_size=rows, tokenizer_size=self.tokens)

    @property
    def attention_probs_dropout(self) -> float:
        """The dropout on attention probabilities: attention_dropout, else dropout."""
        return self.dropout if self.attention_dropout is None else self.attention_dropout

    @property
    def embedding_width(self) -> int:
        """E: the token, segment and position embeddings' width."""
        return self.embedding_size or self.hidden_size

    @classmethod
    def preset(cls, name: str, vocab_size: int, **overrides) -> BertConfig:
        need(name in PRESETS, f"unknown preset {name!r}; expected one of {', '.join(PRESETS)}")
        return cls(vocab_size=vocab_size, **{**PRESETS[name], **overrides})

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


def _bert(layers: int, hidden: int, heads: int) -> dict:
    return dict(num_layers=layers, hidden_size=hidden, num_heads=heads, intermediate_size=4 * hidden)


def _modern(layers: int, hidden: int, intermediate: int, heads: int) -> dict:
    # ModernBERT's: no dropout anywhere, LayerNorm epsilon 1e-5, 8,192 positions (RoPE has no
    # table, so this is only the longest row a corpus may have).
    shape = dict(num_layers=layers, hidden_size=hidden, num_heads=heads, intermediate_size=intermediate)
    return dict(shape, architecture="modernbert", dropout=0.0, layer_norm_epsilon=1e-5, max_position=8192)


# BERT's as google-research/bert's smaller models and BERT base/large; ModernBERT's base and large
# as answerdotai/ModernBERT-*, and the small ones at the BERT presets' widths and parameter counts
# (a ModernBERT block has 8.5 H^2 weights at GeGLU width 1.5 H, BERT's 12 H^2: 1.5x the layers).
PRESETS = {
    "tiny": _bert(2, 128, 2),
    "mini": _bert(4, 256, 4),
    "small": _bert(4, 512, 8),
    "medium": _bert(8, 512, 8),
    "base": _bert(12, 768, 12),
    "large": _bert(24, 1024, 16),
    "modern-tiny": _modern(3, 128, 192, 2),
    "modern-mini": _modern(6, 256, 384, 4),
    "modern-small": _modern(6, 512, 768, 8),
    "modern-base": _modern(22, 768, 1152, 12),
    "modern-large": _modern(28, 1024, 2624, 16),
}
