"""Why ELECTRA's discriminator stays at the prior at this compute: how hard is the replaced-token
task for the tiny encoder, by where the replacements come from?

    .venv/bin/python bench/rtd_probe.py [--data CORPUS] [--steps 600] [--model_dir RUN]
    make bench-rtd-probe        # with the quality grid's English ELECTRA run, when it exists

The discriminator alone: the `tiny` encoder (2 x 128) and ELECTRA's head (dense + GELU, one
logit per token), standard Keras compile, learning rate 1e-3 without warmup, batch 32, on the
quality grid's general-English corpus (built as `bench/quality.py` builds it, when missing).
Each row has 15 % of its real tokens replaced by a token drawn
- `uniform`: uniformly from the vocab (what an untrained generator samples);
- `unigram`: from the batch's own tokens, so frequent words come up as often as they occur (what a
  generator on the unigram plateau samples, as ELECTRA's does here within its warmup);
- `curriculum`: uniformly for the first half of the steps, then by the unigram: does a start on
  easy replacements carry over to the hard ones?
Printed per 100 steps: RTD loss, accuracy and recall on replaced tokens, beside the loss of
always answering the replaced share (the prior). With `--model_dir`: an ELECTRA run's latest
checkpoint scored on the corpus's validation rows with its own generator's samples, the mean
probability of "replaced" it gives replaced tokens and originals.
The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from model.config import BertConfig  # noqa: E402
from model.encoder import build_encoder  # noqa: E402
from pipeline.masking import MaskingTables  # noqa: E402
from pipeline.reader.dataset import InputConfig, make_dataset  # noqa: E402
from pipeline.schema import read_manifest  # noqa: E402
from pipeline.vocab import VocabFile  # noqa: E402

ENCODER = ("input_ids", "input_mask", "segment_ids", "document_ids")
REPLACED, BATCH, LEARNING_RATE = 0.15, 32, 1e-3
SOURCES = ("uniform", "unigram", "curriculum")


def corrupted(manifest, source: str, seed: int, switch: int = 0) -> tf.data.Dataset:
    """(encoder inputs with 15 % of real, non-special tokens replaced, replaced? (B, T, 1), mask);
    `curriculum` draws uniformly for the first `switch` batches, then by the unigram."""
    specials = np.array(MaskingTables.from_vocab(VocabFile.of_corpus(manifest).load()).is_special)
    special = tf.constant(specials)
    regular = tf.constant(np.flatnonzero(~specials), tf.int32)
    rows = make_dataset(manifest, "train", InputConfig(BATCH, seed=seed, features=ENCODER, targets=("rtd",)))

    def corrupt(step, batch):
        x, y, w = batch
        seeds = tf.random.experimental.stateless_split(tf.stack([tf.cast(seed, tf.int64), step]), 2)
        original = y["rtd"]  # the row before masking
        real = tf.cast(x["input_mask"], tf.bool) & ~tf.gather(special, original)
        chosen = real & (tf.random.stateless_uniform(tf.shape(original), seeds[0]) < REPLACED)
        # uniform: any regular token; unigram: the batch's own real tokens, drawn at random
        pick = tf.random.stateless_uniform(tf.shape(original), seeds[1], 0, 2**30, tf.int32)
        uniform = tf.gather(regular, pick % tf.size(regular))
        pool = tf.boolean_mask(original, real)
        unigram = tf.gather(pool, pick % tf.size(pool))
        easy = source == "uniform" or (source == "curriculum" and step < switch)
        draw = tf.where(easy, uniform, unigram)
        shown = tf.where(chosen, draw, original)
        label = tf.cast(shown != original, tf.float32)[..., None]
        return {**{k: x[k] for k in ENCODER}, "input_ids": shown}, label, w["rtd"]

    return rows.enumerate().map(corrupt)


def discriminator(config: BertConfig, seq_len: int) -> keras.Model:
    inputs = {name: keras.Input((seq_len,), dtype="int32", name=name) for name in ENCODER}
    sequence = build_encoder(config, seq_len)(inputs)["sequence_output"]
    hidden = keras.layers.Dense(config.hidden_size, activation="gelu", name="rtd_transform")(sequence)
    model = keras.Model(inputs, keras.layers.Dense(1, name="rtd_logits")(hidden))
    model.compile(
        keras.optimizers.AdamW(LEARNING_RATE, clipnorm=1.0),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
        weighted_metrics=[
            keras.metrics.BinaryAccuracy(threshold=0.0, name="accuracy"),
            keras.metrics.Recall(thresholds=0.0, name="recall"),
        ],
        jit_compile=True,
    )
    return model


def probe(manifest, source: str, steps: int, seed: int) -> list[dict]:
    keras.utils.set_random_seed(seed)
    model = discriminator(BertConfig.preset("tiny", manifest.vocab.size), manifest.seq_len)
    data = corrupted(manifest, source, seed, switch=steps // 2)
    share = np.mean([float(tf.reduce_sum(y[..., 0] * w) / tf.reduce_sum(w)) for _, y, w in data.take(20)])
    prior = -(share * math.log(share) + (1 - share) * math.log(1 - share))
    print(f"{source:10s} replaced share {share:.4f}: always answering it scores loss {prior:.4f}", flush=True)
    rows = [{"step": 0, "replaced_share": round(float(share), 4), "prior_loss": round(prior, 4)}]

    class Log(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs):
            row = {"step": (epoch + 1) * 100, **{k: round(float(v), 4) for k, v in logs.items()}}
            rows.append(row)
            figures = "  ".join(f"{k} {v}" for k, v in row.items() if k != "step")
            print(f"{source:10s} step {row['step']:5d}  {figures}", flush=True)

    model.fit(data, steps_per_epoch=100, epochs=steps // 100, verbose=0,
              callbacks=[Log()])  # fmt: skip
    return rows


def score_run(model_dir: str, data: str) -> dict:
    """An ELECTRA run's discriminator on validation rows with its generator's samples."""
    from launch.checkpoints import read_weights
    from launch.run_dir import RunDir
    from launch.run_model import model_io, pretraining_model
    from launch.streams import validation_dataset
    from model.losses import replaced_token_target

    run, manifest = RunDir(model_dir), read_manifest(data)
    model = pretraining_model(run.read_config().pretraining_objective, run.read_bert_config(), manifest,
                              next_sentence=False, seed=0)  # fmt: skip
    path = run.latest_checkpoint()
    read_weights(model, path)
    batches = min(8, manifest.split("validation").instances // BATCH)
    replaced, kept = [], []
    for x, y, w in validation_dataset([manifest], BATCH, 0, [batches], **model_io(model)).take(batches):
        logits, target = replaced_token_target(y["rtd"], model(x, training=False)["rtd"])  # the loss's own
        p, real = keras.ops.convert_to_numpy(keras.ops.sigmoid(logits)), w["rtd"].numpy() > 0
        swapped = keras.ops.convert_to_numpy(target) > 0
        replaced.append(p[swapped & real])
        kept.append(p[real & ~swapped])
    replaced, kept = np.concatenate(replaced), np.concatenate(kept)
    return {
        "checkpoint": path,
        "replaced_share": round(len(replaced) / (len(replaced) + len(kept)), 4),
        "p_replaced_on_replaced": round(float(replaced.mean()), 4),
        "p_replaced_on_original": round(float(kept.mean()), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a corpus; default: the quality grid's English one (built if missing)")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model_dir", help="also score this ELECTRA run's discriminator")
    args = parser.parse_args()
    if args.data is None:
        from bench.quality import corpus
        from pipeline.fetch.corpora import FETCHERS

        FETCHERS["en_general"](REPO / "data")
        args.data = str(corpus("en", "general", REPO / "data", REPO / "out" / "quality"))
    manifest = read_manifest(args.data)
    results = {"data": args.data, "steps": args.steps}
    for source in SOURCES:
        results[source] = probe(manifest, source, args.steps, args.seed)
    if args.model_dir:
        results["run"] = score_run(args.model_dir, args.data)
        print(f"run        {results['run']}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
