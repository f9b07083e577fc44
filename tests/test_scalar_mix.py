"""ScalarMix against a hand computation of Peters et al. 2018's equation 1."""

from __future__ import annotations

import numpy as np
import pytest


def _hand_mix(h: np.ndarray, w: np.ndarray, gamma: float, layer_norm: bool) -> np.ndarray:
    if layer_norm:
        h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-12)
    s = np.exp(w) / np.exp(w).sum()
    out = np.zeros_like(h[:, 0])
    for j in range(h.shape[1]):
        out += s[j] * h[:, j]
    return gamma * out


@pytest.mark.parametrize("layer_norm", [False, True])
def test_scalar_mix_matches_hand_computation(layer_norm: bool) -> None:
    from ptmkit.heads.scalar_mix import ScalarMix

    rng = np.random.default_rng(0)
    h = rng.normal(size=(2, 3, 4, 5)).astype("float32")
    mix = ScalarMix(3, layer_norm=layer_norm)
    mix.build(h.shape)
    w, gamma = np.array([0.5, -1.0, 2.0], "float32"), 1.7
    mix.set_weights([w, np.float32(gamma)])
    np.testing.assert_allclose(np.asarray(mix(h)), _hand_mix(h.astype(np.float64), w, gamma, layer_norm), rtol=1e-5, atol=1e-5)


def test_scalar_mix_starts_as_the_mean_and_checks_layers() -> None:
    from ptmkit.heads.scalar_mix import ScalarMix

    h = np.arange(2 * 3 * 4, dtype="float32").reshape(2, 3, 4)
    np.testing.assert_allclose(np.asarray(ScalarMix(3)(h)), h.mean(axis=1), rtol=1e-6)
    with pytest.raises(ValueError, match="ScalarMix of 2 layers called on 3 layers"):
        ScalarMix(2)(h)


def test_scalar_mix_learns_its_weights() -> None:
    """Gradients reach s and gamma: fitting the mix to one layer moves the weight onto it."""
    import keras

    from ptmkit.heads.scalar_mix import ScalarMix

    rng = np.random.default_rng(1)
    h = rng.normal(size=(64, 3, 6)).astype("float32")
    inputs = keras.Input((3, 6))
    model = keras.Model(inputs, ScalarMix(3)(inputs))
    model.compile(optimizer=keras.optimizers.Adam(0.1), loss="mse")
    model.fit(h, 2.0 * h[:, 2], epochs=60, batch_size=64, verbose=0)
    w, gamma = model.layers[-1].get_weights()
    s = np.exp(w) / np.exp(w).sum()
    assert s[2] > 0.9 and abs(float(gamma) - 2.0) < 0.3


def test_mix_head_needs_hidden_states() -> None:
    """``head.layers = "mix"`` on a backbone without a ``hidden_states`` output: one line naming what it gives."""
    import keras

    from ptmkit.errors import ConfigError
    from ptmkit.heads.classification import ClassificationConfig, SequenceClassification

    ids = keras.Input((None,), dtype="int32", name="token_ids")
    mask = keras.Input((None,), dtype="int32", name="padding_mask")
    states = keras.layers.Embedding(10, 4)(ids)
    backbone = keras.Model({"token_ids": ids, "padding_mask": mask}, {"sequence_output": states, "pooled_output": states[:, 0]})
    with pytest.raises(ConfigError, match="^head.layers = 'mix' needs a backbone output 'hidden_states' .*; this backbone gives sequence_output, pooled_output$"):
        SequenceClassification().build(backbone, 2, ClassificationConfig(layers="mix", pooling="mean"))
