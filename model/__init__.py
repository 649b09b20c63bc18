"""The Keras BERT, its heads and losses. Nothing here knows about files or strategies."""
