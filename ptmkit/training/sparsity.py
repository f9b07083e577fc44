"""Gradual magnitude pruning during fine-tuning (Zhu & Gupta 2017, "To prune, or not to prune").

Every ``every`` steps from ``begin`` to ``end`` the smallest-magnitude weights of each kernel are
set to zero, so that each kernel's sparsity follows their polynomial schedule (eq. 1)::

    s_t = s_f + (s_i - s_f) * (1 - (t - t_0) / (n * dt)) ** 3,   t in {t_0, t_0 + dt, ..., t_0 + n dt}

with ``s_i = 0``; between pruning steps, and after ``end``, the pruned weights are kept at zero
after every update (their binary mask, eq. 1's "masked weights are not updated"). The kernels are
the model's variables named ``kernel`` (dense and attention projections; the embeddings are not
pruned, as in Gordon et al. 2020's BERT pruning of the encoder's matrices); each kernel is pruned
to its own sparsity (their "layer-wise" choice). The weights stay dense: the exported model is
not smaller, it compresses (zeros) and suits sparse kernels.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np


def polynomial_sparsity(step: int, final: float, begin: int, end: int, every: int, initial: float = 0.0) -> float:
    """Zhu & Gupta's target sparsity at ``step`` (eq. 1): ``initial`` before ``begin``, ``final``
    from ``end`` on, the cubic in between, held constant between pruning steps (every ``every``
    steps from ``begin``).

    >>> [round(polynomial_sparsity(t, 0.8, 0, 100, 25), 4) for t in (0, 10, 25, 50, 75, 100, 150)]
    [0.0, 0.0, 0.4625, 0.7, 0.7875, 0.8, 0.8]
    """
    if step < begin:
        return initial
    if step >= end:
        return final
    pruned_at = begin + (step - begin) // every * every
    return final + (initial - final) * (1.0 - (pruned_at - begin) / (end - begin)) ** 3


def prunable_kernels(model: Any) -> list[Any]:
    """The model's variables named ``kernel`` (every dense and attention projection, the head's too)."""
    return [v for v in model.weights if v.name == "kernel" or v.path.endswith("/kernel")]


def magnitude_mask(weights: np.ndarray, sparsity: float) -> np.ndarray:
    """A 0/1 mask of ``weights``' shape keeping all but the ``floor(sparsity * size)`` weights of
    smallest magnitude (ties broken by position)."""
    k = int(sparsity * weights.size)
    mask = np.ones(weights.size, weights.dtype)
    mask[np.argsort(np.abs(weights).ravel(), kind="stable")[:k]] = 0
    return mask.reshape(weights.shape)


class MagnitudePruning(keras.callbacks.Callback):
    """Prune ``kernels`` on the polynomial schedule during ``fit`` (see the module docstring).

    Args:
        kernels: the variables to prune (:func:`prunable_kernels`).
        final: final sparsity in ``[0, 1)``.
        begin, end: the global steps (1-based: after that many updates) of the first pruning and
            of the one that reaches ``final``.
        every: steps between pruning steps.
        start: the global step the fit starts after (a resumed run's).
    """

    def __init__(self, kernels: list[Any], final: float, begin: int, end: int, every: int, start: int = 0) -> None:
        super().__init__()
        self.kernels, self.final, self.begin, self.end, self.every, self.step = kernels, final, begin, end, every, start
        self.masks: list[np.ndarray] | None = None

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        if self.step >= self.begin:  # resumed: the zeros are the smallest weights
            self._prune(polynomial_sparsity(self.step, self.final, self.begin, self.end, self.every))

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.step += 1
        if self.begin <= self.step <= self.end and (
            (self.step - self.begin) % self.every == 0 or self.step == self.end
        ):
            self._prune(polynomial_sparsity(self.step, self.final, self.begin, self.end, self.every))
        elif self.masks is not None:
            for kernel, mask in zip(self.kernels, self.masks, strict=True):
                kernel.assign(kernel.numpy() * mask)

    def _prune(self, sparsity: float) -> None:
        self.masks = []
        for kernel in self.kernels:
            values = kernel.numpy()
            mask = magnitude_mask(values, sparsity)
            kernel.assign(values * mask)
            self.masks.append(mask)

    def sparsity(self) -> float:
        """The fraction of the kernels' weights that are zero now."""
        zeros = sum(int(np.sum(k.numpy() == 0)) for k in self.kernels)
        return zeros / max(1, sum(int(np.prod(k.shape)) for k in self.kernels))
