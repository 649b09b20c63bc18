"""Sequence classification: a label per text or text pair. `data.py` reads labelled files,
`metrics.py` computes accuracy, macro-F1 and the confusion matrix, `run.py` is the task,
`serving.py` what its SavedModel returns."""
