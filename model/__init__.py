"""The Keras models, keras-hub's backbone/task split: the encoder both blocks share (`encoder.py`),
one module per block (`bert.py`, `modernbert.py`), per pretraining objective (`masked_lm.py`,
`electra.py`; `pretraining.py` chooses) and per task head (`tasks/`), and the losses. Nothing here
knows about files or strategies.

Importing the package registers its layers and losses with Keras, so `import model` is all a saved
`.keras` file needs before `keras.saving.load_model`.
"""

# imported for their Keras registrations
from model import bert, electra, encoder, layers, losses, masked_lm, modernbert  # noqa: F401
from model.tasks import classifier  # noqa: F401
