"""A segmenter for `--word_segmenter tests.pipeline.segmenters:pairs`: every two characters of a
sentence are a word (spaces too). Nothing like a real segmenter, which is the point: units that
follow it can only come from the function given."""


def pairs(sentence: str) -> list[str]:
    return [sentence[i : i + 2] for i in range(0, len(sentence), 2)]


def broken(sentence: str) -> list[str]:
    raise RuntimeError("no model loaded")


def not_a_list(sentence: str) -> str:
    return sentence
