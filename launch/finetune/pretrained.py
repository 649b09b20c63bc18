"""Where a fine-tuned encoder comes from (a bertbeam run, or a release in any format of
`launch/interop/formats.py`) and the optimizer every task fine-tunes it with: AdamW on the
warmup-then-decay schedule, layer-wise decay of the rate, a faster rate for layers that ask for it
(a CRF's transitions)."""

from __future__ import annotations

import dataclasses

import keras

from launch.checkpoints import CheckpointError, layers_of
from launch.finetune.config import FinetuneConfig, FinetuneError, default_learning_rate
from launch.interop.formats import HF_PREFIX, config_beside, load_weights, locate, read_bert_config
from launch.optimizer import build_optimizer, layer_decay_multipliers
from launch.run_dir import RunDir
from model.config import BertConfig
from pipeline.vocab import VocabError, VocabFile
from pipeline.vocab.release import read_release


@dataclasses.dataclass(frozen=True)
class Pretrained:
    bert: BertConfig
    vocab_file: VocabFile
    weights: str  # a bertbeam checkpoint prefix, hf:DIR, or a Google checkpoint
    objective: str = "mlm"  # what trained it (a bertbeam run's --objective; else its format's)

    def load(self, encoder: keras.Model) -> list[str]:
        """The source's weights into `encoder` (`build_encoder`'s); returns the layers it has no
        weights for, which keep their fresh values (a pooler a run without NSP never trained)."""
        return load_weights(encoder, self.weights)


def pretrained(config: FinetuneConfig) -> Pretrained:
    """Where the encoder comes from: the run of --model_dir (its checkpoint, shape and the vocab
    its corpus was built with), or the release of --init_checkpoint (any format of
    `interop/formats.py`, with its config and vocab beside the weights)."""
    if config.model_dir:
        run = RunDir(config.model_dir)
        manifest = run.read_corpus()  # the run's own copy: a moved corpus folder does not matter
        path = config.checkpoint or run.latest_checkpoint()
        objective = run.read_config().objective
        return Pretrained(run.read_bert_config(), VocabFile.of_corpus(manifest), path, objective)
    source = config.init_checkpoint.rstrip("/")
    try:
        fmt, location = locate(source)
        bert_config = config.bert_config or config_beside(source)
        if bert_config is None:
            raise FinetuneError(f"no {fmt.config_file} beside the weights; pass --bert_config FILE")
        lower_case = {"auto": None, "true": True, "false": False}[config.lower_case]
        folder = location if source.startswith(HF_PREFIX) else location.rsplit("/", 1)[0]
        vocab_file = read_release(folder, lower_case).vocab_file
    except (CheckpointError, FinetuneError, VocabError) as e:
        raise FinetuneError(f"--init_checkpoint {source}: {e}") from None
    return Pretrained(read_bert_config(bert_config), vocab_file, source, fmt.objective)


def head_layers(model: keras.Model) -> list[str]:
    """The task model's own trained layers, in order (ModernBERT's task head, the scores, a CRF):
    what starts fresh whatever the encoder's source."""
    return [
        layer.name for layer in model.layers if layer.trainable_weights and not isinstance(layer, keras.Model)
    ]


# === The optimizer ===


def task_optimizer(config: FinetuneConfig, source: Pretrained, model: keras.Model, total_steps: int,
                   faster: dict[str, float] | None = None):  # fmt: skip
    """AdamW for `model` and the peak rate and layer decay it resolved: layer-wise decay (off from
    scratch: there is nothing to keep), and `faster` {layer: factor} on top (a CRF's transitions)."""
    decay = 1.0 if config.from_scratch else config.layer_decay
    learning_rate = config.learning_rate or default_learning_rate(source.bert.hidden_size)
    multipliers = None
    if decay != 1.0 or faster:
        layers = layers_of([w.path for w in model.trainable_weights])
        multipliers = layer_decay_multipliers(layers, source.bert.num_layers, decay) | (faster or {})
    optimizer = build_optimizer(
        "adamw",
        learning_rate=learning_rate,
        warmup_steps=int(total_steps * config.warmup_fraction),
        total_steps=total_steps,
        weight_decay=config.weight_decay,
        lr_multipliers=multipliers,
    )
    return optimizer, learning_rate, decay
