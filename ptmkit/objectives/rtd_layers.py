"""Replaced-token detection's sampling and replacement (ELECTRA, Clark et al. 2020), a Keras layer.

Kept apart from :mod:`ptmkit.objectives.rtd` so that loading the objective imports no Keras.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops


def replace_tokens(token_ids: Any, mask_positions: Any, mask_ids: Any, mask_weights: Any, samples: Any) -> tuple[Any, Any]:
    """Put ``samples`` at ``mask_positions`` (keras ops, any backend).

    Args:
        token_ids: ``(batch, sequence)`` int32, the generator's (masked) input.
        mask_positions, mask_ids: ``(batch, predictions)`` int32 positions and original ids.
        mask_weights: ``(batch, predictions)`` float32, 1 on real predictions (0 on the list's
            padding slots, which point at position 0 and are ignored).
        samples: ``(batch, predictions)`` int32 sampled ids.

    Returns:
        ``(corrupted_ids, is_replaced)``: ``(batch, sequence)`` int32 ids with the samples in
        place, and ``(batch, sequence)`` float32, 1 where the sample differs from the original
        (a sample equal to the original counts as original, as in the paper).
    """
    length = ops.shape(token_ids)[1]
    hit = ops.one_hot(ops.cast(mask_positions, "int32"), length, dtype="float32") * ops.expand_dims(ops.cast(mask_weights, "float32"), -1)
    placed = ops.max(hit, axis=1)  # (batch, sequence): positions are distinct within a row
    sample_at = ops.cast(ops.sum(hit * ops.expand_dims(ops.cast(samples, "float32"), -1), axis=1), "int32")
    corrupted = ops.where(placed > 0, sample_at, ops.cast(token_ids, "int32"))
    differs = ops.cast(ops.not_equal(ops.cast(samples, "int32"), ops.cast(mask_ids, "int32")), "float32")
    is_replaced = ops.sum(hit * ops.expand_dims(differs, -1), axis=1)
    return corrupted, is_replaced


def gumbel_sample(logits: Any, temperature: float, seed: Any) -> Any:
    """One id per row of ``logits`` ``(..., vocabulary)``, drawn from ``softmax(logits /
    temperature)`` by the Gumbel-max trick, without gradient (ELECTRA's ``sample_from_softmax``):
    ``(...,)`` int32."""
    logits = ops.stop_gradient(ops.cast(logits, "float32")) / temperature
    uniform = keras.random.uniform(ops.shape(logits), minval=1e-9, maxval=1.0, seed=seed)
    return ops.cast(ops.argmax(logits - ops.log(-ops.log(uniform)), axis=-1), "int32")


@keras.saving.register_keras_serializable(package="ptmkit")
class SampleAndReplace(keras.layers.Layer):
    """Sample the generator's replacements and put them into the token ids.

    Args:
        temperature: float. Softmax temperature of the samples (ELECTRA: 1).
        seed: int. Seed of the layer's ``SeedGenerator`` (its state is part of the checkpoint).

    Call arguments:
        token_ids: ``(batch, sequence)`` int32, the masked input.
        logits: ``(batch, predictions, vocabulary)`` float, the generator's outputs.
        mask_positions, mask_ids: ``(batch, predictions)`` int32.
        mask_weights: ``(batch, predictions)`` float32.

    Returns:
        ``(corrupted_ids, is_replaced)`` as :func:`replace_tokens`, both without gradient.
    """

    def __init__(self, temperature: float = 1.0, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.temperature = temperature
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, token_ids: Any, logits: Any, mask_positions: Any, mask_ids: Any, mask_weights: Any) -> tuple[Any, Any]:
        samples = gumbel_sample(logits, self.temperature, self.seed_generator)
        corrupted, is_replaced = replace_tokens(token_ids, mask_positions, mask_ids, mask_weights, samples)
        return ops.stop_gradient(corrupted), ops.stop_gradient(is_replaced)

    def compute_output_spec(self, token_ids: Any, *args: Any) -> tuple[Any, Any]:
        return keras.KerasTensor(token_ids.shape, "int32"), keras.KerasTensor(token_ids.shape, "float32")

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "temperature": self.temperature, "seed": self.seed}


@keras.saving.register_keras_serializable(package="ptmkit")
class DetectionLoss(keras.losses.Loss):
    """``weight`` x ``per_token(y_true, y_pred)``, averaged over the real tokens (the core's
    relative sample weights, as the masked-LM loss)."""

    def __init__(self, weight: float, per_token: Any, name: str = "rtd") -> None:
        super().__init__(name=name)
        self.weight = weight
        self.per_token = per_token

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return self.weight * self.per_token(y_true, y_pred)
