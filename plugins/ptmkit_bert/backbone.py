"""The BERT backbone: keras-hub's ``BertBackbone`` honouring the config's activation and epsilon.

Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers for Language
Understanding". Inputs ``token_ids``, ``segment_ids``, ``padding_mask``: ``(batch, sequence)``
int32. Outputs ``sequence_output`` ``(batch, sequence, hidden_dim)`` and ``pooled_output``
``(batch, hidden_dim)`` (tanh dense on the ``[CLS]`` state), float32.

keras-hub's ``BertBackbone`` hard-codes the tanh approximation of GELU and a layer-norm epsilon of
1e-12. BERT and most Hugging Face checkpoints use the exact (erf) GELU, and on all-MiniLM-L6-v2
the approximation alone moves the hidden states by 3.7e-3. :class:`BertBackbone` keeps keras-hub's
layers and weight layout (so keras-hub's Hugging Face weight converter fills it) and sets the
activation of every feed-forward layer and the epsilon of every layer normalisation from the
config after the layers are built; Keras layers read both at call time.

A backbone whose heads were pruned (``attention_heads``, Michel et al. 2019) swaps each such
block's ``MultiHeadAttention`` for one with fewer heads of the same size (``hidden_dim //
num_heads``) once built: the block's input and output widths are unchanged, its query, key and
value projections are ``(hidden, heads, head_dim)`` and its output projection ``(heads, head_dim,
hidden)``. Keras calls the block's current sub-layer, so the functional graph needs no change.
"""

from __future__ import annotations

from typing import Any

import keras
import keras_hub

from ptmkit.api import feedforward_activation
from ptmkit_bert.config import BertConfig


@keras.saving.register_keras_serializable(package="ptmkit_bert")
class BertBackbone(keras_hub.models.BertBackbone):
    """keras-hub's ``BertBackbone`` with a configurable activation and layer-norm epsilon.

    Args:
        hidden_activation: ``"gelu"`` (exact), ``"gelu_approximate"`` (tanh) or ``"relu"``.
        layer_norm_epsilon: epsilon of the embedding and of every transformer layer norm.
        attention_heads: heads in each block (each of ``hidden_dim // num_heads``); None or empty:
            ``num_heads`` in every block.
        shared_layers: ``"all"``, ``"attention"`` or ``"ffn"``: every block calls the first
            block's sublayers of that kind (:data:`SHARED_GROUPS`; ALBERT's cross-layer sharing,
            Lan et al. 2020), so their weights exist once; empty: none shared.
        **kwargs: keras-hub ``BertBackbone`` arguments (sizes, dropout, ...).

    Raises:
        ValueError: an unknown activation.
    """

    def __init__(
        self, *args: Any, hidden_activation: str = "gelu", layer_norm_epsilon: float = 1e-12, attention_heads: list[int] | None = None,
        shared_layers: str = "", **kwargs: Any,
    ) -> None:
        activation = feedforward_activation(hidden_activation)
        super().__init__(*args, **kwargs)
        for layer, heads in zip(self.transformer_layers, attention_heads or [self.num_heads] * len(self.transformer_layers), strict=True):
            if heads != self.num_heads:
                _set_heads(layer, heads, self.hidden_dim // self.num_heads, self.hidden_dim)
        self.attention_heads = list(attention_heads or [])
        self.shared_layers = shared_layers
        if shared_layers:
            first = self.transformer_layers[0]
            for layer in self.transformer_layers[1:]:
                for name in SHARED_GROUPS[shared_layers]:
                    _swap_sublayer(layer, name, getattr(first, name))
        self.embeddings_layer_norm.epsilon = layer_norm_epsilon
        for layer in self.transformer_layers:
            layer._feedforward_intermediate_dense.activation = activation
            layer._self_attention_layer_norm.epsilon = layer_norm_epsilon
            layer._feedforward_layer_norm.epsilon = layer_norm_epsilon
        self.hidden_activation = hidden_activation
        self.layer_norm_epsilon = layer_norm_epsilon

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(
            hidden_activation=self.hidden_activation, layer_norm_epsilon=self.layer_norm_epsilon, attention_heads=self.attention_heads,
            shared_layers=self.shared_layers,
        )
        return config

    def sequence_output_with_attention_mask(self, inputs: dict[str, Any], attention_mask: Any) -> Any:
        """``sequence_output`` with self-attention also restricted by ``attention_mask``
        (``(batch, sequence, sequence)``, 1: query ``i`` may attend to key ``j``), through this
        backbone's layers: keras-hub's ``BertBackbone`` graph with the mask passed to each
        ``TransformerEncoder``, which combines it with ``padding_mask``
        (:class:`ptmkit.api.AttendsWithMask`). An all-ones mask gives ``sequence_output``."""
        tokens = self.token_embedding(inputs["token_ids"])
        x = self.embeddings_add((tokens, self.position_embedding(tokens), self.segment_embedding(inputs["segment_ids"])))
        x = self.embeddings_dropout(self.embeddings_layer_norm(x))
        for layer in self.transformer_layers:
            x = layer(x, padding_mask=inputs["padding_mask"], attention_mask=attention_mask)
        return x

    @property
    def num_languages(self) -> int:
        """Language embeddings: the segment embeddings (``num_segments``), which
        :meth:`sequence_output_with_languages` indexes by language id."""
        return int(self.num_segments)

    def sequence_output_with_languages(self, inputs: dict[str, Any], position_ids: Any, language_ids: Any) -> Any:
        """``sequence_output`` with each token's position embedding taken at ``position_ids`` and
        its segment embedding at ``language_ids`` (both ``(batch, sequence)`` int32), through this
        backbone's layers (:class:`ptmkit.api.EmbedsLanguages`). BERT has no language embeddings of
        its own: its segment-embedding table serves as XLM's (Lample & Conneau 2019 add a learned
        language embedding to each token where BERT adds a segment embedding), so language ids
        are in ``[0, num_segments)``. With ``position_ids`` ``0 .. sequence - 1`` and
        ``language_ids`` the segment ids it gives ``sequence_output``."""
        tokens = self.token_embedding(inputs["token_ids"])
        positions = self.position_embedding(tokens, positions=position_ids)
        x = self.embeddings_add((tokens, positions, self.segment_embedding(language_ids)))
        x = self.embeddings_dropout(self.embeddings_layer_norm(x))
        for layer in self.transformer_layers:
            x = layer(x, padding_mask=inputs["padding_mask"])
        return x


#: The sublayers of a keras-hub ``TransformerEncoder`` that ``shared_layers`` ties, by kind: the
#: self-attention (query, key, value and output projections) with the layer norm after it, and the
#: two feed-forward dense layers with theirs (the dropouts hold no weights).
SHARED_GROUPS = {
    "attention": ("_self_attention_layer", "_self_attention_layer_norm"),
    "ffn": ("_feedforward_intermediate_dense", "_feedforward_output_dense", "_feedforward_layer_norm"),
}
SHARED_GROUPS["all"] = SHARED_GROUPS["attention"] + SHARED_GROUPS["ffn"]


def _swap_sublayer(layer: Any, name: str, new: Any) -> None:
    """Make built block ``layer`` call ``new`` as its sublayer ``name`` (and track it in place of
    the old one, whose weights are then not the block's)."""
    layer._tracker.replace_tracked_value("layers", getattr(layer, name), new)  # the built layer's state is locked
    layer._tracker.unlock()
    setattr(layer, name, new)
    layer._tracker.lock()


def _set_heads(layer: Any, heads: int, head_dim: int, hidden_dim: int) -> None:
    """Give keras-hub ``TransformerEncoder`` ``layer`` (built) a self-attention of ``heads`` heads
    of ``head_dim`` (keras-hub sizes a head ``hidden_dim // num_heads``, which would widen them)."""
    old = layer._self_attention_layer
    new = keras.layers.MultiHeadAttention(
        num_heads=heads, key_dim=head_dim, dropout=layer.dropout, kernel_initializer=old._kernel_initializer,
        bias_initializer=old._bias_initializer, dtype=layer.dtype_policy, name=old.name,
    )
    new.build(query_shape=(None, None, hidden_dim), value_shape=(None, None, hidden_dim))
    layer._tracker.replace_tracked_value("layers", old, new)  # the built layer's state is locked
    layer._self_attention_layer = new
    layer.num_heads = heads


def build_backbone(config: BertConfig) -> BertBackbone:
    """Return a :class:`BertBackbone` of the configured size, activation and epsilon."""
    return BertBackbone(
        vocabulary_size=config.vocabulary_size,
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        hidden_dim=config.hidden_dim,
        intermediate_dim=config.intermediate_dim,
        dropout=config.dropout,
        max_sequence_length=config.max_sequence_length,
        num_segments=config.num_segments,
        hidden_activation=config.hidden_activation,
        layer_norm_epsilon=config.layer_norm_epsilon,
        attention_heads=config.attention_heads,
        shared_layers=config.shared_layers,
    )


def keep_layers(config: BertConfig, backbone: BertBackbone, layers: list[int]) -> tuple[BertConfig, BertBackbone]:
    """``config`` with ``len(layers)`` blocks, and a backbone of it whose block ``j`` holds block
    ``layers[j]`` of ``backbone`` (every other layer: embeddings, pooler, copied as they are).

    Raises:
        ConfigError: an index out of ``[0, num_layers)``, or indices not strictly increasing.
    """
    import dataclasses

    from ptmkit.api import ConfigError

    if not layers or any(not 0 <= i < config.num_layers for i in layers) or any(b <= a for a, b in zip(layers, layers[1:], strict=False)):
        raise ConfigError(f"--keep-layers {','.join(map(str, layers))}: give increasing block indices in [0, {config.num_layers})")
    smaller = dataclasses.replace(config, num_layers=len(layers))
    new = build_backbone(smaller)
    for layer in new.layers:
        if not layer.weights:
            continue
        name = layer.name
        if name.startswith("transformer_layer_"):
            name = f"transformer_layer_{layers[int(name.rsplit('_', 1)[1])]}"
        layer.set_weights(backbone.get_layer(name).get_weights())
    return smaller, new


def prune_heads(config: BertConfig, backbone: BertBackbone, heads: dict[int, list[int]]) -> tuple[BertConfig, BertBackbone]:
    """``config`` without the attention heads ``heads`` (block -> 0-based head indices, each block
    keeping at least one), and a backbone of it holding ``backbone``'s weights but the removed
    heads' slices of the query, key and value kernels and biases and of the output kernel
    (:class:`ptmkit.api.PrunesHeads`; Michel et al. 2019). It computes what ``backbone`` computes
    with those heads' attention outputs zeroed: the output bias is kept whole.
    """
    import dataclasses

    counts = attention_heads(config)
    kept = [[h for h in range(count) if h not in heads.get(block, [])] for block, count in enumerate(counts)]
    smaller = dataclasses.replace(config, attention_heads=[len(k) for k in kept])
    new = build_backbone(smaller)
    for layer in new.layers:
        if layer.weights and not layer.name.startswith("transformer_layer_"):
            layer.set_weights(backbone.get_layer(layer.name).get_weights())
    for old, layer, keep in zip(backbone.transformer_layers, new.transformer_layers, kept, strict=True):
        for name in ("_self_attention_layer_norm", "_feedforward_layer_norm", "_feedforward_intermediate_dense", "_feedforward_output_dense"):
            getattr(layer, name).set_weights(getattr(old, name).get_weights())
        source, target = old._self_attention_layer, layer._self_attention_layer
        for name in ("_query_dense", "_key_dense", "_value_dense"):  # kernel (hidden, heads, head_dim), bias (heads, head_dim)
            kernel, bias = getattr(source, name).get_weights()
            getattr(target, name).set_weights([kernel[:, keep], bias[keep]])
        kernel, bias = source._output_dense.get_weights()  # kernel (heads, head_dim, hidden), bias (hidden,)
        target._output_dense.set_weights([kernel[keep], bias])
    return smaller, new


def attention_heads(config: BertConfig) -> list[int]:
    """The heads in each block of ``config``'s backbone."""
    return list(config.attention_heads) or [config.num_heads] * config.num_layers


def share_layers(config: BertConfig, backbone: BertBackbone, sublayers: str, init: str) -> tuple[BertConfig, BertBackbone]:
    """``config`` with ``shared_layers = sublayers``, and a backbone of it holding ``backbone``'s
    weights, the shared sublayers set to the element-wise mean of every block's (``init =
    "mean"``) or to the first block's (``"first"``) (:class:`ptmkit.api.SharesLayers`).

    Raises:
        ConfigError: attention shared across blocks of different head counts, or a backbone that
            already shares.
    """
    import dataclasses

    import numpy as np

    from ptmkit.api import ConfigError

    if config.shared_layers:
        raise ConfigError(f"--share-layers {sublayers}: the backbone already shares its {config.shared_layers!r} sublayers")
    shared = dataclasses.replace(config, shared_layers=sublayers)
    shared.validate()
    new = build_backbone(shared)
    for layer in new.layers:
        if layer.weights and not layer.name.startswith("transformer_layer_"):
            layer.set_weights(backbone.get_layer(layer.name).get_weights())
    names = SHARED_GROUPS[sublayers]
    for old, layer in zip(backbone.transformer_layers, new.transformer_layers, strict=True):
        for name in SHARED_GROUPS["all"]:
            if name not in names:
                getattr(layer, name).set_weights(getattr(old, name).get_weights())
    for name in names:
        per_block = [getattr(old, name).get_weights() for old in backbone.transformer_layers]
        values = per_block[0] if init == "first" else [np.mean(np.stack(ws), axis=0) for ws in zip(*per_block, strict=True)]
        getattr(new.transformer_layers[0], name).set_weights(values)
    return shared, new


def attention_internals(backbone: BertBackbone) -> keras.Model:
    """What each block of ``backbone`` computes (:class:`ptmkit.api.ExposesAttention`), through its
    own layers: keras-hub's ``BertBackbone`` graph (as :meth:`BertBackbone.sequence_output_with_attention_mask`
    runs it), each ``TransformerEncoder`` called as the backbone calls it, plus its attention
    scores and values recomputed from the block input by the block's own ``MultiHeadAttention``
    query, key and value ``EinsumDense`` projections (keras' attention returns only the softmax
    probabilities, and TinyBERT distils the scores before the softmax).

    Returns:
        a functional model of ``token_ids``, ``segment_ids``, ``padding_mask`` (``(batch,
        sequence)`` int32) returning ``hidden_states`` (``L + 1`` tensors ``(batch, sequence,
        hidden_dim)``), ``attention_scores`` (``L`` tensors ``(batch, heads, sequence,
        sequence)``: ``q k^T / sqrt(head_dim)``, unmasked), ``values`` (``L`` tensors ``(batch,
        heads, sequence, head_dim)``) and ``attention_mask`` (``(batch, sequence, sequence)``
        float32: the key's padding mask on every query row, keras-hub's
        ``merge_padding_and_attention_mask``).
    """
    from keras import ops

    inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in ("token_ids", "segment_ids", "padding_mask")}
    tokens = backbone.token_embedding(inputs["token_ids"])
    x = backbone.embeddings_add((tokens, backbone.position_embedding(tokens), backbone.segment_embedding(inputs["segment_ids"])))
    x = backbone.embeddings_dropout(backbone.embeddings_layer_norm(x))
    states, scores, values = [x], [], []
    for layer in backbone.transformer_layers:
        block_scores, block_values = AttentionProbe(layer)(x)
        scores.append(block_scores)
        values.append(block_values)
        x = layer(x, padding_mask=inputs["padding_mask"])
        states.append(x)
    keys = ops.cast(inputs["padding_mask"], "float32")[:, None, :]  # (batch, 1, sequence)
    mask = ops.ones_like(ops.cast(states[0][:, :, :1], "float32")) * keys  # (batch, sequence, sequence)
    outputs = {"hidden_states": states, "attention_scores": scores, "values": values, "attention_mask": mask}
    return keras.Model(inputs, outputs, name=f"{backbone.name}_internals")


class AttentionProbe(keras.layers.Layer):
    """Block ``block``'s (a built keras-hub ``TransformerEncoder``) attention scores and values on
    its input, from its ``MultiHeadAttention``'s own query, key and value projections (one layer,
    so that the projections, named alike in every block, are no nodes of the functional graph).

    Call: ``x`` ``(batch, sequence, hidden)`` -> ``(scores, values)``: ``(batch, heads, sequence,
    sequence)`` float32 ``q k^T / sqrt(head_dim)`` (query axis first, unmasked) and ``(batch,
    heads, sequence, head_dim)`` float32.
    """

    def __init__(self, block: Any, **kwargs: Any) -> None:
        super().__init__(name=f"{block.name}_attention_probe", dtype=block.dtype_policy, **kwargs)
        self.block = block

    def build(self, input_shape: Any = None) -> None:
        self.built = True

    def call(self, x: Any) -> tuple[Any, Any]:
        from keras import ops

        block = self.block
        attention = block._self_attention_layer
        if block.normalize_first:
            x = block._self_attention_layer_norm(x)
        query = ops.cast(attention._query_dense(x), "float32")  # (batch, sequence, heads, head_dim)
        key = ops.cast(attention._key_dense(x), "float32")
        value = ops.cast(attention._value_dense(x), "float32")
        scores = ops.einsum("bqhd,bkhd->bhqk", query, key) / float(attention._key_dim) ** 0.5
        return scores, ops.transpose(value, (0, 2, 1, 3))

    def compute_output_shape(self, input_shape: Any) -> tuple[Any, Any]:
        attention = self.block._self_attention_layer
        batch, sequence = input_shape[0], input_shape[1]
        heads, head_dim = attention._num_heads, attention._key_dim
        return (batch, heads, sequence, sequence), (batch, heads, sequence, head_dim)
