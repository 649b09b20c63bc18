"""Model FLOPs per training example (what MFU divides by), counted independently from a built
model's own kernels, for each objective."""

import numpy as np

from model.config import BertConfig
from model.masked_lm import build_pretraining_model
from model.pretraining import Objective


def test_training_flops_match_the_models_own_matmuls():
    config = BertConfig(vocab_size=37, hidden_size=12, num_layers=3, num_heads=3, intermediate_size=29,
                        max_position=16)  # fmt: skip
    t, p = 11, 4
    model = build_pretraining_model(config, t, p, next_sentence=True)
    encoder_kernels = sum(
        int(np.prod(w.shape))
        for w in model.weights
        if w.path.startswith("transformer_") and "kernel" in w.path
    )
    attention = config.num_layers * 2 * (2 * t * t * config.hidden_size)  # scores and context
    transform = int(np.prod(model.get_layer("mlm_transform").kernel.shape))
    vocab = int(np.prod(model.get_layer("token_embedding").embeddings.shape))  # tied output projection
    pooler = int(np.prod(model.get_layer("pooler").kernel.shape))
    forward = 2 * t * encoder_kernels + attention + 2 * p * (transform + vocab) + 2 * pooler
    assert Objective().training_flops_per_example(config, t, p) == 3 * forward


def test_electra_flops_count_both_networks_and_the_discriminator_on_every_token():
    config = BertConfig(vocab_size=37, hidden_size=12, num_layers=3, num_heads=3, intermediate_size=29,
                        max_position=16)  # fmt: skip
    objective = Objective("electra", generator_size=1 / 3)
    t, p = 11, 4
    model = objective.build(config, t, p, excluded_ids=(0, 1, 2, 3, 4))

    def kernels(*prefixes: str) -> int:
        return sum(
            int(np.prod(w.shape)) for w in model.weights if w.path.startswith(prefixes) and "kernel" in w.path
        )

    generator_hidden = model.get_layer("generator_transformer_0").hidden_size
    attention = 3 * 2 * 2 * t * t * (config.hidden_size + generator_hidden)  # both networks' scores, context
    vocab = int(np.prod(model.get_layer("token_embedding").embeddings.shape))
    forward = (
        2 * t * kernels("transformer_", "rtd_", "generator_transformer_", "generator_embedding_projection")
        + attention
        + 2 * p * (kernels("generator_mlm_transform") + vocab)
    )
    assert objective.training_flops_per_example(config, t, p) == 3 * forward
    assert objective.training_flops_per_example(config, t, p) > Objective().training_flops_per_example(
        config, t, p
    )
