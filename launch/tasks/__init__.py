"""Fine-tuning's tasks: labelled examples read from files or tfds (`labelled.py`), raw text encoded
in the graph with the run's vocab (`text_encoder.py`), and each task's figures (`classification.py`).
The heads themselves are `model/tasks/`; `launch.finetune` runs them."""
