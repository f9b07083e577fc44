"""The ``translation`` objective: sequence-to-sequence cross-entropy with label smoothing, and the
paper's inverse-square-root learning-rate schedule (Vaswani et al. 2017, sections 5.3 and 5.4).

Written for any encoder-decoder whose inputs are the four ``(batch, sequence)`` int32 arrays of
:func:`pack_pairs`; the denoising objectives (BART, T5, MASS: :mod:`ptmkit_transformer.denoising`)
make their pairs from monolingual text and reuse the packing, the loss and the schedule.

A pair ``(source, target)`` of token ids (no specials) becomes::

    encoder_token_ids   source </s>         (after model.source_start_token where set: BART's <s>)
    decoder_token_ids   <s> target          (teacher forcing: the target shifted right; <s>: model.decoder_start_token)
    labels              target </s>         (what each decoder position predicts)

each padded with ``<pad>`` (mask 0, label weight 0) to the batch's length.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ptmkit_export.translation import pack_sources, padded_length


def label_smoothed_nll(labels: Any, logits: Any, smoothing: float) -> Any:
    """Per-position cross-entropy against label-smoothed targets (Szegedy et al. 2016, as the
    Transformer paper uses it with ``epsilon_ls = 0.1``).

    The target distribution puts ``1 - smoothing`` on the label and spreads ``smoothing``
    uniformly over the whole vocabulary (Keras' ``CategoricalCrossentropy(label_smoothing=)``
    rule), so the loss is ``(1 - smoothing) * -log p(label) + smoothing * mean_v(-log p(v))``.

    Args:
        labels: ``(batch, target)`` int token ids.
        logits: ``(batch, target, vocabulary)`` float.
        smoothing: in ``[0, 1)``.

    Returns:
        ``(batch, target)`` float32 losses (nats); padding is left to the sample weights.
    """
    from keras import ops

    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    nll = -ops.take_along_axis(log_probs, ops.expand_dims(ops.cast(labels, "int32"), -1), axis=-1)[..., 0]
    if not smoothing:
        return nll
    return (1.0 - smoothing) * nll - smoothing * ops.mean(log_probs, axis=-1)


def inverse_sqrt_rate(step: Any, hidden_dim: int, warmup_steps: int, scale: float = 1.0) -> Any:
    """The paper's equation 3, ``scale * d_model^-0.5 * min(n^-0.5, n * warmup_steps^-1.5)`` at
    training step ``n = step + 1`` (``step`` 0-based, as Keras' optimizer counts): a linear rise
    to ``scale * (d_model * warmup_steps)^-0.5`` at ``n = warmup_steps``, then ``n^-0.5`` decay."""
    from keras import ops

    n = ops.cast(step, "float32") + 1.0
    return scale * hidden_dim**-0.5 * ops.minimum(ops.power(n, -0.5), n * float(warmup_steps) ** -1.5)


def _schedule_class() -> type:
    import keras

    @keras.saving.register_keras_serializable(package="ptmkit_transformer")
    class InverseSqrtSchedule(keras.optimizers.schedules.LearningRateSchedule):
        """:func:`inverse_sqrt_rate` as a Keras schedule."""

        def __init__(self, hidden_dim: int, warmup_steps: int, scale: float = 1.0) -> None:
            self.hidden_dim, self.warmup_steps, self.scale = int(hidden_dim), int(warmup_steps), float(scale)

        def __call__(self, step: Any) -> Any:
            return inverse_sqrt_rate(step, self.hidden_dim, self.warmup_steps, self.scale)

        def get_config(self) -> dict[str, Any]:
            return {"hidden_dim": self.hidden_dim, "warmup_steps": self.warmup_steps, "scale": self.scale}

    return InverseSqrtSchedule


def inverse_sqrt_schedule(hidden_dim: int, warmup_steps: int, scale: float = 1.0) -> Any:
    """A ``keras.optimizers.schedules.LearningRateSchedule`` of :func:`inverse_sqrt_rate`."""
    return _schedule_class()(hidden_dim, warmup_steps, scale)


def pack_pairs(
    sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]], bos: int, eos: int, pad: int, limit: int, prefix: Sequence[int] = ()
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """One batch of pairs as ``(inputs, labels, weights)`` (module docstring); ``prefix``: the
    tokens before every source (``model.source_start_token``).

    Returns:
        ``inputs``: ``encoder_token_ids``, ``encoder_padding_mask``, ``decoder_token_ids``,
        ``decoder_padding_mask``, ``(batch, length)`` int32; ``labels`` ``(batch, target)`` int32;
        ``weights`` ``(batch, target)`` float32, 1 on real labels and 0 on padding.
    """
    source_ids, source_mask = pack_sources(sources, eos, pad, limit, prefix)
    cut = [list(t[: limit - 1]) for t in targets]
    length = padded_length(max(len(t) + 1 for t in cut), limit)
    decoder_ids = np.full((len(cut), length), pad, np.int32)
    labels = np.full((len(cut), length), pad, np.int32)
    weights = np.zeros((len(cut), length), np.float32)
    for i, target in enumerate(cut):
        decoder_ids[i, : len(target) + 1] = [bos, *target]
        labels[i, : len(target) + 1] = [*target, eos]
        weights[i, : len(target) + 1] = 1.0
    inputs = {
        "encoder_token_ids": source_ids,
        "encoder_padding_mask": source_mask,
        "decoder_token_ids": decoder_ids,
        "decoder_padding_mask": (weights > 0).astype(np.int32),
    }
    return inputs, labels, weights


def epoch_order(seed: int, epoch: int, count: int) -> np.ndarray:
    """The order of the ``count`` training pairs in ``epoch``: a permutation drawn from
    ``(seed, epoch)``, so that a step's pairs are a pure function of ``(seed, step)``."""
    return np.random.default_rng([seed, 17, epoch]).permutation(count)


def step_indices(seed: int, step: int, batch_size: int, count: int) -> np.ndarray:
    """Indices of the pairs of (0-based) step ``step``: the next ``batch_size`` of the epochs'
    orders (:func:`epoch_order`), read across an epoch's end."""
    first = step * batch_size
    out = []
    while len(out) < batch_size:
        epoch, offset = divmod(first + len(out), count)
        order = epoch_order(seed, epoch, count)
        out.extend(order[offset : offset + batch_size - len(out)].tolist())
    return np.asarray(out, np.int64)
