"""The AWD-LSTM's regularisers and ULMFiT's fine-tuning maths against references: locked and
embedding dropout masks, DropConnect on W_hh (exact zeros while training, none at inference),
the LSTM against torch's nn.LSTM, concat pooling against NumPy with padding, the slanted
triangular schedule against the paper's formula, and the discriminative rates and unfreezing
epochs per layer."""

from __future__ import annotations

import math

import numpy as np
import pytest


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def numpy_lstm(x: np.ndarray, mask: np.ndarray, w_ih: np.ndarray, w_hh: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Keras/PyTorch's LSTM (gates i, f, g, o), a masked step carrying the state; ``(batch, sequence, units)``."""
    units = w_hh.shape[0]
    h = np.zeros((x.shape[0], units))
    c = np.zeros_like(h)
    out = np.zeros((*x.shape[:2], units))
    for t in range(x.shape[1]):
        z = x[:, t] @ w_ih + h @ w_hh + b
        i, f, g, o = (z[:, k * units : (k + 1) * units] for k in range(4))
        c_new = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h_new = _sigmoid(o) * np.tanh(c_new)
        keep = mask[:, t : t + 1]
        h, c = np.where(keep, h_new, h), np.where(keep, c_new, c)
        out[:, t] = h
    return out


def test_tied_decoder_adds_its_own_bias_and_saves_it(tmp_path) -> None:
    """logits = h @ E^T + b (fastai's tied decoder); the bias survives save and load of the
    backbone's weights (ReversibleEmbedding saves only its serialization spec's variables)."""
    from ptmkit_ulmfit.backbone import ULMFiTBackbone

    backbone = ULMFiTBackbone(30, 4, 6, 2)
    table = np.asarray(backbone.token_embedding.embeddings, np.float64)
    bias = np.linspace(-2.0, 3.0, 30)
    backbone.token_embedding.bias.assign(bias.astype(np.float32))
    h = np.random.default_rng(0).normal(size=(2, 5, 4)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(backbone.logits(h)), h @ table.T + bias, atol=1e-5)
    backbone.save_weights(tmp_path / "b.weights.h5")
    again = ULMFiTBackbone(30, 4, 6, 2)
    again.load_weights(tmp_path / "b.weights.h5")
    np.testing.assert_array_equal(np.asarray(again.token_embedding.bias), bias.astype(np.float32))
    plain = ULMFiTBackbone(30, 4, 6, 2, decoder_bias=False)  # fastai-less variant: the tied softmax alone
    np.testing.assert_allclose(np.asarray(plain.logits(h)), h @ np.asarray(plain.token_embedding.embeddings, np.float64).T, atol=1e-5)


def test_locked_dropout_keeps_one_mask_across_time_steps() -> None:
    from ptmkit_ulmfit.backbone import LockedDropout

    layer = LockedDropout(0.5, seed=3)
    x = np.ones((4, 9, 16), np.float32)
    y = np.asarray(layer(x, training=True))
    assert set(np.unique(y)) == {0.0, 2.0}  # dropped, or kept and scaled by 1 / (1 - 0.5)
    assert (y == y[:, :1, :]).all()  # the same mask at every step of a sequence
    assert 0.3 < (y == 0).mean() < 0.7
    assert not (y[0] == y[1]).all()  # each sequence its own mask
    np.testing.assert_array_equal(np.asarray(layer(x, training=False)), x)


def test_embedding_dropout_drops_whole_words() -> None:
    from ptmkit_ulmfit.backbone import DroppedEmbedding

    layer = DroppedEmbedding(40, 6, dropout=0.5, seed=1)
    ids = np.tile(np.arange(40, dtype=np.int32), (3, 1))  # every word three times
    layer.build(ids.shape)
    table = np.asarray(layer.embeddings)
    y = np.asarray(layer(ids, training=True))
    dropped = (y == 0).all(-1)
    assert (dropped == dropped[:1]).all()  # a word is dropped at every occurrence or none
    assert 5 < dropped[0].sum() < 35
    np.testing.assert_allclose(y[0][~dropped[0]], 2.0 * table[~dropped[0]], rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(layer(ids, training=False)), table[ids])
    logits = np.asarray(layer(np.ones((2, 6), np.float32), reverse=True))  # the tied softmax reads the undropped table
    np.testing.assert_allclose(logits, np.ones((2, 6)) @ table.T, rtol=1e-5, atol=1e-7)


def test_weight_drop_zeroes_recurrent_weights_while_training_only() -> None:
    """Training: the LSTM computes with W_hh * m / (1 - p), one mask m for all time steps (the
    output equals the NumPy LSTM run with those weights), the dropped weights exactly zero;
    inference: plain W_hh."""
    from ptmkit_ulmfit.backbone import WeightDropLSTM

    rng = np.random.default_rng(0)
    layer = WeightDropLSTM(5, weight_dropout=0.5, seed=2)
    x = rng.normal(size=(3, 7, 4)).astype(np.float32)
    mask = np.ones((3, 7), bool)
    mask[1, 4:] = False
    layer(x, mask=mask)
    used = []
    original = layer.recurrent_weights
    layer.recurrent_weights = lambda training=None: used.append(original(training)) or used[-1]
    y = np.asarray(layer(x, mask=mask, training=True))
    w_ih, w_hh, b = (np.asarray(w, np.float64) for w in (layer.cell.kernel, layer.cell.recurrent_kernel, layer.cell.bias))
    dropped = np.asarray(used[0], np.float64)
    zero = dropped == 0
    assert 0.3 < zero.mean() < 0.7
    np.testing.assert_allclose(dropped[~zero], 2.0 * w_hh[~zero], rtol=1e-6)
    np.testing.assert_allclose(y, numpy_lstm(x, mask, w_ih, dropped, b), atol=1e-5)
    assert np.abs(y - numpy_lstm(x, mask, w_ih, w_hh, b)).max() > 1e-3  # the drop changed the output
    np.testing.assert_allclose(np.asarray(layer(x, mask=mask, training=False)), numpy_lstm(x, mask, w_ih, w_hh, b), atol=1e-5)


def test_lstm_equals_torch_lstm() -> None:
    """At inference the layer is torch's nn.LSTM with W_ih = kernel^T, W_hh = recurrent_kernel^T,
    b_ih + b_hh = bias (the same gate order), on an unpadded batch and on each padded row cut
    to its length."""
    torch = pytest.importorskip("torch")
    from ptmkit_ulmfit.backbone import WeightDropLSTM

    rng = np.random.default_rng(1)
    layer = WeightDropLSTM(6, weight_dropout=0.3)
    x = rng.normal(size=(2, 5, 3)).astype(np.float32)
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], bool)
    ours = np.asarray(layer(x, mask=mask))
    reference = torch.nn.LSTM(3, 6, batch_first=True)
    with torch.no_grad():
        reference.weight_ih_l0.copy_(torch.tensor(np.asarray(layer.cell.kernel).T))
        reference.weight_hh_l0.copy_(torch.tensor(np.asarray(layer.cell.recurrent_kernel).T))
        reference.bias_ih_l0.copy_(torch.tensor(np.asarray(layer.cell.bias)))
        reference.bias_hh_l0.zero_()
        for row, length in enumerate(mask.sum(1)):
            expected = reference(torch.tensor(x[row : row + 1, :length]))[0].numpy()[0]
            np.testing.assert_allclose(ours[row, :length], expected, atol=1e-5)


def test_concat_pooling_reads_only_the_tokens() -> None:
    """[h_T; max; mean] over the tokens, by NumPy; what the padding holds changes nothing; a row
    of padding only pools to zeros."""
    from ptmkit_ulmfit.backbone import ConcatPooling

    rng = np.random.default_rng(2)
    states = rng.normal(size=(3, 6, 4)).astype(np.float32)
    mask = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0]], np.int32)
    noisy = states.copy()
    noisy[mask == 0] = 50.0  # a max or mean over the padding would show it
    pooled = np.asarray(ConcatPooling()(noisy, mask))
    for row, length in enumerate(mask.sum(1)[:2]):
        h = states[row, :length]
        np.testing.assert_allclose(pooled[row], np.concatenate([h[-1], h.max(0), h.mean(0)]), rtol=1e-6)
    np.testing.assert_array_equal(pooled[2], np.zeros(12))


def stlr(t: int, total: int, peak: float, cut_frac: float = 0.1, ratio: float = 32.0) -> float:
    """Howard and Ruder 2018, equation 3, transcribed."""
    cut = math.floor(total * cut_frac)
    p = t / cut if t < cut else 1 - (t - cut) / (cut * (1 / cut_frac - 1))
    return peak * (1 + p * (ratio - 1)) / ratio


def test_slanted_triangular_schedule_is_the_papers_formula() -> None:
    from ptmkit.testing import SlantedTriangular

    schedule = SlantedTriangular(0.01, 1000, cut_frac=0.1, ratio=32)
    for t in (0, 1, 50, 99, 100, 101, 500, 999):
        assert float(schedule(t)) == pytest.approx(stlr(t, 1000, 0.01), rel=1e-5), t
    assert float(schedule(0)) == pytest.approx(0.01 / 32)
    assert float(schedule(100)) == pytest.approx(0.01)
    assert float(schedule(1000)) == pytest.approx(0.01 / 32)  # the end of the fall


def test_discriminative_rates_and_unfreezing_per_layer() -> None:
    """lr / 2.6 per layer down from the head (the last LSTM layer lr / 2.6, the embedding
    lr / 2.6^4 with 3 layers); the last LSTM layer unfreezes at epoch 1, the embedding at 4."""
    from ptmkit.testing import layer_lr_multipliers, unfreeze_steps
    from ptmkit_ulmfit.backbone import ULMFiTBackbone

    backbone = ULMFiTBackbone(30, 4, 6, 3)
    factors = layer_lr_multipliers(backbone, 1 / 2.6)
    starts = unfreeze_steps(backbone, 10)
    for path, depth in (("token_embedding/embeddings", 0), ("lstm_0/lstm_cell/kernel", 1), ("lstm_1/lstm_cell/bias", 2), ("lstm_2/lstm_cell/recurrent_kernel", 3)):
        assert factors[path] == pytest.approx(2.6 ** -(4 - depth)), path
        assert starts[path] == (4 - depth) * 10, path
    assert len(factors) == len(backbone.weights)
