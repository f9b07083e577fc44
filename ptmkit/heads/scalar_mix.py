"""A scalar mix of a backbone's layers (Peters et al. 2018, "Deep contextualized word
representations", equation 1)::

    mix = gamma * sum_j s_j * h_j,    s = softmax(w)

``h_j`` are the backbone's layer representations (all of one shape), ``w`` one learnt scalar per
layer and ``gamma`` a learnt scale. It is AllenNLP's ``ScalarMix`` (``allennlp.modules.scalar_mix``:
``w`` initialised to 0, so the layers start equally weighted, and ``gamma`` to 1). With
``layer_norm`` each ``h_j`` is first normalised over its last axis at each position (Ba et al.
2016, without a learnt scale or offset), which the paper found to help in some tasks; AllenNLP
instead normalises each layer with the mean and variance of the whole masked batch, which makes a
row's features depend on the other rows of its batch.

Family-agnostic: any backbone that outputs its layers' states (:data:`ptmkit.contract.HIDDEN_STATES`)
can be mixed (the classification head's ``head.layers = "mix"``).
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="ptmkit")
class ScalarMix(keras.layers.Layer):
    """``gamma * sum_j softmax(w)_j * h_j`` over the layers axis (see the module docstring).

    Args:
        num_layers: int. How many layers are mixed (the size of the layers axis).
        layer_norm: bool. Normalise each layer over its last axis before mixing.
        epsilon: float. Added to the variance in the layer norm.

    Call arguments:
        hidden_states: ``(batch, num_layers, ...)`` float: the layers stacked on axis 1.

    Returns:
        ``(batch, ...)`` float: the mix, the shape of one layer.

    Raises:
        ValueError: ``hidden_states``' axis 1 is not ``num_layers`` long.

    Examples:
        >>> mix = ScalarMix(3)
        >>> tuple(mix(np.ones((2, 3, 5, 4), "float32")).shape)
        (2, 5, 4)
    """

    def __init__(self, num_layers: int, layer_norm: bool = False, epsilon: float = 1e-12, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_layers = num_layers
        self.layer_norm = layer_norm
        self.epsilon = epsilon

    def build(self, input_shape: Any) -> None:
        if input_shape[1] is not None and input_shape[1] != self.num_layers:
            raise ValueError(f"ScalarMix of {self.num_layers} layers called on {input_shape[1]} layers (axis 1 of {tuple(input_shape)})")
        self.scalar_weights = self.add_weight(name="scalar_weights", shape=(self.num_layers,), initializer="zeros")
        self.gamma = self.add_weight(name="gamma", shape=(), initializer="ones")
        self.built = True

    def call(self, hidden_states: Any) -> Any:
        h = hidden_states
        if self.layer_norm:
            mean = ops.mean(h, axis=-1, keepdims=True)
            variance = ops.mean(ops.square(h - mean), axis=-1, keepdims=True)
            h = (h - mean) / ops.sqrt(variance + self.epsilon)
        s = ops.cast(ops.softmax(self.scalar_weights), h.dtype)
        s = ops.reshape(s, (1, self.num_layers) + (1,) * (len(h.shape) - 2))
        return ops.cast(self.gamma, h.dtype) * ops.sum(s * h, axis=1)

    def compute_output_shape(self, input_shape: Any) -> tuple[Any, ...]:
        return (input_shape[0], *input_shape[2:])

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(num_layers=self.num_layers, layer_norm=self.layer_norm, epsilon=self.epsilon)
        return config
