"""Masked LM and next-sentence prediction: the statistics of BERT's recipe, on real batches."""

from __future__ import annotations

import numpy as np
import pytest

from ptmkit.contract import SpecialTokens
from ptmkit.objectives.mlm import MaskedLMConfig, mask_tokens

SPECIALS = SpecialTokens(pad=0, unk=1, cls=2, sep=3, mask=4)
VOCAB = 1000


def packed_batch(rng: np.random.Generator, batch: int = 512, length: int = 128) -> tuple[np.ndarray, np.ndarray]:
    lengths = rng.integers(10, length + 1, size=batch)
    token_ids = np.zeros((batch, length), np.int32)
    padding_mask = np.zeros((batch, length), np.int32)
    for row, n in enumerate(lengths):
        token_ids[row, :n] = rng.integers(5, VOCAB, size=n)
        token_ids[row, 0], token_ids[row, n - 1] = SPECIALS.cls, SPECIALS.sep
        padding_mask[row, :n] = 1
    return token_ids, padding_mask


def test_masking_follows_bert_15_80_10_10() -> None:
    rng = np.random.default_rng(0)
    token_ids, padding_mask = packed_batch(rng)
    masked, positions, ids, weights = mask_tokens(token_ids, padding_mask, np.random.default_rng(1), MaskedLMConfig(), SPECIALS, VOCAB)
    assert positions.shape == ids.shape == weights.shape == (512, 20)  # ceil(0.15 * 128)
    real = (padding_mask == 1) & ~np.isin(token_ids, [SPECIALS.cls, SPECIALS.sep])
    selected = weights.sum()
    assert selected / real.sum() == pytest.approx(0.15, abs=0.005)
    rows, cols = np.nonzero(weights)
    chosen = positions[rows, cols]
    # Only real tokens are ever selected, each at most once per sequence, and targets are the originals.
    assert real[rows, chosen].all()
    assert all(len(set(positions[r, weights[r] == 1])) == int(weights[r].sum()) for r in range(512))
    np.testing.assert_array_equal(ids[rows, cols], token_ids[rows, chosen])
    corrupted = masked[rows, chosen]
    as_mask = np.mean(corrupted == SPECIALS.mask)
    unchanged = np.mean(corrupted == token_ids[rows, chosen])
    assert as_mask == pytest.approx(0.8, abs=0.02)
    # 10% random + 10% kept; a random draw equals the original with probability 1/VOCAB.
    assert unchanged == pytest.approx(0.1, abs=0.015)
    assert 1 - as_mask - unchanged == pytest.approx(0.1, abs=0.015)
    # Nothing outside the selected positions changes.
    untouched = np.ones_like(masked, bool)
    untouched[rows, chosen] = False
    np.testing.assert_array_equal(masked[untouched], token_ids[untouched])


def test_masking_is_a_function_of_the_generator_seed() -> None:
    token_ids, padding_mask = packed_batch(np.random.default_rng(0), batch=8)
    first = mask_tokens(token_ids, padding_mask, np.random.default_rng(7), MaskedLMConfig(), SPECIALS, VOCAB)
    again = mask_tokens(token_ids, padding_mask, np.random.default_rng(7), MaskedLMConfig(), SPECIALS, VOCAB)
    other = mask_tokens(token_ids, padding_mask, np.random.default_rng(8), MaskedLMConfig(), SPECIALS, VOCAB)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[1], other[1])


def test_short_sequences_get_at_least_one_prediction() -> None:
    token_ids = np.array([[2, 50, 3, 0, 0]], np.int32)
    padding_mask = np.array([[1, 1, 1, 0, 0]], np.int32)
    _, positions, ids, weights = mask_tokens(token_ids, padding_mask, np.random.default_rng(0), MaskedLMConfig(), SPECIALS, VOCAB)
    assert weights.sum() == 1 and positions[0, 0] == 1 and ids[0, 0] == 50


def test_relative_weights_make_keras_default_reduction_the_mean_over_real_predictions() -> None:
    """BERT's masked-LM loss is ``sum(w * nll) / sum(w)`` over the ``(batch, max_predictions)``
    list; Keras' default reduction divides by every slot, so the core rescales the 0/1 weights."""
    import keras

    from ptmkit.data.pretraining import relative_weights
    from ptmkit.objectives.mlm import prediction_loss

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 5, 11)).astype(np.float32)
    ids = rng.integers(0, 11, size=(4, 5)).astype(np.int32)
    weights = np.zeros((4, 5), np.float32)
    weights[0, :4] = weights[1, :2] = weights[2, :5] = 1.0  # row 3: no prediction at all
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_probs, ids[..., None], -1)[..., 0]
    expected = float((nll * weights).sum() / weights.sum())
    scaled = relative_weights(weights)
    assert scaled.dtype == np.float32 and scaled.mean() == pytest.approx(1.0)
    got = float(keras.ops.convert_to_numpy(prediction_loss()(ids, logits, sample_weight=scaled)))
    assert got == pytest.approx(expected, rel=1e-5)
    assert float(keras.ops.convert_to_numpy(prediction_loss()(ids, logits, sample_weight=weights))) == pytest.approx(expected * 11 / 20, rel=1e-5)
    assert not relative_weights(np.zeros((2, 3), np.float32)).any()
