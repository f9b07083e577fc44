"""Learning-rate schedule and optimiser used for pre-training and fine-tuning."""

from __future__ import annotations

from typing import Any

import keras


@keras.saving.register_keras_serializable(package="ptmkit")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0 to ``peak`` over ``warmup_steps``, then linear decay to 0 at
    ``total_steps`` (Devlin et al. 2019, appendix A.2).

    The rate at (0-based) step ``t`` is ``peak * t / warmup_steps`` during warm-up and
    ``peak * (total_steps - t) / (total_steps - warmup_steps)`` after it, as in BERT's
    ``optimization.py`` and Hugging Face's ``get_linear_schedule_with_warmup`` (so the first step
    has rate 0).

    Args:
        peak: float. The learning rate after warm-up.
        warmup_steps: int. Steps of warm-up (0: none).
        total_steps: int. Step at which the rate reaches 0.
    """

    def __init__(self, peak: float, warmup_steps: int, total_steps: int) -> None:
        self.peak = float(peak)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(max(total_steps, 1))

    def __call__(self, step: Any) -> Any:
        step = keras.ops.cast(step, "float32")
        warmup = keras.ops.cast(max(self.warmup_steps, 1), "float32")
        rising = self.peak * step / warmup
        remaining = keras.ops.cast(self.total_steps - self.warmup_steps, "float32")
        falling = self.peak * keras.ops.maximum(0.0, (self.total_steps - step) / keras.ops.maximum(remaining, 1.0))
        return keras.ops.where(step < self.warmup_steps, rising, falling)

    def get_config(self) -> dict[str, Any]:
        return {"peak": self.peak, "warmup_steps": self.warmup_steps, "total_steps": self.total_steps}


@keras.saving.register_keras_serializable(package="ptmkit")
class SlantedTriangular(keras.optimizers.schedules.LearningRateSchedule):
    """Slanted triangular learning rates (Howard and Ruder 2018, section 3.2, equation 3): a short
    linear rise to ``peak`` over the first ``cut_frac`` of the steps, then a long linear fall to
    ``peak / ratio``::

        cut = floor(T * cut_frac)
        p = t / cut                                       if t < cut
            1 - (t - cut) / (cut * (1 / cut_frac - 1))    otherwise
        lr_t = peak * (1 + p * (ratio - 1)) / ratio

    with ``T = total_steps`` and ``t`` the 0-based step (the paper's: ``cut_frac = 0.1``,
    ``ratio = 32``). With ``cut = 0`` (``T * cut_frac < 1``) the rise is skipped and the fall
    runs over all ``T`` steps from ``peak``.

    Args:
        peak: float. The learning rate at step ``cut`` (the paper's ``eta_max``).
        total_steps: int. T.
        cut_frac: float. The fraction of T spent rising, in [0, 1).
        ratio: float. How much smaller the lowest rate is than ``peak``.
    """

    def __init__(self, peak: float, total_steps: int, cut_frac: float = 0.1, ratio: float = 32.0) -> None:
        self.peak = float(peak)
        self.total_steps = int(max(total_steps, 1))
        self.cut_frac = float(cut_frac)
        self.ratio = float(ratio)

    def __call__(self, step: Any) -> Any:
        step = keras.ops.cast(step, "float32")
        cut = float(int(self.total_steps * self.cut_frac))
        if cut > 0:
            falling_span = cut * (1.0 / self.cut_frac - 1.0)
            p = keras.ops.where(step < cut, step / cut, 1.0 - (step - cut) / falling_span)
        else:
            p = 1.0 - step / float(self.total_steps)
        p = keras.ops.maximum(p, 0.0)
        return self.peak * (1.0 + p * (self.ratio - 1.0)) / self.ratio

    def get_config(self) -> dict[str, Any]:
        return {"peak": self.peak, "total_steps": self.total_steps, "cut_frac": self.cut_frac, "ratio": self.ratio}


@keras.saving.register_keras_serializable(package="ptmkit")
class AdamW(keras.optimizers.AdamW):
    """AdamW (Loshchilov & Hutter 2019) with epsilon where PyTorch and Hugging Face put it.

    ``keras.optimizers.AdamW`` folds the bias corrections into the step size and adds epsilon to
    the root of the *uncorrected* second moment, so early in training its epsilon weighs
    ``1 / sqrt(1 - beta_2^t)`` times more (31.6x at step 1, 3.2x at step 100) than the same value
    in ``torch.optim.AdamW``. This update is torch's, written in Keras' form::

        m <- beta_1 m + (1 - beta_1) g;    v <- beta_2 v + (1 - beta_2) g^2
        w <- w - lr sqrt(1 - beta_2^t) / (1 - beta_1^t) * m / (sqrt(v) + epsilon sqrt(1 - beta_2^t))

    i.e. ``w - lr * m_hat / (sqrt(v_hat) + epsilon)``. Decoupled weight decay (``w <- w - lr wd w``,
    before the step) is Keras' own and equals torch's. Fine-tuning MiniLM for 80 steps without
    dropout from the same head on the same batches, losses stay within 2.9e-6 of
    ``torch.optim.AdamW``'s, where ``keras.optimizers.AdamW`` drifts by 8e-3
    (``benchmarks/minilm_trajectory.py``; results in ``benchmarks/results/minilm_trajectory.md``).

    ``learning_rate_multipliers`` (``{variable path: factor}``) gives variables their own learning
    rate, ``factor`` times the schedule's, for the step and the decay alike (discriminative
    fine-tuning: :func:`ptmkit.training.strategies.layer_lr_multipliers`). ``unfreeze_steps``
    (``{variable path: step}``) keeps a variable frozen, with a zero gradient and no decay, until
    that 0-based optimizer step (gradual unfreezing: :func:`ptmkit.training.strategies.unfreeze_steps`).

    Sparse gradients (``tf.IndexedSlices`` from embedding lookups, one slice per occurrence of a
    token in the batch) are summed into a dense gradient first. Keras squares the slices one by
    one, so a token seen k times in a batch got ``sum g_i^2`` as its second-moment input instead of
    ``(sum g_i)^2`` (the segment embedding sees every position of the batch), and the global norm
    used for clipping was computed the same way; PyTorch's embedding gradients are dense.

    Under ``tf.distribute`` with several replicas the gradients are summed over the replicas
    before they are clipped: Keras clips each replica's partial gradient first and sums after
    (its ``_backend_apply_gradients``), which changes ``global_clipnorm``'s result whenever it
    clips, so a 2-worker run drifted from the one-device run by up to 4e-3 in 8 steps.
    """

    def __init__(
        self, *args: Any, learning_rate_multipliers: dict[str, float] | None = None, unfreeze_steps: dict[str, int] | None = None, **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.learning_rate_multipliers = dict(learning_rate_multipliers or {})
        self.unfreeze_steps = dict(unfreeze_steps or {})

    def _path(self, variable: Any) -> str:
        """``variable``'s Keras path. On TensorFlow the update step gets the ``tf.Variable`` under
        the Keras variable: its path is the Keras variable's, found by its index among the
        optimizer's variables."""
        path = getattr(variable, "path", None)
        return path if path is not None else self._trainable_variables[self._get_variable_index(variable)].path

    def _training(self, variable: Any) -> Any:
        """1.0 from the 0-based step ``unfreeze_steps[path]`` of ``variable`` on, 0.0 before
        (float32 tensor); None when it trains from the start."""
        start = self.unfreeze_steps.get(self._path(variable), 0) if self.unfreeze_steps else 0
        return keras.ops.cast(keras.ops.greater_equal(self.iterations, start), "float32") if start > 0 else None

    def _multiplier(self, variable: Any) -> float:
        """The learning-rate factor of ``variable`` (by its Keras path; 1 when none is set)."""
        return self.learning_rate_multipliers.get(self._path(variable), 1.0) if self.learning_rate_multipliers else 1.0

    def _apply_weight_decay(self, variables: Any) -> None:
        """Keras' decoupled decay ``w -= lr wd w``, with each variable's own ``lr`` (a PyTorch
        parameter group's learning rate scales its decay too)."""
        if not (self.learning_rate_multipliers or self.unfreeze_steps) or self.weight_decay is None:
            return super()._apply_weight_decay(variables)
        groups: dict[tuple[float, int], list[Any]] = {}
        for variable in variables:
            groups.setdefault((self._multiplier(variable), self.unfreeze_steps.get(self._path(variable), 0)), []).append(variable)
        decay = self.weight_decay
        try:
            for (factor, _), group in groups.items():
                gate = self._training(group[0])  # a frozen variable does not decay either
                # read when the step is traced: lr * (wd * f * gate) = (lr * f) * wd while it trains
                self.weight_decay = decay * factor if gate is None else gate * (decay * factor)
                super()._apply_weight_decay(group)
        finally:
            self.weight_decay = decay

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config["learning_rate_multipliers"] = self.learning_rate_multipliers
        config["unfreeze_steps"] = self.unfreeze_steps
        return config

    def apply(self, grads: Any, trainable_variables: Any = None) -> Any:
        if keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
            grads = _sum_over_replicas(grads)
        if self.unfreeze_steps:  # a variable not yet unfrozen gets no gradient: no step, no part in the clipping norm
            variables = trainable_variables if trainable_variables is not None else self._trainable_variables
            gates = [self._training(v) for v in variables]
            grads = [g if gate is None or g is None else g * keras.ops.cast(gate, g.dtype) for g, gate in zip(grads, gates, strict=True)]
        return super().apply(grads, trainable_variables)

    def _all_reduce_sum_gradients(self, grads_and_vars: Any) -> Any:
        """Keras' TensorFlow optimizer sums here, after clipping; :meth:`apply` summed already."""
        return list(grads_and_vars)

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        ops = keras.ops
        dtype = variable.dtype
        lr = ops.cast(learning_rate, dtype) * self._multiplier(variable)
        gradient = ops.cast(gradient, dtype)
        step = ops.cast(self.iterations + 1, dtype)
        beta_1_power = ops.power(ops.cast(self.beta_1, dtype), step)
        beta_2_power = ops.power(ops.cast(self.beta_2, dtype), step)
        m = self._momentums[self._get_variable_index(variable)]
        v = self._velocities[self._get_variable_index(variable)]
        root_correction = ops.sqrt(1 - beta_2_power)
        alpha = lr * root_correction / (1 - beta_1_power)
        self.assign_add(m, ops.multiply(ops.subtract(gradient, m), 1 - self.beta_1))
        self.assign_add(v, ops.multiply(ops.subtract(ops.square(gradient), v), 1 - self.beta_2))
        if self.amsgrad:
            v_hat = self._velocity_hats[self._get_variable_index(variable)]
            self.assign(v_hat, ops.maximum(v_hat, v))
            v = v_hat
        epsilon = ops.multiply(ops.cast(self.epsilon, dtype), root_correction)
        self.assign_sub(variable, ops.divide(ops.multiply(m, alpha), ops.add(ops.sqrt(v), epsilon)))


def _sum_over_replicas(grads: list[Any]) -> list[Any]:
    """Each gradient summed over the replicas of the current ``tf.distribute`` strategy (an
    all-reduce; ``None`` stays ``None``); unchanged with one replica or outside a replica."""
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return grads
    present = [i for i, g in enumerate(grads) if g is not None]
    reduced = context.all_reduce(tf.distribute.ReduceOp.SUM, [grads[i] for i in present]) if present else []
    out = list(grads)
    for i, g in zip(present, reduced, strict=True):
        out[i] = g
    return out


def adamw(
    learning_rate: float, weight_decay: float, total_steps: int, warmup_ratio: float, epsilon: float = 1e-6, multipliers: dict[str, float] | None = None,
    unfreeze: dict[str, int] | None = None, schedule: str = "linear", ratio: float = 32.0,
) -> Any:
    """:class:`AdamW` with :class:`WarmupLinearDecay`; LayerNorm scales/offsets and biases get no
    decay (as BERT's optimizer, Hugging Face's Trainer and keras-hub's ``BertMaskedLM`` do); global
    gradient-norm clipping at 1 (``torch.nn.utils.clip_grad_norm_(..., 1.0)``). ``multipliers``
    scales the learning rate (and so the decay) of the variables whose paths it names
    (:func:`ptmkit.training.strategies.layer_lr_multipliers`); ``unfreeze`` holds variables frozen
    until the step it names (:func:`ptmkit.training.strategies.unfreeze_steps`). ``schedule``:
    ``"linear"`` (:class:`WarmupLinearDecay`) or ``"slanted_triangular"`` (:class:`SlantedTriangular`
    with ``cut_frac = warmup_ratio`` and ``ratio``).
    """
    if schedule == "slanted_triangular":
        rate: Any = SlantedTriangular(learning_rate, total_steps, warmup_ratio, ratio)
    else:
        rate = WarmupLinearDecay(learning_rate, int(round(warmup_ratio * total_steps)), total_steps)
    optimizer = AdamW(learning_rate=rate, weight_decay=weight_decay, epsilon=epsilon, global_clipnorm=1.0, learning_rate_multipliers=multipliers,
                     unfreeze_steps=unfreeze)
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    return optimizer
