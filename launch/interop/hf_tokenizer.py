"""The Hugging Face tokenizer files of a vocab: tokenizer.json and tokenizer_config.json that
`transformers.AutoTokenizer` loads and that tokenize as the corpus did. (A release folder's vocab,
read back, is `pipeline/vocab/release.py`: the corpus builder reads it too.)

    tokenizer_files(vocab_file, max_position)    # {"tokenizer.json": ..., "tokenizer_config.json": ...}
"""

from __future__ import annotations

import json

from pipeline.vocab import SPECIAL_PIECES, SentencePieceVocab, VocabFile
from pipeline.vocab.release import TOKENIZER_CONFIG
from pipeline.vocab.spm_proto import CONTROL, UNIGRAM, model_proto_class

TOKENIZER_CLASS = {
    "wordpiece": "BertTokenizer",
    "sentencepiece": "PreTrainedTokenizerFast",
    "tokenizer": "PreTrainedTokenizerFast",
}


# === Out ===


def tokenizer_files(vocab_file: VocabFile, model_max_length: int) -> dict[str, bytes] | None:
    """tokenizer.json (unless the vocab is one already) and tokenizer_config.json for
    `vocab_file`; None where the vocab kind has no Hugging Face tokenizer (a bpe sentencepiece
    model)."""
    tokenizer = hf_tokenizer(vocab_file)
    if tokenizer is None:
        return None
    vocab = vocab_file.load()
    if vocab_file.kind == "tokenizer":  # already the tokenizer: kept byte for byte, its own token names
        pieces = {key: vocab.tokens[index] for key, index in vocab.special_ids.items()}
    else:
        pieces = SPECIAL_PIECES
    files = {} if vocab_file.kind == "tokenizer" else {"tokenizer.json": tokenizer.to_str().encode()}
    files[TOKENIZER_CONFIG] = json.dumps(
        {
            "tokenizer_class": TOKENIZER_CLASS[vocab_file.kind],
            "do_lower_case": vocab_file.lower_case,
            "model_max_length": model_max_length,
            **{f"{key}_token": piece for key, piece in pieces.items()},
        },
        indent=2,
        sort_keys=True,
    ).encode()
    return files


def hf_tokenizer(vocab_file: VocabFile):
    """A `tokenizers.Tokenizer` that tokenizes exactly as our vocab does, plus BERT's [CLS] A [SEP]
    (B [SEP]) template and special tokens. WordPiece: the same tokenizer. A sentencepiece unigram
    model: its pieces, scores and normalization map as a tokenizers Unigram model (the conversion
    transformers applies to sentencepiece tokenizers). None for a bpe sentencepiece model: its
    merges are not in the model file."""
    from tokenizers import AddedToken, Tokenizer, decoders, processors

    vocab = vocab_file.load()
    if vocab_file.kind == "tokenizer":  # a tokenizer.json: itself
        return Tokenizer.from_str(vocab_file.data.decode("utf-8"))
    if vocab_file.kind == "wordpiece":
        tokenizer = Tokenizer.from_str(vocab.tokenizer.to_str())  # a copy
        tokenizer.decoder = decoders.WordPiece(prefix="##")
    else:
        tokenizer = _unigram_from_sentencepiece(vocab)
        if tokenizer is None:
            return None
    ids = vocab.special_ids
    cls, sep = SPECIAL_PIECES["cls"], SPECIAL_PIECES["sep"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0",
        pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, ids["cls"]), (sep, ids["sep"])],
    )
    tokenizer.add_special_tokens([AddedToken(piece, special=True) for piece in SPECIAL_PIECES.values()])
    return tokenizer


def _unigram_from_sentencepiece(vocab: SentencePieceVocab):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    proto = model_proto_class()()
    proto.ParseFromString(vocab.model_bytes)
    if proto.trainer_spec.model_type != UNIGRAM:
        return None
    # Control pieces ([CLS], [SEP], [MASK]) never match text in sentencepiece: score them out.
    pieces = [(p.piece, -1e9 if p.type == CONTROL else p.score) for p in proto.pieces]
    tokenizer = Tokenizer(models.Unigram(pieces, proto.trainer_spec.unk_id, False))
    spec = proto.normalizer_spec
    steps = [normalizers.Precompiled(spec.precompiled_charsmap)] if spec.precompiled_charsmap else []
    if spec.remove_extra_whitespaces:
        steps += [normalizers.Strip(), normalizers.Replace(Regex(" {2,}"), " ")]
    tokenizer.normalizer = normalizers.Sequence(steps)
    scheme = "always" if spec.add_dummy_prefix else "never"
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=scheme)
    tokenizer.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme=scheme)
    return tokenizer
