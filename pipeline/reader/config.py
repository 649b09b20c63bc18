"""What both readers read by, free of TensorFlow: `InputConfig` (how one input pipeline reads a
split), `DynamicMasking` (the rules a fresh mask is drawn by), the model's default input names and
the targets a batch can carry. The tf.data reader (`dataset.py`) and the numpy one (`batches.py`)
take the same config and give the same batches.
"""

from __future__ import annotations

import dataclasses

from common.errors import need
from pipeline import files
from pipeline.reader.shards import InputError
from pipeline.schema import Manifest

FEATURE_INPUTS = ("input_ids", "input_mask", "segment_ids", "document_ids", "masked_lm_positions")
# A model output's (label, sample weight), by the output's name (each reader builds them):
#   mlm  masked_lm_ids, weighted by masked_lm_weights
#   nsp  next_sentence_labels, weight 1 per row
#   rtd  ELECTRA's replaced-token detection: the original row, weighted by input_mask ([PAD] is
#        never scored)
TARGET_NAMES = ("mlm", "nsp", "rtd")

# A mixture's corpus per record comes in blocks: each block of MIXTURE_BLOCK records holds a fixed
# quota of each corpus, in a seeded order. The quotas make the records a corpus has given by a
# block's start a closed form, so a resumed mixture seeks each corpus (`mixture_starts`) instead
# of replaying the choices.
MIXTURE_BLOCK = 4096


@dataclasses.dataclass(frozen=True)
class DynamicMasking:
    """What drawing a fresh mask needs from the vocab: `for_corpus(manifest)` takes the corpus's
    own vocab and masking settings, `from_vocab_file` any vocab file."""

    mask_id: int
    is_special: tuple[bool, ...]  # per token id: never masked, never drawn as a random token
    starts_word: tuple[bool, ...] | None  # per token id; None: mask single pieces
    masked_lm_prob: float = 0.15
    # Whole-word units from the records' `word_starts` (a segmented corpus) instead of starts_word.
    stored_units: bool = False
    breaks_units: tuple[bool, ...] = ()  # per token id: ends any unit (MaskingTables.breaks_units)

    @classmethod
    def from_vocab(cls, vocab_file, *, whole_word: bool, masked_lm_prob: float = 0.15) -> DynamicMasking:
        from pipeline.masking import MaskingTables

        tables = MaskingTables.from_vocab(vocab_file.load())
        # A CJK piece is a word of its own, and so is the piece after one (as the corpus builder).
        starts = tables.starts_word | tables.is_cjk
        return cls(
            mask_id=tables.mask_id,
            is_special=tuple(tables.is_special.tolist()),
            breaks_units=tuple(tables.breaks_units.tolist()),
            starts_word=tuple(starts.tolist()) if whole_word else None,
            masked_lm_prob=masked_lm_prob,
        )

    @classmethod
    def from_vocab_file(cls, path: str, *, whole_word: bool, masked_lm_prob: float = 0.15) -> DynamicMasking:
        """A sentencepiece .model or a WordPiece .txt, by its name."""
        from pipeline.vocab import VocabFile, kind_of

        vocab_file = VocabFile(kind_of(path), files.read_file(path))
        return cls.from_vocab(vocab_file, whole_word=whole_word, masked_lm_prob=masked_lm_prob)

    @classmethod
    def for_corpus(cls, manifest: Manifest, masked_lm_prob: float | None = None) -> DynamicMasking:
        """The corpus's vocab (checked against its manifest), whole-word setting and masking rate
        (or `masked_lm_prob`: one that needs more positions than the records hold is an
        `InputError`); a segmented corpus's units come from its records (`word_starts`)."""
        from pipeline.config import derived_max_predictions
        from pipeline.vocab import VocabFile

        rate = manifest.masked_lm_prob if masked_lm_prob is None else masked_lm_prob
        needed = derived_max_predictions(manifest.seq_len, rate)
        if masked_lm_prob is not None and needed > manifest.max_predictions:
            raise InputError(
                f"--dynamic_masked_lm_prob {rate}: needs {needed} masked positions per row at seq_len "
                f"{manifest.seq_len}, {manifest.folder} stores {manifest.max_predictions}; rebuild it "
                f"with --max_predictions {needed} (or --masked_lm_prob {rate}) or lower the rate"
            )
        masking = cls.from_vocab(
            VocabFile.of_corpus(manifest), whole_word=manifest.whole_word_mask, masked_lm_prob=rate
        )
        if manifest.whole_word_mask and manifest.word_starts:
            masking = dataclasses.replace(masking, starts_word=None, stored_units=True)
        return masking


@dataclasses.dataclass(frozen=True)
class InputConfig:
    """How one input pipeline reads a split (the manifest says what the records hold)."""

    per_replica_batch_size: int  # examples per batch of this pipeline: one replica's share of a step
    training: bool = True  # shuffled and repeated forever; False: every record once, in file order
    seed: int = 0  # shard order, shuffles and dynamic masks all derive from it
    dynamic_masking: DynamicMasking | None = None  # a fresh mask per read (RoBERTa), else the stored one
    shuffle_window: int = 10_000  # training: records permuted together (`order.seekable_records`)
    cycle_length: int = 8  # evaluation: shards read at once
    # The model's input names (None: FEATURE_INPUTS) and output names (None: mlm, and nsp for pairs).
    features: tuple[str, ...] | None = None
    targets: tuple[str, ...] | None = None

    def __post_init__(self):
        for name in ("per_replica_batch_size", "shuffle_window", "cycle_length"):
            value = getattr(self, name)
            need(value >= 1, f"InputConfig.{name}: expected >= 1, found {value}", InputError)
        unknown = sorted(set(self.targets or ()) - set(TARGET_NAMES))
        need(
            not unknown,
            f"InputConfig.targets: no labels for {unknown}; known: {sorted(TARGET_NAMES)}",
            InputError,
        )

    def names(self, manifest: Manifest) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(features, targets) a batch of `manifest`'s records carries; an `InputError` when the
        records lack one."""
        features = self.features or FEATURE_INPUTS
        targets = self.targets or (("mlm", "nsp") if manifest.pairs else ("mlm",))
        missing = sorted(set(features) - set(manifest.features))
        if missing or ("nsp" in targets and not manifest.pairs):
            found = missing or ["nsp (a corpus without sentence pairs)"]
            raise InputError(
                f"{manifest.path}: the model reads {', '.join(found)}, which its records do not hold"
            )
        return features, targets


def check_request(manifests: list[Manifest], config: InputConfig, rates, skip_batches: int) -> None:
    """What either reader refuses before reading, each a one-line `InputError`: segmenter-unit
    masks without word_starts records, a position in an evaluation pass, a mixture that is not
    for training or lacks one rate per corpus."""
    first, masking = manifests[0], config.dynamic_masking
    if masking is not None and masking.stored_units and not first.word_starts:
        raise InputError(
            f"{first.path}: dynamic masking by segmenter units needs records with word_starts; "
            "rebuild the corpus with --word_segmenter"
        )
    need(
        config.training or not skip_batches,
        "make_dataset: skip_batches is for training streams; evaluation reads every record once",
        InputError,
    )
    if len(manifests) > 1:
        need(
            config.training,
            "make_dataset: a mixture is read for training; evaluate each corpus alone",
            InputError,
        )
        need(
            rates is not None and len(rates) == len(manifests),
            "make_dataset: one rate per corpus",
            InputError,
        )
