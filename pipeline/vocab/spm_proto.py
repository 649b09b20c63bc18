"""sentencepiece's ModelProto, read and written with protobuf: the fields bertbeam reads (a model's
pieces, their scores and types, its trainer and normalizer) declared here, every other field kept
as protobuf keeps unknown ones, so a model parsed, given more pieces and serialized again is the
same model plus those pieces (`vocab_extension.py`; `launch/interop/hf_tokenizer.py` reads it to
convert a unigram model to Hugging Face's tokenizer).

    proto = model_proto_class()(); proto.ParseFromString(model_bytes)
"""

from __future__ import annotations

import functools

NORMAL, CONTROL = 1, 3  # SentencePiece.Type
UNIGRAM = 1  # TrainerSpec.ModelType


@functools.cache
def model_proto_class():
    """The fields of sentencepiece's ModelProto we read, declared for protobuf to parse (the
    others pass through as unknown fields). sentencepiece 0.2.3's own generated module needs
    protobuf >= 7 and TF 2.21 pins 6; once TensorFlow allows 7,
    `sentencepiece.sentencepiece_model_pb2.ModelProto` replaces this."""
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
