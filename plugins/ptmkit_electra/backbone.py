"""The ELECTRA discriminator: keras-hub's ``ElectraBackbone`` honouring the config's activation and
epsilon, and a generator built on its embeddings.

Clark et al. 2020, "ELECTRA: Pre-training Text Encoders as Discriminators Rather Than
Generators". BERT's post-LN encoder whose token, position and segment embeddings have a width of
their own (``embedding_dim``), summed, layer-normalised and, when that width is not the hidden
size, projected to it by a dense layer (``embeddings_projection``; Hugging Face's
``embeddings_project``). Inputs ``token_ids``, ``segment_ids``, ``padding_mask``: ``(batch,
sequence)`` int32. Outputs ``sequence_output`` ``(batch, sequence, hidden_dim)`` and
``pooled_output`` ``(batch, hidden_dim)`` (tanh dense on the ``[CLS]`` state: the reference
implementation's BERT pooler, which its classification fine-tuning starts from; the released
discriminators, and Hugging Face's ``ElectraModel``, hold none, so it starts random), float32.

keras-hub's ``ElectraBackbone`` hard-codes the tanh approximation of GELU (ELECTRA and Hugging
Face compute the exact, erf one) and a layer-norm epsilon of 1e-12. :class:`ElectraBackbone` keeps
keras-hub's layers and their names and sets the activation of every feed-forward layer (through
``Erf``, which tf2onnx converts) and every epsilon from the config after the layers are built.

:func:`build_on_embeddings` builds ELECTRA's generator: a narrower encoder that reads the
discriminator's own embedding layers (section 3.2, "we share the embeddings (both the token and
positional embeddings) of the generator and discriminator"; the reference implementation shares
the whole ``embeddings`` scope, segment embeddings and layer norm included) through a projection
of its own to its hidden size.
"""

from __future__ import annotations

from typing import Any

import keras
import keras_hub

from ptmkit.api import feedforward_activation
from ptmkit_electra.config import ElectraConfig


@keras.saving.register_keras_serializable(package="ptmkit_electra")
class ElectraBackbone(keras_hub.models.ElectraBackbone):
    """keras-hub's ``ElectraBackbone`` with a configurable activation and layer-norm epsilon.

    Args:
        hidden_activation: ``"gelu"`` (exact), ``"gelu_approximate"`` (tanh) or ``"relu"``.
        layer_norm_epsilon: epsilon of the embedding and of every transformer layer norm.
        **kwargs: keras-hub ``ElectraBackbone`` arguments (``vocab_size``, ``num_layers``,
            ``num_heads``, ``hidden_dim``, ``embedding_dim``, ``intermediate_dim``, ``dropout``,
            ``max_sequence_length``, ``num_segments``).

    Raises:
        ValueError: an unknown activation.

    Examples:
        >>> backbone = ElectraBackbone(vocab_size=300, num_layers=1, num_heads=2, hidden_dim=32, embedding_dim=16,
        ...                            intermediate_dim=64, max_sequence_length=64)
        >>> ones = np.ones((2, 5), "int32")
        >>> out = backbone({"token_ids": ones, "segment_ids": 0 * ones, "padding_mask": ones})
        >>> tuple(out["sequence_output"].shape), tuple(out["pooled_output"].shape)
        ((2, 5, 32), (2, 32))
    """

    def __init__(self, *args: Any, hidden_activation: str = "gelu", layer_norm_epsilon: float = 1e-12, **kwargs: Any) -> None:
        activation = feedforward_activation(hidden_activation)
        super().__init__(*args, **kwargs)
        self.embeddings_layer_norm.epsilon = layer_norm_epsilon
        for layer in self.transformer_layers:
            layer._feedforward_intermediate_dense.activation = activation
            layer._self_attention_layer_norm.epsilon = layer_norm_epsilon
            layer._feedforward_layer_norm.epsilon = layer_norm_epsilon
        self.hidden_activation = hidden_activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.vocabulary_size = self.vocab_size  # the name the core's masked-LM head reads

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(hidden_activation=self.hidden_activation, layer_norm_epsilon=self.layer_norm_epsilon)
        return config


def build_backbone(config: ElectraConfig) -> ElectraBackbone:
    """An :class:`ElectraBackbone` of ``config``'s size, activation and epsilon."""
    return ElectraBackbone(
        vocab_size=config.vocabulary_size,
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        hidden_dim=config.hidden_dim,
        embedding_dim=config.embedding_dim,
        intermediate_dim=config.intermediate_dim,
        dropout=config.dropout,
        max_sequence_length=config.max_sequence_length,
        num_segments=config.num_segments,
        hidden_activation=config.hidden_activation,
        layer_norm_epsilon=config.layer_norm_epsilon,
    )


def build_on_embeddings(config: ElectraConfig, backbone: ElectraBackbone, name: str = "generator") -> keras.Model:
    """An encoder of ``config`` (ELECTRA's generator) on ``backbone``'s embedding layers.

    The token, position and segment embeddings, their sum and layer norm are ``backbone``'s
    (the same variables: a gradient through either model updates them); the dropout, the
    projection from ``backbone.embedding_dim`` to ``config.hidden_dim`` (always present: the
    generator is narrower), the transformer layers and the activation are the generator's own.

    Args:
        config: the generator's config (:meth:`ElectraFamily.scale_config`); its
            ``embedding_dim`` must be ``backbone``'s.
        backbone: the discriminator.
        name: the Keras model's name.

    Returns:
        a Keras model on ``token_ids``, ``segment_ids``, ``padding_mask`` (``(batch, sequence)``
        int32) returning ``{"sequence_output": (batch, sequence, config.hidden_dim)}``.
    """
    initializer = keras.initializers.TruncatedNormal(stddev=0.02)  # keras-hub's electra_kernel_initializer
    token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
    segment_ids = keras.Input(shape=(None,), dtype="int32", name="segment_ids")
    padding_mask = keras.Input(shape=(None,), dtype="int32", name="padding_mask")
    tokens = backbone.token_embedding(token_ids)
    x = backbone.embeddings_add((tokens, backbone.position_embedding(tokens), backbone.segment_embedding(segment_ids)))
    x = backbone.embeddings_layer_norm(x)
    x = keras.layers.Dropout(config.dropout, name=f"{name}_embeddings_dropout")(x)
    x = keras.layers.Dense(config.hidden_dim, kernel_initializer=initializer, name=f"{name}_embeddings_projection")(x)
    for i in range(config.num_layers):
        x = keras_hub.layers.TransformerEncoder(
            num_heads=config.num_heads, intermediate_dim=config.intermediate_dim, activation=feedforward_activation(config.hidden_activation),
            dropout=config.dropout, layer_norm_epsilon=config.layer_norm_epsilon, kernel_initializer=initializer,
            name=f"{name}_transformer_layer_{i}",
        )(x, padding_mask=padding_mask)
    return keras.Model({"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}, {"sequence_output": x}, name=name)
