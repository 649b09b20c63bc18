"""The Keras BERT, ModernBERT's block, ELECTRA, their heads and losses. Nothing here knows about
files or strategies.

Importing the package registers its layers and losses with Keras, so `import model` is all a saved
`.keras` file needs before `keras.saving.load_model`.
"""

# imported for their Keras registrations
from model import bert, electra, layers, losses, modernbert  # noqa: F401
