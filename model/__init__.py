"""The Keras BERT, its heads and losses. Nothing here knows about files or strategies.

Importing the package registers its layers and loss with Keras, so `import model` is all a saved
`.keras` file needs before `keras.saving.load_model`.
"""

from model import bert, losses  # noqa: F401 - imported for their Keras registrations
