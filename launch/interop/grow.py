"""The token-indexed weights (the word embeddings, the masked-LM output bias), a row per token id.

A release's weights into a model whose vocab extends the release's (`build_corpus --extend_vocab`)
or pads it (--vocab_multiple): every weight copied as it is, but the token-indexed ones grow, each
new token's row the mean of the rows of the pieces the release's vocab cut it into (bert4keras's
`compound_tokens`, as WoBERT initialised its words), or for a token it knows only as [UNK], as
--extension_init says; a padded row zeros.

    grow_into(model, release_model, added)      # added: the manifest's [{id, token, pieces}, ...]
    exported_values(model)                      # what an export writes: padded rows settled

`release_model` is the same architecture at the release's vocab size, warm-started from the
release in any format (`formats.warm_start`): growing is then the same for every format.
"""

from __future__ import annotations

import keras
import numpy as np

from launch.checkpoints import CheckpointError
from model.encoder import weights_by_path
from model.masked_lm import MASKED_LOGIT, BiasAdd

# The layers whose weights have a row per token id (ELECTRA's generator's under a prefix).
TOKEN_INDEXED = ("token_embedding", "mlm_bias")


def grow_into(model: keras.Model, release_model: keras.Model, added: list[dict], unknown: str = "pieces",
              unk: int | None = None, seed: int = 0) -> list[str]:  # fmt: skip
    """Assigns `release_model`'s weights to `model` (they may be the same model: an extension
    that only filled [unusedN] slots keeps the size), the token-indexed ones grown (`grown_rows`:
    `unknown`, `unk`, `seed`); returns their paths. A weight whose shapes differ otherwise is a
    one-line CheckpointError."""
    ours, theirs = weights_by_path(model), weights_by_path(release_model)
    grown = []
    for path, variable in ours.items():
        value = np.asarray(keras.ops.convert_to_numpy(theirs[path]))
        want = tuple(variable.shape)
        token_indexed = path.split("/")[0].endswith(TOKEN_INDEXED)
        if value.shape != want and not (
            token_indexed and value.shape[1:] == want[1:] and value.shape[0] < want[0]
        ):
            raise CheckpointError(
                f"{path}: the release's has shape {value.shape}, the extended model's {want}; only the "
                "token rows may grow"
            )
        if token_indexed:
            value = grown_rows(value, want[0], added, unknown, unk, seed)
            grown.append(path)
        variable.assign(value)
    return grown


def grown_rows(rows: np.ndarray, size: int, added: list[dict], unknown: str = "pieces",
               unk: int | None = None, seed: int = 0) -> np.ndarray:  # fmt: skip
    """`rows` (the release's, one per token id) grown to `size`: each added token's row (a filled
    [unusedN] slot or a new id) the mean of its pieces' rows in the release. An added token whose
    only piece is [UNK] (id `unk`: a character of a script the release's vocab lacks) would start
    as the [UNK] row, every such token alike; `unknown` (--extension_init) may start it instead as
    the mean of the release's rows ("mean"), or ("random") as a random row at the release's mean
    row norm, seeded by `seed` (a 1-D weight, the output bias, takes the mean then too)."""
    out = np.zeros((size, *rows.shape[1:]), rows.dtype)
    out[: len(rows)] = rows
    for token in added:
        out[token["id"]] = rows[token["pieces"]].mean(axis=0)
    ids = [token["id"] for token in added if token["pieces"] == [unk]]
    if unknown == "pieces" or not ids:
        return out
    if unknown == "random" and rows.ndim == 2:
        draws = np.random.default_rng([seed, len(rows), size]).standard_normal((len(ids), rows.shape[1]))
        norm = np.linalg.norm(rows, axis=1).mean()
        out[ids] = (draws * (norm / np.linalg.norm(draws, axis=1, keepdims=True))).astype(rows.dtype)
    else:
        out[ids] = rows.mean(axis=0)
    return out


def exported_values(model: keras.Model) -> dict[str, np.ndarray]:
    """Every weight's value by path, on the host, as an export writes it: a padded vocab's rows
    past its tokens (`BiasAdd.tokens`) settled to what the model's mask makes of them, zero
    embedding rows and MASKED_LOGIT output biases, so that a reader with no mask (transformers,
    google-research/bert) computes the same logits on every row. Training never reads those rows,
    so nothing is lost."""
    from launch import backend

    tokens = {layer.tokens for layer in model.layers if isinstance(layer, BiasAdd) and layer.tokens}
    values = {path: np.asarray(backend.to_numpy(w)) for path, w in weights_by_path(model).items()}
    if not tokens:
        return values
    (real,) = tokens  # one vocab: ELECTRA's generator shares the embedding
    for path, value in values.items():
        layer = path.split("/")[0]
        if layer.endswith(TOKEN_INDEXED) and value.ndim >= 1 and len(value) > real:
            value = value.copy()
            value[real:] = MASKED_LOGIT if layer.endswith("mlm_bias") else 0
            values[path] = value
    return values
