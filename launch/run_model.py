"""The pretraining model of a run, built one way by everything that builds it (training, export,
evaluation): `--objective`'s model (model/pretraining.py) for a corpus's shapes and vocab, and the
input and output names its data must carry.

    model = pretraining_model(config.pretraining_objective, bert, manifest, seed=config.seed)
    make_dataset(manifest, "train", InputConfig(32, **model_io(model)))
"""

from __future__ import annotations

import keras
import numpy as np

from model.config import BertConfig
from model.pretraining import Objective
from pipeline.masking import MaskingTables
from pipeline.schema import Manifest
from pipeline.vocab import VocabFile


def pretraining_model(objective: Objective, bert: BertConfig, manifest: Manifest, *,
                      next_sentence: bool | None = None, seed: int | None = None) -> keras.Model:  # fmt: skip
    """`objective`'s model for `manifest`'s seq_len and max_predictions (an NSP/SOP head when the
    corpus has pairs, unless `next_sentence` says otherwise). The vocab's specials ([PAD], [CLS],
    [SEP], [MASK], [UNK], control and unused slots: never a sample) come from the corpus's own
    vocab file, and so do the rows past it where the model has more (a padded release's)."""
    tables = MaskingTables.from_vocab(VocabFile.of_corpus(manifest).load())
    beyond = range(len(tables.is_special), bert.vocab_size)
    if seed is not None:
        # Keras draws each initializer's and dropout layer's seed from Python's global `random`,
        # and reading a gs:// file through Beam draws from it too (its retries' jitter): seeded
        # here, after the last read, the weights are the same wherever the files are.
        keras.utils.set_random_seed(seed)
    return objective.build(
        bert,
        manifest.seq_len,
        manifest.max_predictions,
        next_sentence=manifest.pairs if next_sentence is None else next_sentence,
        excluded_ids=[*np.flatnonzero(tables.is_special).tolist(), *beyond],
        seed=seed,
    )


def model_io(model: keras.Model) -> dict:
    """InputConfig's `features` and `targets` for `model`: its input and output names."""
    return {"features": tuple(model.input), "targets": tuple(model.output)}
