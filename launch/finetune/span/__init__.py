"""Extractive question answering: the answer's span in a context. `data.py` reads SQuAD-shaped
JSON (SQuAD 1.1/2.0, CMRC 2018), `encoding.py` makes windows and ranks answers, `metrics.py`
computes exact match and F1 by SQuAD's or CMRC's rules, `run.py` is the task, `serving.py` its
raw-string SavedModel."""
