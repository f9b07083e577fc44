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


def test_mean_pooling_head_reads_the_masked_mean_of_the_hidden_states() -> None:
    """head.pooling = "mean": logits are the output layer applied to the mean of sequence_output
    over the non-padding tokens (sentence-transformers' mean pooling), computed here in NumPy;
    padding does not change them."""
    from ptmkit.plugins import get_registry
    from ptmkit.training.finetune import build_classifier
    from ptmkit.training.pretrain import resolve_config

    registry = get_registry()
    config = resolve_config(registry, "bert", None, [*TINY, "head.pooling=mean"])
    backbone = registry.family("bert").build_backbone(config.model)
    model = build_classifier(registry, config, backbone, 3)
    rng = np.random.default_rng(0)
    mask = np.array([[1] * 7, [1] * 4 + [0] * 3], np.int32)
    inputs = {"token_ids": rng.integers(5, 600, (2, 7)).astype(np.int32) * mask, "segment_ids": np.zeros((2, 7), np.int32), "padding_mask": mask}
    hidden = backbone.predict(inputs, verbose=0)["sequence_output"]
    pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    layer = model.get_layer("logits")
    expected = pooled @ layer.kernel.numpy() + layer.bias.numpy()
    np.testing.assert_allclose(model.predict(inputs, verbose=0), expected, atol=1e-5)
    short = {name: values[1:, :4] for name, values in inputs.items()}
    np.testing.assert_allclose(model.predict(short, verbose=0)[0], expected[1], atol=1e-5)
    with pytest.raises(Exception, match="head.pooling"):
        resolve_config(registry, "bert", None, ["head.pooling=max"])
