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


def test_step_batches_take_a_new_order_each_epoch() -> None:
    """Each epoch is a permutation of every example, different from the last, and the same from
    run to run for a seed (Keras' fit(shuffle=True) repeats the first epoch's order once
    keras.utils.set_random_seed has run); a batch is a pure function of (seed, step), so a
    resumed run takes the batches the uninterrupted one took."""
    from ptmkit.training.finetune import step_batch

    x = {"token_ids": np.arange(100, dtype=np.int32)[:, None].repeat(3, axis=1)}
    y = np.arange(100, dtype=np.int32)

    def epochs(seed: int) -> list[np.ndarray]:  # 4 steps per epoch: 32, 32, 32, 4
        return [np.concatenate([step_batch(x, y, 32, seed, epoch * 4 + i)[1] for i in range(4)]) for epoch in range(3)]

    first = epochs(7)
    for order in first:
        assert sorted(order.tolist()) == list(range(100))
    assert not np.array_equal(first[0], first[1]) and not np.array_equal(first[1], first[2])
    assert all(np.array_equal(a, b) for a, b in zip(first, epochs(7), strict=True))
    assert not np.array_equal(first[0], epochs(8)[0])
    batch_x, batch_y = step_batch(x, y, 32, 7, 5)
    assert batch_x["token_ids"].shape == (32, 3) and np.array_equal(batch_x["token_ids"][:, 0], batch_y)
    assert step_batch(x, y, 32, 7, 3)[1].shape == (4,)
