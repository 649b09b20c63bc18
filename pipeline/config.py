"""`CorpusConfig`: every parameter of a corpus build, validated once, written into the manifest."""

from __future__ import annotations

import dataclasses
from typing import Literal


@dataclasses.dataclass(frozen=True)
class CorpusConfig:
    input_patterns: tuple[str, ...]  # file globs, local or gs://; .gz/.bz2 decompressed by extension
    output_dir: str  # where shards, the vocab and manifest.json go (local or gs://)
    format: Literal["text", "jsonl", "tfds"] = "text"  # text: a line per sentence, blank line ends a doc
    doc_per_file: bool = False  # text: one document per file, blank lines are paragraph breaks
    text_field: str = "text"  # jsonl / tfds: the field that holds a document's text
    tfds_name: str | None = None  # tfds: dataset name (optionally name:version)
    tfds_split: str = "train"  # tfds: split to read
    tfds_data_dir: str | None = None  # tfds: where the prepared dataset lives
    vocab: str | None = None  # an existing vocab with BERT's specials: sentencepiece .model or WordPiece .txt
    do_lower_case: bool = False  # WordPiece vocab.txt: lower case and strip accents (uncased BERT)
    vocab_size: int | None = None  # or: train a sentencepiece model of this size in the same run
    vocab_model_type: Literal["unigram", "bpe"] = "unigram"  # sentencepiece algorithm when training
    vocab_sample_sentences: int = 300_000  # sentences (smallest seeded hash) the vocab is trained on
    seq_len: int = 128  # tokens per instance, [CLS] and [SEP]s included
    max_predictions: int = 20  # masked positions stored per instance (static)
    masked_lm_prob: float = 0.15  # fraction of non-special tokens to mask
    whole_word_mask: bool = False  # mask all pieces of a word together
    mode: Literal["full_sentences", "segment_pair"] = "full_sentences"  # packing vs A/B pairs
    pair_task: Literal["nsp", "sop"] | None = None  # segment_pair: next-sentence or sentence-order
    short_seq_prob: float = 0.1  # segment_pair: chance of a shorter target length (as BERT)
    dupe_factor: int = 5  # times each document is re-masked (and re-packed) with a new seed
    validation_fraction: float = 0.05  # share of documents (by content hash) held out
    num_shards: int = 0  # train shards; 0 = one per records_per_shard estimated instances
    num_validation_shards: int = 0  # validation shards; 0 = automatic as above
    records_per_shard: int = 20_000  # target for automatic shard counts (bounds a shard's memory)
    group_tokens: int = 1 << 19  # tokens per packing group: bounds a worker's memory per step
    max_line_bytes: int = 1 << 20  # longer lines are cut into pieces of this size (and counted)
    max_document_chars: int = 1 << 20  # longer documents are split (and counted)
    on_bad_file: Literal["fail", "skip"] = "fail"  # unreadable or binary file: stop, or skip and count
    seed: int = 12345  # every random choice derives from this and a content hash

    def __post_init__(self):
        def need(ok: bool, message: str):
            if not ok:
                raise ValueError(message)

        need(
            self.format in ("text", "jsonl", "tfds"),
            f"--format: expected text|jsonl|tfds, found {self.format}",
        )
        if self.format == "tfds":
            need(bool(self.tfds_name), "--format tfds needs --tfds_name")
        else:
            need(bool(self.input_patterns), f"--format {self.format} needs --input GLOB[,GLOB...]")
        need(
            (self.vocab is None) != (self.vocab_size is None),
            "give exactly one of --vocab PATH (.model or WordPiece .txt) or --vocab_size N",
        )
        need(
            not self.do_lower_case or (self.vocab or "").endswith(".txt"),
            "--do_lower_case applies to a WordPiece --vocab vocab.txt (sentencepiece normalizes itself)",
        )
        need(
            self.vocab_size is None or self.vocab_size >= 16,
            f"--vocab_size: expected >= 16, found {self.vocab_size}",
        )
        need(
            self.seq_len >= 5,
            f"--seq_len: expected >= 5 ([CLS] A [SEP] B [SEP]), found {self.seq_len}",
        )
        need(
            1 <= self.max_predictions <= self.seq_len,
            f"--max_predictions: expected 1..{self.seq_len}, found {self.max_predictions}",
        )
        need(
            0.0 < self.masked_lm_prob < 1.0,
            f"--masked_lm_prob: expected in (0, 1), found {self.masked_lm_prob}",
        )
        need(self.mode in ("full_sentences", "segment_pair"), f"--mode: unknown {self.mode}")
        if self.mode == "segment_pair":
            need(self.pair_task in ("nsp", "sop"), "--mode segment_pair needs --nsp or --sop")
        else:
            need(self.pair_task is None, f"--{self.pair_task} needs --mode segment_pair")
        need(
            0.0 <= self.short_seq_prob <= 1.0,
            f"--short_seq_prob: expected in [0, 1], found {self.short_seq_prob}",
        )
        need(self.dupe_factor >= 1, f"--dupe_factor: expected >= 1, found {self.dupe_factor}")
        need(
            0.0 <= self.validation_fraction < 1.0,
            f"--validation_fraction: expected in [0, 1), found {self.validation_fraction}",
        )
        need(self.num_shards >= 0 and self.num_validation_shards >= 0, "--num_shards: expected >= 0")
        need(self.records_per_shard >= 1, "--records_per_shard: expected >= 1")
        need(self.max_line_bytes >= 16, "--max_line_bytes: expected >= 16")
        need(self.max_document_chars >= 16, "--max_document_chars: expected >= 16")
        need(
            self.on_bad_file in ("fail", "skip"),
            f"--on_bad_file: expected fail|skip, found {self.on_bad_file}",
        )

    def to_json_dict(self) -> dict:
        return dataclasses.asdict(self)
