"""Token tagging (NER): a label per word, judged by entity F1. `data.py` reads CoNLL and JSONL,
`schemes.py` reads BIO/BIOES/IO tags as entities, `alignment.py` puts character-level entities
onto the vocab's pieces, `encoding.py` makes windows and decodes the tagger's scores,
`metrics.py` computes entity F1, `run.py` is the task, `serving.py` its raw-string SavedModel."""
