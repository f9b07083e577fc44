"""The ALBERT backbone: keras-hub's ``AlbertBackbone`` honouring the config's activation and epsilon.

Lan et al. 2020, "ALBERT: A Lite BERT for Self-supervised Learning of Language Representations",
section 3.1. Tokens, positions and segments are embedded in ``embedding_dim`` = E, summed,
normalised and projected to ``hidden_dim`` = H (the factorised embedding); then ``num_layers``
transformer layers run, layer ``i`` with the weights of group ``i // (num_layers / num_groups)``,
each group being ``inner_group_num`` post-LN encoder layers applied in turn (cross-layer
parameter sharing; Hugging Face ``AlbertTransformer``'s loop, which keras-hub's backbone
reproduces). Inputs ``token_ids``, ``segment_ids``, ``padding_mask``: ``(batch, sequence)``
int32. Outputs ``sequence_output`` ``(batch, sequence, hidden_dim)`` and ``pooled_output``
``(batch, hidden_dim)`` (tanh dense on the ``[CLS]`` state), float32.

keras-hub's ``AlbertBackbone`` hard-codes the tanh GELU (ALBERT's ``gelu_new``) and a layer-norm
epsilon of 1e-12. :class:`AlbertBackbone` keeps keras-hub's layers and weight layout and sets the
activation of every feed-forward layer (:func:`ptmkit.api.feedforward_activation`: the exact GELU
through ``Erf``, which tf2onnx converts) and the epsilon of every layer normalisation from the
config after the layers are built; Keras layers read both at call time. A shared layer is one
Keras layer called ``num_layers / num_groups`` times in the functional graph: its weights exist
once, and their gradient is the sum over the calls.
"""

from __future__ import annotations

from typing import Any

import keras
import keras_hub

from ptmkit.api import feedforward_activation
from ptmkit_albert.config import AlbertConfig


@keras.saving.register_keras_serializable(package="ptmkit_albert")
class AlbertBackbone(keras_hub.models.AlbertBackbone):
    """keras-hub's ``AlbertBackbone`` with a configurable activation and layer-norm epsilon.

    Args:
        hidden_activation: ``"gelu_approximate"`` (tanh, ALBERT's), ``"gelu"`` (exact) or ``"relu"``.
        layer_norm_epsilon: epsilon of the embedding and of every transformer layer norm.
        **kwargs: keras-hub ``AlbertBackbone`` arguments (``vocabulary_size``, ``num_layers``,
            ``num_heads``, ``embedding_dim``, ``hidden_dim``, ``intermediate_dim``,
            ``num_groups``, ``num_inner_repetitions``, ``dropout``, ``max_sequence_length``,
            ``num_segments``).

    Raises:
        ValueError: an unknown activation, or ``num_groups`` not dividing ``num_layers``.

    Examples:
        >>> backbone = AlbertBackbone(vocabulary_size=300, num_layers=2, num_heads=2, embedding_dim=16,
        ...                           hidden_dim=32, intermediate_dim=64, max_sequence_length=64)
        >>> ones = np.ones((2, 5), "int32")
        >>> out = backbone({"token_ids": ones, "segment_ids": 0 * ones, "padding_mask": ones})
        >>> tuple(out["sequence_output"].shape), tuple(out["pooled_output"].shape)
        ((2, 5, 32), (2, 32))
    """

    def __init__(
        self, *args: Any, hidden_activation: str = "gelu_approximate", layer_norm_epsilon: float = 1e-12, **kwargs: Any
    ) -> None:
        activation = feedforward_activation(hidden_activation)
        super().__init__(*args, **kwargs)
        self.embeddings_layer_norm.epsilon = layer_norm_epsilon
        for group in self.transformer_layers:
            for layer in group:
                layer._feedforward_intermediate_dense.activation = activation
                layer._self_attention_layer_norm.epsilon = layer_norm_epsilon
                layer._feedforward_layer_norm.epsilon = layer_norm_epsilon
        self.hidden_activation = hidden_activation
        self.layer_norm_epsilon = layer_norm_epsilon

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(hidden_activation=self.hidden_activation, layer_norm_epsilon=self.layer_norm_epsilon)
        return config


def build_backbone(config: AlbertConfig) -> AlbertBackbone:
    """Return an :class:`AlbertBackbone` of the configured size, sharing, activation and epsilon."""
    return AlbertBackbone(
        vocabulary_size=config.vocabulary_size,
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        embedding_dim=config.embedding_dim,
        hidden_dim=config.hidden_dim,
        intermediate_dim=config.intermediate_dim,
        num_groups=config.num_groups,
        num_inner_repetitions=config.inner_group_num,
        dropout=config.dropout,
        max_sequence_length=config.max_sequence_length,
        num_segments=config.num_segments,
        hidden_activation=config.hidden_activation,
        layer_norm_epsilon=config.layer_norm_epsilon,
    )
