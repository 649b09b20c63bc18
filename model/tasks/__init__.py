"""Task heads on the shared encoder, one module each (keras-hub's tasks): the sequence classifier
(`classifier.py`), the token tagger (`tagger.py`) and its linear-chain CRF (`crf.py`), the span
extractor (`span.py`). Each takes the encoder's inputs with one document per row."""
