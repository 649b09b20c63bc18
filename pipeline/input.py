"""The tf.data input function: a corpus split -> static-shape batches that `model.fit` consumes.

    manifest = read_manifest("out/corpus")
    ds = make_dataset(manifest, "train", InputConfig(per_replica_batch_size=32, seed=1))

Elements are `(features, labels, sample_weights)`, by default a BERT's:
  features        input_ids, input_mask, segment_ids, document_ids (B, T); masked_lm_positions (B, P)
  labels          {"mlm": masked_lm_ids (B, P)}, plus {"nsp": next_sentence_labels (B, 1)} for pairs
  sample_weights  {"mlm": masked_lm_weights (B, P)}, plus {"nsp": ones (B,)}
A model with other inputs or outputs names them (`InputConfig.features`, `.targets`): any of the
records' features; targets from `TARGETS` (ELECTRA's "rtd": the original row, weighted by
input_mask).
Every shape is fully defined: TPUs (and XLA generally) compile one program per shape.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from common.errors import BertbeamError, need
from pipeline import schema
from pipeline.schema import Manifest

FEATURE_INPUTS = ("input_ids", "input_mask", "segment_ids", "document_ids", "masked_lm_positions")


class InputError(BertbeamError):
    """The data cannot feed this model; the message is one line naming the cause."""


@dataclasses.dataclass(frozen=True)
class DynamicMasking:
    """What drawing a fresh mask in the graph needs from the vocab: `for_corpus(manifest)` takes
    the corpus's own vocab and masking settings, `from_vocab_file` any vocab file."""

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

        with tf.io.gfile.GFile(path, "rb") as f:
            vocab_file = VocabFile(kind_of(path), f.read())
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
    shuffle_window: int = 10_000  # training: records permuted together (`_seekable_records`)
    cycle_length: int = 8  # evaluation: shards read at once
    # The model's input names (None: FEATURE_INPUTS) and output names (None: mlm, and nsp for pairs).
    features: tuple[str, ...] | None = None
    targets: tuple[str, ...] | None = None

    def __post_init__(self):
        for name in ("per_replica_batch_size", "shuffle_window", "cycle_length"):
            value = getattr(self, name)
            need(value >= 1, f"InputConfig.{name}: expected >= 1, found {value}", InputError)
        unknown = sorted(set(self.targets or ()) - set(TARGETS))
        need(
            not unknown, f"InputConfig.targets: no labels for {unknown}; known: {sorted(TARGETS)}", InputError
        )


def shard_files(
    manifest: Manifest, split: str, input_context: tf.distribute.InputContext | None = None
) -> list[str]:
    """The shards of `split` this input pipeline reads: all of them, or its share on a pod or
    across workers (every `num_input_pipelines`-th, from its id)."""
    files = manifest.files(split)
    if not files:
        raise InputError(f"{manifest.path}: the {split} split has no shards; rebuild with a larger corpus")
    if input_context is None or input_context.num_input_pipelines == 1:
        return files
    n, i = input_context.num_input_pipelines, input_context.input_pipeline_id
    if len(files) < n:
        raise InputError(
            f"{manifest.folder}/{split}-*: {len(files)} shards for {n} input pipelines; "
            f"rebuild with --num_shards >= {n}"
        )
    return files[i::n]


def check_shards(manifest: Manifest, split: str, own_files: list[str]) -> None:
    """The shards against the manifest, before the first step: a missing shard (one listing of the
    folder) or a truncated or replaced one (its size; only this pipeline's share is stat-ed) is
    named. A corrupt byte inside a shard shows only on read: see `naming_bad_shards`."""
    shards = manifest.split(split).shards
    listed = {path.rsplit("/", 1)[-1] for path in tf.io.gfile.glob(f"{manifest.folder}/{split}-*")}
    for shard in shards:
        if shard.file not in listed:
            raise InputError(
                f"{manifest.folder}/{shard.file}: in the manifest but missing; rebuild the corpus"
            )
    sizes = {shard.file: shard.bytes for shard in shards}
    for path in own_files:
        want = sizes[path.rsplit("/", 1)[-1]]
        if (found := tf.io.gfile.stat(path).length) != want:
            raise InputError(
                f"{path}: {found} bytes, the manifest says {want}; truncated or replaced, rebuild the corpus"
            )


def make_dataset(
    manifest: Manifest | Sequence[Manifest],
    split: str,
    config: InputConfig,
    *,
    rates: Sequence[float] | None = None,
    input_context: tf.distribute.InputContext | None = None,
    skip_batches: int = 0,
    on_batch=None,
) -> tf.data.Dataset:
    """A dataset of static-shape batches of `split` for `model.fit`; see the module docstring.

    `manifest` is one corpus, or several that agree on vocab, shapes and features (a mixture,
    `launch/data.py` checks them), for training: each record's corpus is drawn at `rates` (per
    example, seeded: `_corpus_choices`). Evaluation reads one corpus per dataset.

    The shards are checked against the manifest first (missing, truncated or replaced: a one-line
    `InputError`). Deterministic for a given seed; its iterator can be saved with
    `tf.train.Checkpoint(iterator=...)`.

    `skip_batches` resumes a training stream: it starts at that batch by arithmetic over the
    manifests' per-shard record counts (`_seekable_records`, `_corpus_choices`), reading at most one
    shuffle window and one shard's head, whatever the position; what follows is exactly what an
    uninterrupted iterator would give (masks included: a dynamic mask is seeded by the batch's
    index in the stream).
    `on_batch(index, parsed_batch)`, if given, runs on every batch in order (a debugging trace).
    """
    manifests = [manifest] if isinstance(manifest, Manifest) else list(manifest)
    first = manifests[0]
    spec = schema.parsing_spec(first.seq_len, first.max_predictions, first.word_starts)
    seed, masking, batch_size = config.seed, config.dynamic_masking, config.per_replica_batch_size
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
    start = skip_batches * batch_size  # records of this pipeline's stream before the first batch
    if len(manifests) == 1:
        ds = _records(first, split, config, input_context, seed, start)
    else:
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
        # Corpus i shuffles with seed + i, from the records the first `start` choices took of it.
        starts = mixture_starts(rates, seed, start)
        streams = [
            _records(m, split, config, input_context, seed + i, starts[i]) for i, m in enumerate(manifests)
        ]
        ds = tf.data.Dataset.choose_from_datasets(streams, _corpus_choices(rates, seed, start))
    # Static shapes: a partial last batch would be a second program to compile (and on TPU, an
    # error), hence drop_remainder=True.
    ds = ds.batch(batch_size, drop_remainder=True)
    ds = ds.map(
        lambda records: _parse(records, spec), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
    ds = ds.enumerate(start=skip_batches)  # each batch's index in the whole stream
    if masking is not None:
        max_predictions = first.max_predictions
        ds = ds.map(
            lambda step, batch: (step, remask(batch, masking, max_predictions, seed=(seed, step))),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
    if on_batch is not None:
        ds = ds.map(lambda step, batch: (step, _after(on_batch(step, batch), batch)))  # in order
    features = config.features or FEATURE_INPUTS
    targets = config.targets or (("mlm", "nsp") if first.pairs else ("mlm",))
    missing = sorted(set(features) - set(spec))
    if missing or ("nsp" in targets and not first.pairs):
        found = missing or ["nsp (a corpus without sentence pairs)"]
        raise InputError(f"{first.path}: the model reads {', '.join(found)}, which its records do not hold")
    ds = ds.map(
        lambda step, batch: _to_keras(batch, features, targets),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    return ds.prefetch(tf.data.AUTOTUNE)


# A mixture's corpus per record comes in blocks: each block of MIXTURE_BLOCK records holds a fixed
# quota of each corpus, in a seeded order. The quotas make the records a corpus has given by a
# block's start a closed form, so a resumed mixture seeks each corpus (`mixture_starts`) instead
# of replaying the choices.
MIXTURE_BLOCK = 4096


def _block_counts(rates: Sequence[float], n) -> tf.Tensor:
    """Records of each corpus among a mixture's first n choices, n a block boundary: corpora 0..i
    take round(n * (r_0 + ... + r_i)) of them. One formula, in the graph and for a resume."""
    bounds = np.cumsum(np.asarray(rates, np.float64)) / float(np.sum(rates))
    bounds[-1] = 1.0  # exactly: the counts then sum to n
    upto = tf.cast(tf.floor(tf.cast(n, tf.float64) * tf.constant(bounds) + 0.5), tf.int64)
    return upto - tf.pad(upto[:-1], [[1, 0]])


def _choice_block(rates: Sequence[float], seed: int, k) -> tf.Tensor:
    """Block k of a mixture's choices: each corpus's quota (`_block_counts` at the block's end
    less at its start), shuffled by (seed, k)."""
    k = tf.cast(k, tf.int64)
    quota = _block_counts(rates, (k + 1) * MIXTURE_BLOCK) - _block_counts(rates, k * MIXTURE_BLOCK)
    corpora = tf.repeat(tf.range(len(rates), dtype=tf.int64), quota)
    return tf.random.experimental.stateless_shuffle(corpora, tf.stack([tf.constant(seed, tf.int64), k]))


def mixture_starts(rates: Sequence[float], seed: int, start: int) -> list[int]:
    """Records of each corpus among a mixture's first `start` choices: the whole blocks' quotas
    by arithmetic, then the head of one block drawn."""
    block, head = divmod(start, MIXTURE_BLOCK)
    whole = _block_counts(rates, block * MIXTURE_BLOCK).numpy()
    drawn = np.bincount(_choice_block(rates, seed, block).numpy()[:head], minlength=len(rates))
    return [int(n) for n in whole + drawn]


def _corpus_choices(rates: Sequence[float], seed: int, start: int = 0) -> tf.data.Dataset:
    """The corpus of every record of a mixture from choice `start` on: an endless stream of
    indices, a pure function of the seed, drawn a block at a time (`_choice_block`): vectorised,
    `sample_from_datasets` draws one per record in a map call, which capped a three-corpus mixture
    at 28,000 records/s on 2 cores."""
    block, head = divmod(start, MIXTURE_BLOCK)
    blocks = tf.data.Dataset.counter(start=block).map(lambda k: _choice_block(rates, seed, k))
    return blocks.unbatch().skip(head)


def _records(
    manifest: Manifest,
    split: str,
    config: InputConfig,
    input_context: tf.distribute.InputContext | None,
    seed: int,
    start: int = 0,
) -> tf.data.Dataset:
    """One corpus's serialized records: for training, the seekable stream of its shards from
    record `start` on (`_seekable_records`); else every record once, in file order."""
    files = shard_files(manifest, split, input_context)
    check_shards(manifest, split, files)
    if config.training:
        records = {shard.file: shard.records for shard in manifest.split(split).shards}
        counts = [records[path.rsplit("/", 1)[-1]] for path in files]
        return _seekable_records(files, counts, seed, start, config.shuffle_window, where=manifest.folder)
    ds = tf.data.Dataset.from_tensor_slices(files)
    return ds.interleave(
        _read_file,
        cycle_length=min(config.cycle_length, len(files)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )


def _seekable_records(
    files: list[str], counts: list[int], seed: int, start: int, window: int, where: str = ""
) -> tf.data.Dataset:
    """The endless training order of `files` (holding `counts` records) from record `start` on.

    Epoch e reads the shards whole, one after the other, in an order drawn from (seed, e); its
    records are cut into windows of `window` (the last one shorter) and each window is permuted
    by a draw from (seed, e, window). The builder already wrote each shard in a random order
    (`pipeline/stages/`), so this is as good a shuffle as a `window`-record buffer over
    interleaved shards, and, unlike one, the position is arithmetic: record `start` is in epoch
    start // n, window (start % n) // `window`. A resume reads that window from the one shard
    where it begins (skipping inside that shard only) and drops the window's records before
    `start`: time to the first batch does not depend on the step (bench/resume.py).
    """
    total = sum(counts)
    need(total > 0, f"{where}: the shards hold no records", InputError)
    window = min(window, total)
    first_epoch, offset = divmod(start, total)
    first_window, skip = divmod(offset, window)
    paths, sizes = tf.constant(files), tf.constant(counts, tf.int64)
    key = tf.constant(seed, tf.int64)

    def epoch(e):
        order = tf.random.experimental.stateless_shuffle(
            tf.range(len(files), dtype=tf.int64), tf.stack([key, 2 * e])
        )
        ordered = tf.gather(sizes, order)
        begins = tf.cumsum(ordered, exclusive=True)
        resume_at = tf.where(e == first_epoch, tf.constant(first_window * window, tf.int64), 0)
        # Shards wholly before the resume point are never opened; the one it falls in skips its head.
        heads = tf.clip_by_value(resume_at - begins, 0, ordered)
        shards = tf.data.Dataset.from_tensor_slices((tf.gather(paths, order), heads, ordered))
        shards = shards.filter(lambda path, head, size: head < size)
        records = shards.flat_map(lambda path, head, size: _read_file(path).skip(head))

        def permute(w, batch):
            draw = tf.random.experimental.stateless_fold_in(tf.stack([key, 2 * e + 1]), w)
            return tf.random.experimental.stateless_shuffle(batch, draw)

        return records.batch(window).enumerate(start=resume_at // window).map(permute).unbatch()

    return tf.data.Dataset.counter(start=first_epoch).flat_map(epoch).skip(skip)


def _after(done, batch):
    """`batch`, once `done` (an op with a side effect) has run."""
    with tf.control_dependencies([done]):
        return {name: tf.identity(value) for name, value in batch.items()}


def _read_file(path):
    return tf.data.TFRecordDataset(path, buffer_size=1 << 20)


def _parse(records, spec):
    parsed = tf.io.parse_example(records, spec)
    # tf.train.Example stores int64; TPUs (and GPU kernels) want int32, and ids fit.
    return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in parsed.items()}


# A model output's (label, sample weight) from a parsed batch.
TARGETS = {
    "mlm": lambda batch: (batch["masked_lm_ids"], batch["masked_lm_weights"]),
    "nsp": lambda batch: (
        batch["next_sentence_labels"],
        tf.ones(tf.shape(batch["next_sentence_labels"])[:1], tf.float32),
    ),
    # ELECTRA's replaced-token detection: the original row; [PAD] is never scored.
    "rtd": lambda batch: (unmask(batch), tf.cast(batch["input_mask"], tf.float32)),
}


def _to_keras(batch, features: Sequence[str], targets: Sequence[str]):
    pairs = {name: TARGETS[name](batch) for name in targets}
    return (
        {name: batch[name] for name in features},
        {name: label for name, (label, _) in pairs.items()},
        {name: weight for name, (_, weight) in pairs.items()},
    )


def unmask(batch) -> tf.Tensor:
    """The original tokens: masked_lm_ids put back at masked_lm_positions where the weight is 1."""
    seq_len = batch["input_ids"].shape[-1]
    hit = tf.one_hot(batch["masked_lm_positions"], seq_len, dtype=tf.int32)  # (B, P, T)
    hit *= tf.cast(batch["masked_lm_weights"] > 0, tf.int32)[..., None]
    restored = tf.reduce_sum(hit * batch["masked_lm_ids"][..., None], axis=1)  # (B, T)
    return tf.where(tf.reduce_sum(hit, axis=1) > 0, restored, batch["input_ids"])


def remask(batch, masking: DynamicMasking, max_predictions: int, seed) -> dict:
    """A fresh BERT mask for a parsed batch, in the graph, static shapes (RoBERTa's dynamic masking).

    Same rules as the corpus builder: round(candidates * masked_lm_prob) positions (at least 1,
    at most max_predictions), 80 % [MASK] / 10 % random / 10 % kept, specials never chosen,
    positions sorted. Whole words: words are taken in random order until the next would overflow;
    with `masking.stored_units` a word is a unit of the records' `word_starts`.
    """
    tokens = unmask(batch)  # (B, T)
    b, t = tokens.shape
    seeds = tf.random.experimental.stateless_split(tf.stack([tf.cast(seed[0], tf.int64), seed[1]]), 4)
    is_special = tf.constant(masking.is_special, tf.bool)
    candidate = ~tf.gather(is_special, tokens)
    n_candidates = tf.reduce_sum(tf.cast(candidate, tf.float32), axis=1)
    budget = tf.minimum(
        float(max_predictions), tf.maximum(1.0, tf.round(n_candidates * masking.masked_lm_prob))
    )
    budget = tf.cast(tf.minimum(budget, n_candidates), tf.int32)  # (B,)

    if masking.stored_units or masking.starts_word is not None:
        if masking.stored_units:  # [CLS], [SEP], [PAD] end units; [UNK] stays in its own
            breaks = tf.constant(masking.breaks_units, tf.bool)
            starts = (batch["word_starts"] > 0) | tf.gather(breaks, tokens)
        else:
            breaks = is_special
            starts = tf.gather(tf.constant(masking.starts_word, tf.bool), tokens)
        prev_special = tf.gather(breaks, tf.pad(tokens[:, :-1], [[0, 0], [1, 0]]))
        boundary = starts | prev_special | tf.one_hot(0, t, on_value=True, off_value=False, dtype=tf.bool)
        words = tf.cumsum(tf.cast(boundary, tf.int32), axis=1) - 1  # (B, T)
    else:
        words = tf.broadcast_to(tf.range(t), (b, t))
    score = tf.gather(tf.random.stateless_uniform((b, t), seeds[0]), words, batch_dims=1)
    score = tf.where(candidate, score, 2.0)
    order = tf.argsort(score, axis=1, stable=True)  # (B, T): a word's pieces stay adjacent
    sorted_words = tf.gather(words, order, batch_dims=1)
    sorted_candidate = tf.gather(candidate, order, batch_dims=1)
    segment = sorted_words + tf.range(b)[:, None] * t  # a word's id, unique across the batch
    word_len = tf.gather(
        tf.math.unsorted_segment_sum(tf.cast(sorted_candidate, tf.int32), segment, b * t), segment
    )
    # Whole words in random order while they fit: each pass takes the longest prefix of the
    # remaining words that fits the room left, skipping words longer than that room. Three passes
    # come close to BERT's sequential skip-and-continue, with static shapes.
    taken = tf.zeros((b, t), tf.bool)
    room = budget
    for _ in range(3):
        eligible = sorted_candidate & ~taken & (word_len <= room[:, None])
        cum = tf.cumsum(tf.cast(eligible, tf.int32), axis=1)
        word_end = tf.gather(tf.math.unsorted_segment_max(cum, segment, b * t), segment)
        take = eligible & (word_end <= room[:, None])
        taken |= take
        room -= tf.reduce_sum(tf.cast(take, tf.int32), axis=1)
    selected = tf.scatter_nd(
        tf.stack([tf.broadcast_to(tf.range(b)[:, None], (b, t)), order], axis=-1), taken, (b, t)
    )

    u = tf.random.stateless_uniform((b, t), seeds[1])
    random_pool = tf.constant(np.flatnonzero(~np.array(masking.is_special)), tf.int32)
    random_tokens = tf.gather(
        random_pool, tf.random.stateless_uniform((b, t), seeds[2], 0, len(random_pool), tf.int32)
    )
    input_ids = tf.where(selected & (u < 0.8), masking.mask_id, tokens)
    input_ids = tf.where(selected & (u >= 0.9), random_tokens, input_ids)

    positions = tf.argsort(tf.cast(~selected, tf.int32), axis=1, stable=True)[:, :max_predictions]
    n_selected = tf.reduce_sum(tf.cast(selected, tf.int32), axis=1)
    valid = tf.range(max_predictions)[None, :] < n_selected[:, None]
    positions = tf.where(valid, positions, 0)
    return {
        **batch,
        "input_ids": input_ids,
        "masked_lm_positions": positions,
        "masked_lm_ids": tf.where(valid, tf.gather(tokens, positions, batch_dims=1), 0),
        "masked_lm_weights": tf.cast(valid, tf.float32),
    }


def find_bad_shard(files: list[str]) -> tuple[str, str] | None:
    """(file, TF's message) for the first shard that does not read through cleanly, else None."""
    for path in files:
        try:
            tf.data.TFRecordDataset(path, buffer_size=1 << 20).reduce(0, lambda n, _: n + 1)
        except (tf.errors.DataLossError, tf.errors.NotFoundError, tf.errors.OutOfRangeError) as e:
            return path, e.message.splitlines()[0] if e.message else type(e).__name__
    return None


@contextlib.contextmanager
def naming_bad_shards(files: list[str]):
    """Turn tf.data's DataLossError, which gives only an offset, into an InputError naming the file.

    with naming_bad_shards(manifest.files("train")):
        model.fit(dataset, ...)
    """
    try:
        yield
    except (tf.errors.DataLossError, tf.errors.NotFoundError) as e:
        bad = find_bad_shard(files)
        if bad is None:
            raise
        path, message = bad
        cause = message.split("}}")[-1].split("[Op:")[0].strip()
        raise InputError(f"{path}: corrupt or truncated shard ({cause}); rebuild the corpus") from e
