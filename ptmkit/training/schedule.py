"""Learning-rate schedule and optimiser used for pre-training and fine-tuning."""

from __future__ import annotations

from typing import Any

import keras


@keras.saving.register_keras_serializable(package="ptmkit")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0 to ``peak`` over ``warmup_steps``, then linear decay to 0 at
    ``total_steps`` (Devlin et al. 2019, appendix A.2).

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
        rising = self.peak * (step + 1.0) / warmup
        remaining = keras.ops.cast(self.total_steps - self.warmup_steps, "float32")
        falling = self.peak * keras.ops.maximum(0.0, (self.total_steps - step) / keras.ops.maximum(remaining, 1.0))
        return keras.ops.where(step < self.warmup_steps, rising, falling)

    def get_config(self) -> dict[str, Any]:
        return {"peak": self.peak, "warmup_steps": self.warmup_steps, "total_steps": self.total_steps}


def adamw(learning_rate: float, weight_decay: float, total_steps: int, warmup_ratio: float, epsilon: float = 1e-6) -> Any:
    """AdamW with :class:`WarmupLinearDecay`; LayerNorm scales/offsets and biases get no decay
    (as BERT's optimizer and keras-hub's ``BertMaskedLM`` do); global gradient-norm clipping at 1.

    Keras adds ``epsilon`` to the square root of the *uncorrected* second moment, so early in
    training it weighs ``1 / sqrt(1 - beta_2^t)`` times more than the same epsilon in PyTorch's
    AdamW (which adds it after bias correction).
    """
    schedule = WarmupLinearDecay(learning_rate, int(round(warmup_ratio * total_steps)), total_steps)
    optimizer = keras.optimizers.AdamW(learning_rate=schedule, weight_decay=weight_decay, epsilon=epsilon, global_clipnorm=1.0)
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    return optimizer
