"""The ELMo backbone and the bidirectional LM: shapes, directions, padding, and what each LM learns."""

from __future__ import annotations

import numpy as np
import pytest


def _backbone(vocabulary: int = 12, dropout: float = 0.0):
    import keras

    from ptmkit_elmo.backbone import ELMoBackbone

    keras.utils.set_random_seed(3)
    return ELMoBackbone(vocabulary, 50, 4, [1, 2, 3], [3, 4, 5], 2, 6, 10, 2, dropout=dropout)


def _char_ids(words: list[list[str]], length: int) -> np.ndarray:
    from ptmkit_export.fields import character_table

    vocabulary = sorted({w for row in words for w in row})
    table = character_table(vocabulary, 50)
    index = {w: i for i, w in enumerate(vocabulary)}
    out = np.zeros((len(words), length, 50), np.int32)
    for r, row in enumerate(words):
        out[r, : len(row)] = table[[index[w] for w in row]]
    return out


def test_outputs_have_the_declared_shapes_and_dtypes() -> None:
    backbone = _backbone()
    words = [["the", "cat", "sat"], ["a", "dog", "ran", "far", "away"]]
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)
    out = backbone({"char_ids": _char_ids(words, 5), "padding_mask": mask})
    shapes = {name: tuple(int(d) for d in value.shape) for name, value in out.items()}
    assert shapes == {
        "sequence_output": (2, 5, 12),
        "hidden_states": (2, 3, 5, 12),  # token layer, then 2 biLSTM layers; hidden = 2 x projection 6
        "pooled_output": (2, 12),
        "forward_output": (2, 5, 6),
        "backward_output": (2, 5, 6),
    }
    import keras

    assert {keras.backend.standardize_dtype(value.dtype) for value in out.values()} == {"float32"}
    hidden = np.asarray(out["hidden_states"])
    np.testing.assert_array_equal(hidden[:, 0, :, :6], hidden[:, 0, :, 6:])  # layer 0 is [x; x]
    np.testing.assert_array_equal(hidden[:, -1], np.asarray(out["sequence_output"]))
    forward, backward = np.asarray(out["forward_output"]), np.asarray(out["backward_output"])
    np.testing.assert_array_equal(np.asarray(out["sequence_output"]), np.concatenate([forward, backward], -1))
    pooled = np.asarray(out["pooled_output"])
    np.testing.assert_array_equal(pooled[0], np.concatenate([forward[0, 2], backward[0, 0]]))  # row 0's last token is position 2
    np.testing.assert_array_equal(pooled[1], np.concatenate([forward[1, 4], backward[1, 0]]))


def test_directions_read_one_side_and_padding_changes_nothing() -> None:
    """Forward states at i depend on tokens <= i only, backward ones on tokens >= i only; a padded
    row's states equal the unpadded row's (the backward LSTM skips the padding it starts on)."""
    backbone = _backbone()
    a = ["the", "cat", "sat", "on", "mats"]
    b = ["the", "cat", "ran", "on", "mats"]  # differs at position 2
    both = backbone({"char_ids": _char_ids([a, b], 5), "padding_mask": np.ones((2, 5), np.int32)})
    forward, backward = np.asarray(both["forward_output"]), np.asarray(both["backward_output"])
    np.testing.assert_allclose(forward[0, :2], forward[1, :2], atol=1e-6)
    assert np.abs(forward[0, 2:] - forward[1, 2:]).min(axis=-1).max() > 0
    np.testing.assert_allclose(backward[0, 3:], backward[1, 3:], atol=1e-6)
    assert np.abs(backward[0, :3] - backward[1, :3]).max(axis=-1).min() > 1e-6
    alone = backbone({"char_ids": _char_ids([a], 5), "padding_mask": np.ones((1, 5), np.int32)})
    padded = backbone({"char_ids": _char_ids([a], 8), "padding_mask": np.array([[1] * 5 + [0] * 3], np.int32)})
    for key in ("forward_output", "backward_output", "hidden_states"):
        axis = 2 if key == "hidden_states" else 1
        np.testing.assert_allclose(np.take(np.asarray(padded[key]), range(5), axis=axis), np.asarray(alone[key]), atol=1e-5)


def test_bidirectional_targets_by_hand() -> None:
    from ptmkit_elmo.objectives import bidirectional_targets

    ids = np.array([[2, 7, 8, 9, 3, 0]], np.int32)  # <S> w w w </S> <pad>
    mask = np.array([[1, 1, 1, 1, 1, 0]], np.int32)
    targets, weights = bidirectional_targets(ids, mask)
    np.testing.assert_array_equal(targets[0, 0], [7, 8, 9, 3, 0, 0])  # next token
    np.testing.assert_array_equal(weights[0, 0], [1, 1, 1, 1, 0, 0])
    np.testing.assert_array_equal(targets[0, 1], [0, 2, 7, 8, 9, 0])  # previous token
    np.testing.assert_array_equal(weights[0, 1], [0, 1, 1, 1, 1, 0])


def test_backward_lm_learns_the_previous_word_and_forward_the_next() -> None:
    """On a cycle of 6 words the next and the previous word always differ: a few steps of the
    objective lower both losses, and each direction then predicts its own neighbour."""
    import keras

    from ptmkit_elmo.objectives import BiLM, BiLMConfig, bidirectional_targets

    cycle = ["red", "green", "blue", "cyan", "pink", "gold"]
    vocabulary = ["<pad>", *cycle]
    backbone = _backbone(vocabulary=len(vocabulary))
    inputs = {"char_ids": keras.Input((None, 50), dtype="int32", name="char_ids"), "padding_mask": keras.Input((None,), dtype="int32", name="padding_mask")}
    _, outputs, losses, _ = BiLM().build(backbone, inputs, BiLMConfig())
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=losses)
    rows = [[cycle[(start + i) % 6] for i in range(9)] for start in range(6)]
    ids = np.array([[vocabulary.index(w) for w in row] for row in rows], np.int32)
    mask = np.ones_like(ids)
    x = {"char_ids": _char_ids(rows, 9), "padding_mask": mask}
    targets, weights = bidirectional_targets(ids, mask)

    def direction_losses() -> np.ndarray:
        log_probs = np.asarray(keras.ops.log_softmax(model.predict(x, verbose=0)["bilm"], axis=-1))  # (batch, 2, sequence, vocabulary)
        picked = np.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
        return -(picked * weights).sum(axis=(0, 2)) / weights.sum(axis=(0, 2))

    before = direction_losses()
    for _ in range(60):
        model.train_on_batch(x, targets, sample_weight=weights)
    after = direction_losses()
    assert after[0] < 0.5 * before[0] and after[1] < 0.5 * before[1], (before, after)
    predicted = np.argmax(model.predict(x, verbose=0)["bilm"], axis=-1)
    assert np.mean(predicted[:, 0, :-1] == ids[:, 1:]) == 1.0  # forward: the next word
    assert np.mean(predicted[:, 1, 1:] == ids[:, :-1]) == 1.0  # backward: the previous word, never the next
    assert np.mean(predicted[:, 1, 1:-1] == ids[:, 2:]) == 0.0


def test_config_refuses_mismatched_filters() -> None:
    from ptmkit.api import ConfigError
    from ptmkit_elmo.config import ELMoConfig

    with pytest.raises(ConfigError, match=r"'model.filter_widths' \(2 entries\) and 'model.filter_counts' \(3\)"):
        ELMoConfig(filter_widths=[1, 2], filter_counts=[1, 2, 3]).validate()
    with pytest.raises(ConfigError, match="width 60, wider than the 50 characters read per word"):
        ELMoConfig(filter_widths=[1, 60], filter_counts=[1, 1]).validate()
