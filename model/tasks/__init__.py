"""Task heads on the shared encoder, one module each (keras-hub's tasks): the sequence classifier
(`classifier.py`). Each takes the encoder's inputs with one document per row."""
