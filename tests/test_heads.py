"""Fine-tuning heads: the classification head's shapes and its initialisation."""

from __future__ import annotations

import numpy as np
import pytest

from tests.tinyconfig import TINY


@pytest.mark.parametrize("initializer_range", [0.02, 0.05])
def test_classification_head_is_initialised_as_transformers_does(initializer_range: float) -> None:
    """``BertForSequenceClassification`` draws its classifier from normal(0, initializer_range)
    with a zero bias; Keras' TruncatedNormal(0.02) would give a deviation of 0.0176 and nothing
    beyond two deviations, and fails both checks."""
    import keras

    from ptmkit.plugins import get_registry
    from ptmkit.training.finetune import build_classifier
    from ptmkit.training.pretrain import resolve_config

    keras.utils.set_random_seed(3)
    registry = get_registry()
    config = resolve_config(registry, "bert", None, [*TINY, f"head.initializer_range={initializer_range}"])
    backbone = registry.family("bert").build_backbone(config.model)
    model = build_classifier(registry, config, backbone, 400)
    kernel = model.get_layer("logits").kernel.numpy()
    assert kernel.shape == (config.model.hidden_dim, 400)
    assert np.all(model.get_layer("logits").bias.numpy() == 0.0)
    # 12,800 draws: the sample deviation is within 2% of sigma with overwhelming probability.
    assert kernel.std() == pytest.approx(initializer_range, rel=0.02)
    beyond = np.mean(np.abs(kernel) > 2 * initializer_range)
    assert 0.035 < beyond < 0.056  # a normal puts 4.55% beyond two deviations

    inputs = {
        "token_ids": np.ones((3, 7), np.int32),
        "segment_ids": np.zeros((3, 7), np.int32),
        "padding_mask": np.ones((3, 7), np.int32),
    }
    logits = model.predict(inputs, verbose=0)
    assert logits.shape == (3, 400) and logits.dtype == np.float32
