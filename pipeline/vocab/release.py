"""A released model's folder as the corpus's tokenizer: its vocab, lower-casing and special tokens,
read from the files the release ships, so that `--vocab RELEASE_DIR` is the one thing a user names.

    release = read_release("all-MiniLM-L6-v2")      # Release(name, vocab_file, vocab_path)
    model_folder("all-MiniLM-L6-v2")                # where config.json and the weights are

The layouts people have: a Hugging Face `save_pretrained` folder; a sentence-transformers folder
(modules.json names the Transformer module's folder: the root, or 0_Transformer/); an unpacked
google-research/bert release (vocab.txt, bert_config.json, no tokenizer_config.json: lower-casing
then follows its name, "uncased_L-12_H-768_A-12", as Google names its releases).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import PurePosixPath

from pipeline import files
from pipeline.vocab import SPECIAL_PIECES, SentencePieceVocab, VocabError, VocabFile, kind_of

# A release's vocab, first found first: BERT's, sentencepiece's, then a tokenizer.json alone
# (ModernBERT's BPE; bertbeam's own exports hold one beside the vocab they were built with).
VOCAB_FILES = ("vocab.txt", "vocab.model", "spiece.model", "tokenizer.json")
TOKENIZER_CONFIG = "tokenizer_config.json"
MODULES = "modules.json"  # sentence-transformers: the modules in order, each with its folder
TRANSFORMER_MODULE = "sentence_transformers.models.Transformer"
POOLING_MODULE = "sentence_transformers.models.Pooling"


@dataclasses.dataclass(frozen=True)
class Release:
    name: str  # the folder's name
    vocab_file: VocabFile
    vocab_path: str


def is_release_folder(path: str) -> bool:
    """`--vocab PATH` names a folder, not a vocab file: it has a vocab file, a config or modules.json."""
    path = path.rstrip("/")
    names = (*VOCAB_FILES, "config.json", "bert_config.json", MODULES)
    return any(files.exists(f"{path}/{name}") for name in names)


def model_folder(folder: str) -> str:
    """The folder holding the model's config and weights: `folder`, or for a sentence-transformers
    release the Transformer module's folder that its modules.json names."""
    folder = folder.rstrip("/")
    if not files.exists(f"{folder}/{MODULES}"):
        return folder
    path = _module_path(folder, TRANSFORMER_MODULE)
    if path is None:
        raise VocabError(
            f"{folder}/{MODULES}: no {TRANSFORMER_MODULE} module in this sentence-transformers folder"
        )
    return f"{folder}/{path}" if path not in ("", ".") else folder


def _module_path(folder: str, kind: str) -> str | None:
    """The folder (relative, "" for the root) of the first module of type `kind` that the
    sentence-transformers folder's modules.json lists; None if it lists none."""
    modules = _read_json(f"{folder}/{MODULES}")
    found = [m for m in modules if isinstance(m, dict) and m.get("type") == kind]
    return str(found[0].get("path", "")).strip("/") if found else None


def served_pooling(folder: str) -> str | None:
    """How a sentence-transformers release pools its encoder's outputs, as its Pooling module's
    config.json says: "mean" (all-MiniLM-L6-v2's) or "cls"; None for any other mode (max,
    weighted, several at once) or a folder without modules.json."""
    folder = folder.rstrip("/")
    if not files.exists(f"{folder}/{MODULES}"):
        return None
    path = _module_path(folder, POOLING_MODULE)
    config_path = f"{folder}/{path}/config.json"
    if not path or not files.exists(config_path):
        return None
    modes = {k.removeprefix("pooling_mode_") for k, v in _read_json(config_path).items()
             if k.startswith("pooling_mode_") and v is True}  # fmt: skip
    return {frozenset({"mean_tokens"}): "mean", frozenset({"cls_token"}): "cls"}.get(frozenset(modes))


def read_release(folder: str, lower_case: bool | None = None) -> Release:
    """The release's vocab (the first of VOCAB_FILES in its model folder), lower-cased as
    `lower_case` says, else as tokenizer_config.json's do_lower_case, else as the folder's name
    (Google's "uncased"); tokenizer_config.json's special tokens checked against what the vocab
    reads as BERT's five. Every mismatch is a one-line VocabError naming the file."""
    folder = model_folder(folder)
    path = next((f"{folder}/{n}" for n in VOCAB_FILES if files.exists(f"{folder}/{n}")), None)
    if path is None:
        raise VocabError(f"{folder}: no {', '.join(VOCAB_FILES)} (a released model's folder)")
    config_path = f"{folder}/{TOKENIZER_CONFIG}"
    tokenizer_config = _read_json(config_path) if files.exists(config_path) else {}
    kind, data = kind_of(path), files.read_file(path)
    if kind == "tokenizer" and (wordpiece := _bert_wordpiece(data)) is not None:
        kind, data = "wordpiece", wordpiece[0]
        lower_case = wordpiece[1] if lower_case is None else lower_case  # its normalizer says
    if lower_case is None:
        lower_case = bool(tokenizer_config.get("do_lower_case", "uncased" in PurePosixPath(folder).name))
    vocab_file = VocabFile(kind, data, lower_case and kind == "wordpiece")
    try:
        vocab = vocab_file.load()
    except VocabError as e:
        raise VocabError(f"{path}: {e}") from None
    for key, default in SPECIAL_PIECES.items():
        named = _token_name(tokenizer_config.get(f"{key}_token"))
        found = _token(vocab, vocab.special_ids[key])
        if named is not None and named != found:
            raise VocabError(
                f"{config_path}: {key}_token {named!r}, but {PurePosixPath(path).name} has {found!r} in that "
                f"role; bertbeam reads BERT's specials ({default}) or, in a tokenizer.json, RoBERTa's"
            )
    return Release(PurePosixPath(folder).name, vocab_file, path)


def _bert_wordpiece(tokenizer_json: bytes) -> tuple[bytes, bool] | None:
    """A tokenizer.json that is exactly BERT's WordPiece tokenizer (what transformers 5 saves in
    place of vocab.txt) as (its vocab.txt, lower_case); None for any other tokenizer, which is
    read as a tokenizer.json. As vocab.txt, it can be extended (--extend_vocab)."""
    spec = json.loads(tokenizer_json)
    model, normalizer = spec.get("model") or {}, spec.get("normalizer") or {}
    lower = bool(normalizer.get("lowercase"))
    bert = (
        model.get("type") == "WordPiece"
        and model.get("continuing_subword_prefix", "##") == "##"
        and (spec.get("pre_tokenizer") or {}).get("type") == "BertPreTokenizer"
        and normalizer.get("type") == "BertNormalizer"
        and normalizer.get("clean_text", True)
        and normalizer.get("handle_chinese_chars", True)
        and normalizer.get("strip_accents") in (None, lower)
    )
    vocab = model.get("vocab") or {}
    if not bert or sorted(vocab.values()) != list(range(len(vocab))):
        return None
    tokens = sorted(vocab, key=vocab.get)
    return "".join(f"{token}\n" for token in tokens).encode("utf-8"), lower


def _token(vocab, token_id: int) -> str:
    if isinstance(vocab, SentencePieceVocab):
        return vocab.processor.id_to_piece(token_id)
    return vocab.tokens[token_id]


def _token_name(value) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or {"content": ...}."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _read_json(path: str):
    try:
        return json.loads(files.read_file(path))
    except json.JSONDecodeError as e:
        raise VocabError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
