"""Task heads on the shared encoder, one module each (keras-hub's tasks), each with the compile it
trains with beside its builder (its loss and metrics): the sequence classifier (`classifier.py`),
the token tagger (`tagger.py`) and its linear-chain CRF (`crf.py`), the span extractor
(`span.py`), and ModernBERT's dense-and-norm head that its task models put before their scores
(`head.py`). Each takes the encoder's inputs with one document per row. launch/finetune/ trains
them."""

IGNORE = -1  # a position without a label: no loss counts it (the tagger's pieces after a word's first)
