"""The Keras BERT, ELECTRA, their heads and losses. Nothing here knows about files or strategies.

Importing the package registers its layers and losses with Keras, so `import model` is all a saved
`.keras` file needs before `keras.saving.load_model`.
"""

from model import bert, electra, losses  # noqa: F401 - imported for their Keras registrations
