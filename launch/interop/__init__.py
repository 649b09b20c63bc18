"""Checkpoint formats in and out: one module per format (google-research/bert's `google.py`;
Hugging Face's `hf_bert.py`, `hf_electra.py`, `hf_modernbert.py`, over `hf_folder.py` and the
tokenizer files' `hf_tokenizer.py`) and `formats.py`, the one table that warm start, config
reading, export and fine-tuning dispatch on."""
