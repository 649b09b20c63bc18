"""`CorpusConfig`: every parameter of a corpus build, validated once, written into the manifest.

Each field's help is its flag's help in `python -m pipeline.build_corpus --help` (common/cli.py).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from common.cli import field
from common.errors import need
from pipeline.curation.minhash import MAX_SHINGLE_SIZE
from pipeline.curation.quality import FILTERS as QUALITY_FILTERS
from pipeline.curation.quality import Thresholds
from pipeline.masking import MAX_MASKED_LM_PROB
from pipeline.text import codec_name


def _patterns(value: str) -> tuple[str, ...]:
    return tuple(p for p in value.split(",") if p)


def _ints(value: str) -> tuple[int, ...]:
    """ "128" or "128,512" (argparse turns a ValueError into a usage error naming the flag)."""
    return tuple(int(v) for v in value.split(","))


def derived_max_predictions(seq_len: int, masked_lm_prob: float) -> int:
    """BERT's masked positions per row for a masking rate, rounded up to a multiple of 4 (20 at
    128 and 80 at 512 for 15 %)."""
    return math.ceil(seq_len * masked_lm_prob / 4) * 4


def _folder(value: str) -> str:
    return value.rstrip("/")


def _known_encoding(name: str) -> bool:
    try:
        codec_name(name)
    except LookupError:
        return False
    return True


@dataclasses.dataclass(frozen=True)
class CorpusConfig:
    input_patterns: tuple[str, ...] = field(
        (), "GLOB[,GLOB...] of input files, local or gs://; .gz/.bz2 decompressed by extension",
        flag="input", parse=_patterns, metavar="GLOB[,GLOB...]",
    )  # fmt: skip
    output_dir: str = field(None, "folder for the shards, vocab and manifest.json (local or gs://)",
                            flag="output", parse=_folder, required=True)  # fmt: skip
    format: Literal["text", "jsonl", "tfds"] = field(
        "text", "text: a sentence or paragraph per line, blank line between documents; jsonl; tfds"
    )
    doc_per_file: bool = field(
        False, "text: a whole file is one document (blank lines only separate paragraphs)"
    )
    text_field: str = field("text", "jsonl / tfds: the field that holds a document's text")
    tfds_name: str | None = field(None, "tfds: dataset name (optionally name:version)")
    tfds_split: str = field("train", "tfds: split to read")
    tfds_data_dir: str | None = field(None, "tfds: where the prepared dataset lives")
    vocab: str | None = field(
        None,
        "an existing vocab with BERT's specials: a sentencepiece .model, Google's WordPiece vocab.txt, or a "
        "Hugging Face tokenizer.json (ModernBERT's BPE)",
    )
    do_lower_case: bool = field(
        False,
        "WordPiece (given vocab.txt or --vocab_model_type wordpiece): lower-case and strip accents "
        "(a release folder's tokenizer_config.json says so itself)",
    )
    extend_vocab: int = field(
        0,
        "with --vocab (a WordPiece vocab.txt, a sentencepiece unigram model or a release folder): add up to "
        "N tokens learned from this text, into its [unusedN] slots first, then appended (WoBERT's); with "
        "--extend_min_count, at most N (more is an error)",
    )
    extend_min_count: int = field(
        0,
        "with --vocab: add every token the domain's sample uses at least K times that the vocab lacks (a "
        "script it cuts to [UNK], such as Chinese for an English release), however many",
    )
    vocab_size: int | None = field(None, "instead of --vocab: train a vocab of this size")
    vocab_model_type: Literal["unigram", "bpe", "wordpiece"] = field(
        "unigram",
        "trained vocab: sentencepiece unigram or bpe (vocab.model), or a Google-layout WordPiece vocab.txt "
        "(every CJK character a token of its own)",
    )
    vocab_sample_sentences: int = field(
        300_000, "sentences (those with the smallest seeded hash) the vocab is trained on"
    )
    seq_len: int = field(
        128,
        "tokens per instance, [CLS] and [SEP]s included; several (128,512) write OUTPUT/seq128/, "
        "OUTPUT/seq512/ from one tokenisation pass, each a complete corpus",
        parse=_ints, metavar="N[,N...]",
    )  # fmt: skip
    max_predictions: int | None = field(
        None,
        "masked positions stored per instance (static), one per --seq_len; default: "
        "ceil(seq_len x masked_lm_prob / 4) x 4 (20 at 128, 80 at 512)",
        parse=_ints, metavar="N[,N...]",
    )  # fmt: skip
    masked_lm_prob: float = field(0.15, f"share of non-special tokens to mask, up to {MAX_MASKED_LM_PROB}")
    whole_word_mask: bool = field(False, "mask all pieces of a word together")
    word_segmenter: str = field(
        "none",
        "whole words from a segmenter: none (pieces' own word marks), jieba, or MODULE:FUNCTION "
        "(a sentence -> its list of words); needs --whole_word_mask",
        metavar="none|jieba|MODULE:FUNCTION",
    )
    segmenter_dict: str | None = field(
        None, "jieba: a user dictionary (jieba's format: word [freq] [tag] per line), local or gs://"
    )
    mode: Literal["full_sentences", "segment_pair"] = field(
        "full_sentences", "full_sentences: documents packed back to back (RoBERTa); segment_pair: A/B pairs"
    )
    pair_task: Literal["nsp", "sop"] | None = field(
        None, "segment_pair: next-sentence or sentence-order prediction (flags --nsp / --sop)"
    )
    short_seq_prob: float = field(0.1, "segment_pair: chance of a shorter target length (as BERT)")
    dupe_factor: int = field(5, "times the train split is re-packed and re-masked with new seeds")
    validation_fraction: float = field(0.05, "share of documents (by content hash) held out for validation")
    num_shards: int = field(0, "train shards; 0: one per --records_per_shard records")
    num_validation_shards: int = field(0, "validation shards; 0: automatic, as for train")
    records_per_shard: int = field(20_000, "target for automatic shard counts (bounds a shard's memory)")
    group_tokens: int = field(
        1 << 20,
        "tokens per packing group, cut from the input as it is read: NSP's random next segments "
        "come from the group; bounds a worker's memory per step",
    )
    max_line_bytes: int = field(1 << 20, "longer lines are cut into pieces of this size (and counted)")
    max_document_chars: int = field(1 << 20, "longer documents are split (and counted)")
    encoding: str = field(
        "utf-8",
        "encoding of input files without a byte-order mark, e.g. gb18030, big5, utf-16-le "
        "(a UTF-8/16/32 BOM always decides)",
    )
    on_bad_file: Literal["fail", "skip"] = field(
        "fail", "a binary or unreadable file: stop with an error naming it, or skip it and count it"
    )
    near_dedup_threshold: float = field(
        0.0,
        "near-duplicates: documents whose shingles' Jaccard similarity is at least this are one "
        "cluster, and each cluster keeps one (MinHash LSH; FineWeb uses about 0.8); 0: off",
    )
    minhash_bands: int = field(14, "near-dedup: LSH bands (FineWeb's 14)")
    minhash_rows: int = field(8, "near-dedup: MinHash values per band (FineWeb's 8)")
    shingle_unit: Literal["words", "chars", "segmenter"] = field(
        "words",
        "near-dedup shingles are n-grams of: words (split at spaces), chars (scripts written without "
        "spaces), or the --word_segmenter's words",
    )
    shingle_size: int = field(5, "near-dedup: units per shingle (FineWeb: 5 words)")
    quality_filters: tuple[str, ...] = field(
        (), "document quality rules: gopher, c4, or gopher,c4 (docs/corpus.md lists each rule)",
        parse=_patterns, metavar="gopher[,c4]",
    )  # fmt: skip
    quality_thresholds: str | None = field(
        None, "override quality rules' limits: NAME=VALUE[,NAME=VALUE...] or a .json file of them "
        "(names: pipeline/curation/quality.py Thresholds)", metavar="NAME=VALUE,...|FILE.json",
    )  # fmt: skip
    languages: tuple[str, ...] = field(
        (), "keep only documents identified (CLD2) as one of these ISO 639-1 codes, e.g. en,zh",
        parse=_patterns, metavar="CODE[,CODE...]",
    )  # fmt: skip
    min_language_score: float = field(
        0.0, "--languages: also remove documents with less than this share of their text in their language"
    )
    filter_processes: int = field(
        -1,
        "run the language and quality rules on this many spawned processes (0: in the build's "
        "own process, CLD2 on a thread; -1: one per core, up to 4, where the build's own process runs "
        "its steps, as the DirectRunner does in memory, and 0 on a runner's workers)",
    )
    curation_samples: int = field(
        20, "removed documents kept per reason in OUTPUT/curation/ (a seeded sample) for review"
    )
    seed: int = field(12345, "every random choice derives from this and a content hash")

    def __post_init__(self):
        need(
            self.format in ("text", "jsonl", "tfds"),
            f"--format: expected text|jsonl|tfds, found {self.format}",
        )
        need(bool(self.output_dir), "--output: required (a folder, local or gs://)")
        if self.format == "tfds":
            need(bool(self.tfds_name), "--format tfds needs --tfds_name")
        else:
            need(bool(self.input_patterns), f"--format {self.format} needs --input GLOB[,GLOB...]")
        need(
            (self.vocab is None) != (self.vocab_size is None),
            "give exactly one of --vocab PATH (.model, WordPiece .txt or tokenizer.json) or --vocab_size N",
        )
        wordpiece = (
            not (self.vocab or "").endswith((".model", ".json"))
            if self.vocab
            else (self.vocab_model_type == "wordpiece")
        )
        need(self.extend_vocab >= 0, f"--extend_vocab: expected >= 0, found {self.extend_vocab}")
        need(self.extend_min_count >= 0, f"--extend_min_count: expected >= 0, found {self.extend_min_count}")
        need(
            not self.extending or (self.vocab and not self.vocab.endswith(".json")),
            "--extend_vocab extends a given vocab: --vocab vocab.txt, a sentencepiece .model or a release "
            "folder",
        )
        need(
            not self.do_lower_case or wordpiece,
            "--do_lower_case applies to WordPiece (--vocab vocab.txt or --vocab_model_type wordpiece); "
            "sentencepiece normalizes itself",
        )
        need(
            self.word_segmenter == "none" or self.whole_word_mask,
            f"--word_segmenter {self.word_segmenter} needs --whole_word_mask (it only decides masking units)",
        )
        need(
            self.segmenter_dict is None or self.word_segmenter == "jieba",
            "--segmenter_dict is a jieba user dictionary: it needs --word_segmenter jieba",
        )
        need(
            _known_encoding(self.encoding),
            f"--encoding: unknown encoding {self.encoding!r} (Python codec names: gb18030, big5, ...)",
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
            0.0 < self.masked_lm_prob <= MAX_MASKED_LM_PROB,
            f"--masked_lm_prob: expected in (0, {MAX_MASKED_LM_PROB}], found {self.masked_lm_prob}",
        )
        if self.max_predictions is None:  # derived, and recorded so in the manifest
            object.__setattr__(
                self, "max_predictions", derived_max_predictions(self.seq_len, self.masked_lm_prob)
            )
        need(
            1 <= self.max_predictions <= self.seq_len,
            f"--max_predictions: expected 1..{self.seq_len}, found {self.max_predictions}",
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
        need(self.group_tokens >= 1, "--group_tokens: expected >= 1")
        need(self.max_line_bytes >= 16, "--max_line_bytes: expected >= 16")
        need(self.max_document_chars >= 16, "--max_document_chars: expected >= 16")
        need(
            self.on_bad_file in ("fail", "skip"),
            f"--on_bad_file: expected fail|skip, found {self.on_bad_file}",
        )
        need(
            self.near_dedup_threshold == 0.0 or 0.0 < self.near_dedup_threshold < 1.0,
            f"--near_dedup_threshold: expected 0 (off) or in (0, 1), found {self.near_dedup_threshold}",
        )
        need(  # numpy's seed sequences and rensa's hash functions take unsigned seeds
            0 <= self.seed < 2**63, f"--seed: expected 0 <= seed < 2**63, found {self.seed}"
        )
        need(
            self.minhash_bands >= 1 and self.minhash_rows >= 1,
            f"--minhash_bands/--minhash_rows: expected >= 1, found {self.minhash_bands}/{self.minhash_rows}",
        )
        need(
            1 <= self.shingle_size <= MAX_SHINGLE_SIZE,
            f"--shingle_size: expected 1..{MAX_SHINGLE_SIZE}, found {self.shingle_size}",
        )
        need(
            self.shingle_unit in ("words", "chars", "segmenter"),
            f"--shingle_unit: expected words|chars|segmenter, found {self.shingle_unit}",
        )
        need(
            self.shingle_unit != "segmenter" or self.word_segmenter != "none",
            "--shingle_unit segmenter needs --word_segmenter (jieba or MODULE:FUNCTION)",
        )
        unknown = sorted(set(self.quality_filters) - set(QUALITY_FILTERS))
        need(not unknown, f"--quality_filters: unknown {','.join(unknown)}; expected gopher, c4 or gopher,c4")
        need(
            self.quality_thresholds is None or bool(self.quality_filters),
            "--quality_thresholds needs --quality_filters",
        )
        if self.quality_thresholds and not self.quality_thresholds.endswith(".json"):
            try:  # a file is read, and checked, when the build starts
                Thresholds.parse(self.quality_thresholds)
            except ValueError as e:
                need(False, f"--quality_thresholds: {e}")
        need(
            all(code.isalpha() and code.islower() and 2 <= len(code) <= 3 for code in self.languages),
            f"--languages: expected ISO 639-1 codes like en,zh, found {','.join(self.languages)}",
        )
        need(
            0.0 <= self.min_language_score <= 1.0,
            f"--min_language_score: expected in [0, 1], found {self.min_language_score}",
        )
        need(self.min_language_score == 0.0 or bool(self.languages), "--min_language_score needs --languages")
        need(self.curation_samples >= 0, f"--curation_samples: expected >= 0, found {self.curation_samples}")
        need(
            self.filter_processes >= -1,
            f"--filter_processes: expected >= 0, or -1 (automatic), found {self.filter_processes}",
        )

    @property
    def extending(self) -> bool:
        """--extend_vocab or --extend_min_count: the given vocab gains the domain's tokens."""
        return self.extend_vocab > 0 or self.extend_min_count > 0

    @property
    def curating(self) -> bool:
        """Any curation stage is on: the graph gains them, and the manifest's counts can be nonzero."""
        return self.near_dedup_threshold > 0 or bool(self.quality_filters) or bool(self.languages)

    def to_json_dict(self) -> dict:
        return dataclasses.asdict(self)


def per_length(values: dict) -> list[CorpusConfig]:
    """The builds one command line asks for: `values` are CorpusConfig's fields as parsed, with
    `seq_len` and `max_predictions` tuples (`--seq_len 128,512 --max_predictions 20,80`). One length
    writes to --output itself; several write OUTPUT/seq{N}/ each, over the same documents and vocab."""
    lengths = tuple(values["seq_len"]) if isinstance(values["seq_len"], tuple) else (values["seq_len"],)
    predictions = values.get("max_predictions")
    if predictions is None:
        predictions = (None,) * len(lengths)
    elif not isinstance(predictions, tuple):
        predictions = (predictions,)
    need(
        len(predictions) == len(lengths),
        f"--max_predictions: {len(predictions)} values for {len(lengths)} --seq_len values; give one "
        "per length or none (derived from --masked_lm_prob)",
    )
    need(
        len(set(lengths)) == len(lengths),
        f"--seq_len {','.join(map(str, lengths))}: each length at most once",
    )
    output = _folder(values["output_dir"] or "")
    return [
        CorpusConfig(**{
            **values,
            "seq_len": length,
            "max_predictions": p,
            "output_dir": f"{output}/{length_folder(length)}" if len(lengths) > 1 and output else output,
        })
        for length, p in zip(lengths, predictions, strict=True)
    ]  # fmt: skip


def length_folder(seq_len: int) -> str:
    """Where a multi-length build writes the corpus of one length, under --output."""
    return f"seq{seq_len}"
