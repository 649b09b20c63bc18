"""`FinetuneConfig`: every fine-tuning parameter with its help text, the flags of `launch.finetune`;
where its output goes and how its labelled files are read."""

from __future__ import annotations

import dataclasses
from pathlib import PurePosixPath
from typing import Literal

from common.cli import field
from common.errors import BertbeamError, need
from launch.finetune.classify.data import LabelledFormat
from launch.run_dir import RunDir
from launch.strategy import KINDS

# --learning_rate's default by the encoder's hidden size: (widest, rate), the first that fits.
# BERT-base's 5e-5 costs a tiny encoder 15-18 points (docs/finetune.md has the measurements).
RATES_BY_WIDTH = ((256, 5e-4), (512, 2e-4), (None, 5e-5))


def default_learning_rate(hidden_size: int) -> float:
    return next(rate for widest, rate in RATES_BY_WIDTH if widest is None or hidden_size <= widest)


# The training budget, the same rule for every task: up to EPOCHS passes, stopping once PATIENCE
# have not improved on validation. A fixed 3 stopped a pretrained encoder still improving at its
# last epoch and so hid what pretraining is worth (bench/budget.py; docs/finetune.md has the figures).
EPOCHS, PATIENCE = 12, 3

BAD_ROW_POLICIES = ("error", "skip")  # --on_bad_row: every task's readers take either


class FinetuneError(BertbeamError):
    """Fine-tuning cannot start or its data cannot be used; one line saying why."""


@dataclasses.dataclass(frozen=True)
class FinetuneConfig:
    train: str = field(
        None, "labelled training file (JSONL, TSV, CSV; for --task tag CoNLL or JSONL), or a split with "
        "--tfds_name", required=True,
    )  # fmt: skip
    task: Literal["classify", "tag", "span"] = field(
        "classify", "classify: a label per text (or pair); tag: a label per word, entities (NER); span: "
        "the answer's span in a context (SQuAD-shaped JSON)",
    )  # fmt: skip
    validation: str = field(None, "labelled file (or split) that picks the best epoch", required=True)
    test: str | None = field(None, "labelled file (or split) reported as the headline figure")
    model_dir: str | None = field(None, "a launch.pretrain run: its newest checkpoint, vocab and shape")
    checkpoint: str | None = field(None, "with --model_dir: this checkpoint prefix instead of the newest")
    init_checkpoint: str | None = field(
        None, "instead of --model_dir: hf:DIR (Hugging Face) or a google-research/bert folder"
    )
    bert_config: str | None = field(
        None, "with --init_checkpoint: the model's config (default: the folder's)"
    )
    lower_case: Literal["auto", "true", "false"] = field(
        "auto", "with --init_checkpoint and a vocab.txt: lower-case first (auto: tokenizer_config.json, "
        "or 'uncased' in a Google folder's name)"
    )  # fmt: skip
    output: str | None = field(None, "output folder (default: model_dir/finetune/NAME)")
    name: str | None = field(
        None, "the output's name under model_dir/finetune/ (default: the training file's stem)"
    )
    format: Literal["auto", "jsonl", "tsv", "csv"] = field("auto", "labelled files' format (auto: extension)")
    tfds_name: str | None = field(
        None, "--train/--validation/--test are splits of this tensorflow-datasets set"
    )
    text_field: str = field("text", "field or column holding the text")
    text_pair_field: str | None = field(None, "field or column holding the second text of a pair task")
    label_field: str = field("label", "field or column holding the label (string or int)")
    tfds_data_dir: str | None = field(None, "with --tfds_name: where the prepared dataset lives")
    from_scratch: bool = field(False, "the same architecture from random weights (the baseline)")
    pooling: Literal["auto", "cls", "mean"] = field(
        "auto",
        "the head reads the pooled [CLS] output (BERT), or the mean of the real tokens' outputs; auto: "
        "cls when the source trained its pooler (NSP/SOP), else mean (measured: docs/finetune.md)",
    )
    layer_decay: float = field(
        0.8, "layer-wise learning-rate decay: each layer learns at this times the rate of the one above "
        "(the head at --learning_rate, the embeddings slowest; ELECTRA's recipe); 1 = off; never "
        "with --from_scratch",
    )  # fmt: skip
    seq_len: int = field(128, "tokens per example, [CLS] and [SEP] included")
    doc_stride: int | None = field(
        None, "--task tag|span: a longer text is read in windows of --seq_len this many pieces apart "
        "(default: half of --seq_len); each piece is predicted where it has the most context",
    )  # fmt: skip
    crf: bool = field(
        False, "--task tag: a linear-chain CRF on the tagger (else softmax; both decode valid BIO)"
    )
    crf_lr_multiplier: float = field(
        100.0, "--task tag --crf: the CRF's transitions learn at this times the rate (bert4keras's "
        "lr_multiplier: at the encoder's rate they barely move)",
    )  # fmt: skip
    label_all_pieces: bool = field(
        False,
        "--task tag: every piece of a word carries its label (B- as I- after the first), not the first only",
    )
    max_query_length: int = field(64, "--task span: question pieces kept (the rest cut)")
    max_answer_length: int = field(30, "--task span: the longest answer, in pieces")
    n_best: int = field(20, "--task span: starts and ends ranked per window")
    null_threshold: float = field(
        0.0, "--task span with unanswerable questions: 'no answer' wins when its score beats the best "
        "span's by more than this",
    )  # fmt: skip
    span_metric: Literal["auto", "squad", "cmrc"] = field(
        "auto", "--task span: SQuAD's exact match and F1, or CMRC 2018's (Chinese); auto: by the contexts"
    )
    on_bad_row: Literal[BAD_ROW_POLICIES] = field(
        "error", "a bad row (any task) stops the run with one line naming file and line, or is skipped "
        "and counted by reason in eval.json's bad_rows",
    )  # fmt: skip
    global_batch_size: int = field(32, "examples per step over all replicas")
    epochs: int = field(
        EPOCHS, "the most passes over the training examples; the rate's schedule spans them all, and "
        "--patience may stop sooner (measured: docs/finetune.md)",
    )  # fmt: skip
    patience: int = field(
        PATIENCE, "stop once the validation figure has not improved for this many epochs (the best "
        "epoch's weights are kept); 0 = every --epochs",
    )  # fmt: skip
    learning_rate: float | None = field(
        None, "peak learning rate (default: by the encoder's width, RATES_BY_WIDTH: 5e-4 up to 256, "
        "2e-4 up to 512, BERT-base's 5e-5 wider)",
    )  # fmt: skip
    warmup_fraction: float = field(0.1, "share of the steps spent warming up")
    weight_decay: float = field(0.01, "AdamW's decoupled weight decay (never on LayerNorm or bias)")
    strategy: str = field("auto", f"hardware: {'|'.join(KINDS)}")
    tpu: str | None = field(None, "TPU name or grpc:// address")
    jit_compile: bool = field(True, "compile the train step with XLA (as on a TPU)")
    seed: int = field(0, "initialisation, dropout and example order all derive from it")
    export: bool = field(
        True, "write the task's model (classifier.keras, tagger.keras, span.keras), the raw-string "
        "SavedModel (serving/) and the Hugging Face export (hf/)",
    )  # fmt: skip

    def __post_init__(self):
        need(
            bool(self.model_dir) != bool(self.init_checkpoint), "pass one of --model_dir or --init_checkpoint"
        )
        need(bool(self.model_dir) or bool(self.output), "--init_checkpoint needs --output DIR")
        need(self.checkpoint is None or bool(self.model_dir), "--checkpoint goes with --model_dir")
        need(self.seq_len >= 8, f"--seq_len: expected >= 8, found {self.seq_len}")
        for name in ("global_batch_size", "epochs"):
            need(getattr(self, name) >= 1, f"--{name}: expected >= 1, found {getattr(self, name)}")
        need(
            self.learning_rate is None or self.learning_rate > 0,
            f"--learning_rate: expected > 0, found {self.learning_rate}",
        )
        need(self.patience >= 0, f"--patience: expected >= 0, found {self.patience}")
        need(0 < self.layer_decay <= 1, f"--layer_decay: expected in (0, 1], found {self.layer_decay}")
        need(
            0 <= self.warmup_fraction < 1, f"--warmup_fraction: expected [0, 1), found {self.warmup_fraction}"
        )
        need(self.strategy in KINDS, f"--strategy {self.strategy}: expected one of {', '.join(KINDS)}")
        self._check_task_flags()

    def _check_task_flags(self) -> None:
        """Each task's own flags only with it; windows that hold at least one piece of text."""
        if self.task != "tag":
            for flag in ("crf", "label_all_pieces"):
                need(not getattr(self, flag), f"--{flag} goes with --task tag")
        if self.task == "classify":
            need(self.doc_stride is None, "--doc_stride goes with --task tag or span")
            return
        need(not self.tfds_name and not self.text_pair_field,
             f"--task {self.task} reads its own files: no --tfds_name or --text_pair_field")  # fmt: skip
        stride = f"--doc_stride {self.doc_stride}"
        need(
            0 < self.stride < self.seq_len - 2, f"{stride}: expected 1 to --seq_len - 3 ({self.seq_len - 3})"
        )
        need(self.crf_lr_multiplier > 0, f"--crf_lr_multiplier: expected > 0, found {self.crf_lr_multiplier}")
        if self.task == "span":
            need(0 < self.max_query_length < self.seq_len - 3,
                 f"--max_query_length {self.max_query_length}: expected 1 to --seq_len - 4")  # fmt: skip
            for name in ("max_answer_length", "n_best"):
                need(getattr(self, name) >= 1, f"--{name}: expected >= 1, found {getattr(self, name)}")

    def budget(self, steps: int) -> str:
        """The training budget in words, for the line that opens a run."""
        # the soonest it can stop is after epoch patience + 1
        if not self.patience or self.patience >= self.epochs - 1:
            return f"{self.epochs} epochs of {steps} steps"
        stop = f"stopping after {self.patience} without improvement"
        return f"up to {self.epochs} epochs of {steps} steps ({stop})"

    @property
    def stride(self) -> int:
        return self.doc_stride or self.seq_len // 2

    @property
    def run_name(self) -> str:
        name = self.name or (
            self.tfds_name.split(":")[0] if self.tfds_name else PurePosixPath(self.train).stem
        )
        name = name.replace("/", "_")
        return f"{name}-scratch" if self.from_scratch and not self.name else name

    @property
    def output_dir(self) -> str:
        if self.output:
            return self.output.rstrip("/")
        return RunDir(self.model_dir).file(f"finetune/{self.run_name}")

    @property
    def labelled_format(self) -> LabelledFormat:
        fmt = "tfds" if self.tfds_name else self.format
        return LabelledFormat(
            self.text_field, self.text_pair_field, self.label_field, fmt, self.tfds_data_dir
        )

    def source(self, split: str) -> str:
        """What read_examples reads for --train/--validation/--test: the file, or NAME:SPLIT."""
        return f"{self.tfds_name}:{split}" if self.tfds_name else split
