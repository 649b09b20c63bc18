"""The Hugging Face tokenizer files of a vocab: tokenizer.json and tokenizer_config.json that
`transformers.AutoTokenizer` loads and that tokenize as the corpus did. (A release folder's vocab,
read back, is `pipeline/release.py`: the corpus builder reads it too.)

    tokenizer_files(vocab_file, max_position)    # {"tokenizer.json": ..., "tokenizer_config.json": ...}
"""

from __future__ import annotations

import json

from pipeline.release import TOKENIZER_CONFIG
from pipeline.vocab import SPECIAL_PIECES, SentencePieceVocab, VocabFile

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

    proto = _model_proto_class()()
    proto.ParseFromString(vocab.model_bytes)
    if proto.trainer_spec.model_type != 1:  # UNIGRAM
        return None
    # Control pieces ([CLS], [SEP], [MASK]) never match text in sentencepiece: score them out.
    pieces = [(p.piece, -1e9 if p.type == 3 else p.score) for p in proto.pieces]  # 3: CONTROL
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


def _model_proto_class():
    """The fields of sentencepiece's ModelProto we read, declared for protobuf to parse (others
    are skipped). sentencepiece 0.2.3's own generated module needs protobuf >= 7 and TF 2.21 pins
    6; once TensorFlow allows 7, `sentencepiece.sentencepiece_model_pb2.ModelProto` replaces this."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    optional, repeated = 1, 3
    string, bytes_, float_, int32, bool_, message = 9, 12, 2, 5, 8, 11
    # message: [(field, number, label, type, type_name or default)], as in sentencepiece_model.proto
    # (its enums read as their int32 wire values; the defaults are the .proto's).
    schema = {
        "SentencePiece": [("piece", 1, optional, string, None), ("score", 2, optional, float_, None),
                          ("type", 3, optional, int32, "1")],
        "TrainerSpec": [("model_type", 3, optional, int32, "1"), ("unk_id", 40, optional, int32, None)],
        "NormalizerSpec": [("precompiled_charsmap", 2, optional, bytes_, None),
                           ("add_dummy_prefix", 3, optional, bool_, "true"),
                           ("remove_extra_whitespaces", 4, optional, bool_, "true")],
        "ModelProto": [("pieces", 1, repeated, message, "SentencePiece"),
                       ("trainer_spec", 2, optional, message, "TrainerSpec"),
                       ("normalizer_spec", 3, optional, message, "NormalizerSpec")],
    }  # fmt: skip
    pool = descriptor_pool.DescriptorPool()
    file = descriptor_pb2.FileDescriptorProto(name="bertbeam_spm.proto", package="bertbeam_spm")
    for name, fields in schema.items():
        message_type = file.message_type.add(name=name)
        for field, number, label, kind, extra in fields:
            spec = message_type.field.add(name=field, number=number, label=label, type=kind)
            if kind == message:
                spec.type_name = f".bertbeam_spm.{extra}"
            elif extra is not None:
                spec.default_value = extra
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("bertbeam_spm.ModelProto"))
