"""Fine-tuning strategies (``finetune.strategy``): which of a backbone's weights train, and what
is added to the backbone first.

- ``full``: every weight trains (Devlin et al. 2019, section 4).
- ``features``: feature extraction, the backbone frozen and only the head trained; the head reads
  the last layer (``head.layers = "last"``) or a learnt scalar mix of all of them (``"mix"``,
  :mod:`ptmkit.heads.scalar_mix`). ``head.freeze_backbone = true`` is the same thing, kept as the
  head's own key (ELMo's head defaults set it).
- ``adapters``: Houlsby et al. 2019, "Parameter-Efficient Transfer Learning for NLP": a bottleneck
  ``x + W_up gelu(W_down x + b_down) + b_up`` (:class:`BottleneckAdapter`) on the output of each
  block's attention sublayer and of its feed-forward sublayer, before the residual sum and the
  layer norm; only the adapters, every layer norm of the backbone and the head train.
- ``lora``: Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models": each projection
  named by ``finetune.lora_targets`` computes with ``W + (alpha / r) A B`` (:class:`LowRankUpdate`),
  ``A`` ``(inputs, r)``, ``B`` ``(r, outputs)`` and ``B = 0`` at the start, so the model starts as
  the base model exactly; only ``A``, ``B`` and the head train. :func:`merge_lora` folds the
  updates into ``W`` (``ptmkit export --merge-lora``).

Written once for every family: both insert wrappers in place of sublayers of the backbone's blocks
(a layer held as an attribute of a non-functional layer, which its owner calls by that attribute),
so the backbone's graph, its saved weights' layout around them and the ONNX export need no change.
Adapters go where keras-hub's transformer blocks (``TransformerEncoder``, ``TransformerDecoder``,
and any block that follows their convention) apply ``_self_attention_dropout`` and
``_feedforward_dropout``: the dropout right after each sublayer's output projection, which is
where google-research/adapter-bert puts its adapters (``modeling.py``: dense, dropout, adapter,
then ``layer_norm(x + residual)``). LoRA targets any ``Dense`` or ``EinsumDense`` sublayer by name;
keras' ``MultiHeadAttention`` names its projections ``query``, ``key``, ``value`` and
``attention_output``. A family whose backbone follows neither convention gets a one-line error
naming what was looked for. Keras' own ``enable_lora`` is not used: on an ``EinsumDense`` its
factors are ``(inputs, heads, r)`` and ``(r, head_dim)``, not the paper's ``(inputs, r)`` and
``(r, heads * head_dim)``, and Keras writes a LoRA layer's weights file with the update merged into
the kernel (and zeroes both factors when it loads one), so a run's weights would no longer hold the
base weights and the update apart.
"""

from __future__ import annotations

import fnmatch
import math
from typing import Any

import keras
from keras import ops

from ptmkit.activations import gelu_erf
from ptmkit.config import STRATEGIES
from ptmkit.errors import ConfigError

__all__ = [
    "ADAPTER_SITES", "STRATEGIES", "BottleneckAdapter", "LowRankUpdate", "apply_strategy", "layer_depths", "layer_lr_multipliers", "lora_candidates",
    "merge_lora", "parameter_counts", "prepare_backbone", "unfreeze_steps",
]

#: The attributes of a transformer block whose output an adapter follows (keras-hub's names): the
#: dropout after the attention sublayer's output projection and the one after the feed-forward's.
ADAPTER_SITES = ("_self_attention_dropout", "_feedforward_dropout")


@keras.saving.register_keras_serializable(package="ptmkit")
class BottleneckAdapter(keras.layers.Layer):
    """A bottleneck adapter, ``x + W_up gelu(W_down x + b_down) + b_up`` (Houlsby et al. 2019,
    figure 2; google-research/adapter-bert's ``feedforward_adapter``): ``W_down`` ``(hidden,
    bottleneck_dim)`` and ``W_up`` ``(bottleneck_dim, hidden)`` drawn from a normal of deviation
    ``init_scale`` truncated at two deviations, biases 0, so that it starts near the identity.

    Args:
        bottleneck_dim: int. The bottleneck width m.
        init_scale: float. The weights' standard deviation (adapter-bert: 1e-3).

    Call arguments:
        inputs: ``(..., hidden)`` float.

    Returns:
        ``(..., hidden)``, the dtype of ``inputs``.
    """

    def __init__(self, bottleneck_dim: int, init_scale: float = 1e-3, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bottleneck_dim = bottleneck_dim
        self.init_scale = init_scale

    def build(self, input_shape: Any) -> None:
        initializer = keras.initializers.TruncatedNormal(stddev=self.init_scale)
        self.down = keras.layers.Dense(self.bottleneck_dim, activation=gelu_erf, kernel_initializer=initializer, dtype=self.dtype_policy, name="down")
        self.down.build(input_shape)
        self.up = keras.layers.Dense(input_shape[-1], kernel_initializer=initializer, dtype=self.dtype_policy, name="up")
        self.up.build((*input_shape[:-1], self.bottleneck_dim))
        self.built = True

    def call(self, inputs: Any) -> Any:
        return inputs + self.up(self.down(inputs))

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        config.update(bottleneck_dim=self.bottleneck_dim, init_scale=self.init_scale)
        return config


class AdapterAfter(keras.layers.Layer):
    """``adapter(inner(x))``: a block's sublayer (``inner``) followed by a :class:`BottleneckAdapter`.

    Args:
        inner: the sublayer it replaces (a dropout: called with ``training``).
        bottleneck_dim, init_scale: the adapter's (see :class:`BottleneckAdapter`).
    """

    def __init__(self, inner: Any, bottleneck_dim: int, init_scale: float, **kwargs: Any) -> None:
        super().__init__(dtype=inner.dtype_policy, name=f"{inner.name}_adapter", **kwargs)
        self.inner = inner
        self.adapter = BottleneckAdapter(bottleneck_dim, init_scale, dtype=inner.dtype_policy, name="adapter")

    def build(self, input_shape: Any) -> None:
        self.adapter.build(input_shape)
        self.built = True

    def call(self, inputs: Any, training: Any = None) -> Any:
        return self.adapter(self.inner(inputs, training=training))


class LowRankUpdate(keras.layers.Layer):
    """A ``Dense`` or ``EinsumDense`` that computes with ``W + (alpha / r) A B`` in place of its
    kernel ``W`` (Hu et al. 2021, equation 3), then adds its bias and applies its activation.

    The kernel's axes are read as its inputs' axes then its outputs' (``EinsumDense`` equations
    such as ``abc,cde->abde``, the attention's query: inputs ``c``, outputs ``d e``), so ``A`` is
    ``(inputs, r)`` and ``B`` ``(r, outputs)`` with ``inputs``, ``outputs`` the products of those
    axes: Hugging Face peft's shapes for the same projection. ``A`` is drawn as peft draws it
    (``kaiming_uniform_(a=sqrt(5))``: uniform in ``+-1/sqrt(inputs)``), ``B`` is 0, so the layer
    starts as ``inner`` exactly. ``A`` and ``B`` are float32 (Keras' and peft's choice).

    Args:
        inner: the ``Dense`` or ``EinsumDense`` layer (built, not quantized).
        rank: int. r.
        alpha: float. The update's scale is ``alpha / rank``.

    Raises:
        ConfigError: an ``EinsumDense`` whose kernel axes are not its inputs' then its outputs'.
    """

    def __init__(self, inner: Any, rank: int, alpha: float, **kwargs: Any) -> None:
        super().__init__(dtype=inner.dtype_policy, name=f"{inner.name}_lora", **kwargs)
        self.inner = inner
        self.rank = rank
        self.alpha = alpha
        self.inputs_dim, self.outputs_dim = _kernel_split(inner)

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    def build(self, input_shape: Any = None) -> None:
        self.lora_a = self.add_weight(
            name="lora_a", shape=(self.inputs_dim, self.rank), dtype="float32",
            initializer=keras.initializers.VarianceScaling(scale=1.0 / 3.0, mode="fan_in", distribution="uniform"),
        )
        self.lora_b = self.add_weight(name="lora_b", shape=(self.rank, self.outputs_dim), dtype="float32", initializer="zeros")
        self.built = True

    def delta(self) -> Any:
        """``(alpha / r) A B`` in the kernel's shape, float32."""
        return ops.reshape(self.scale * ops.matmul(self.lora_a, self.lora_b), tuple(self.inner.kernel.shape))

    def call(self, inputs: Any) -> Any:
        inner, dtype = self.inner, self.compute_dtype
        kernel = ops.add(ops.cast(inner.kernel, dtype), ops.cast(self.delta(), dtype))
        if isinstance(inner, keras.layers.EinsumDense):
            x = ops.einsum(inner.equation, inputs, kernel)
        else:
            x = ops.matmul(inputs, kernel)
        if inner.bias is not None:
            x = ops.add(x, ops.cast(inner.bias, dtype))
        if inner.activation is not None:
            x = inner.activation(x)
        return x


def _kernel_split(layer: Any) -> tuple[int, int]:
    """``(inputs, outputs)``: the products of ``layer``'s kernel axes that it contracts with its
    inputs and of those it keeps (``Dense``: the kernel's two axes)."""
    shape = tuple(int(d) for d in layer.kernel.shape)
    if not isinstance(layer, keras.layers.EinsumDense):
        return shape[0], shape[1]
    inputs_spec, rest = layer.equation.split(",")
    kernel_spec = rest.split("->")[0]
    contracted = [axis in inputs_spec for axis in kernel_spec]
    n = sum(contracted)
    if contracted != [True] * n + [False] * (len(kernel_spec) - n):
        raise ConfigError(f"LoRA on {layer.name!r}: its equation {layer.equation!r} does not put the input axes of its kernel first")
    return math.prod(shape[:n]), math.prod(shape[n:])


def _sublayer_slots(backbone: Any) -> list[tuple[Any, str, Any]]:
    """``(owner, attribute, layer)`` for every layer held as an attribute of a layer of
    ``backbone`` that is not a functional model (its owner calls it through that attribute, so a
    wrapper put there is called instead), depth first, each owner once."""
    slots, seen = [], set()
    for owner in backbone._flatten_layers(include_self=True, recursive=True):
        if id(owner) in seen or isinstance(owner, keras.Model):
            continue
        seen.add(id(owner))
        for attribute, value in sorted(vars(owner).items()):
            if isinstance(value, keras.layers.Layer) and not attribute.startswith("__"):
                slots.append((owner, attribute, value))
    return slots


def _replace(owner: Any, attribute: str, wrapper: Any) -> None:
    owner._tracker.unlock()  # a built layer's tracker refuses new sublayers
    setattr(owner, attribute, wrapper)
    owner._tracker.lock()


def lora_candidates(backbone: Any) -> list[str]:
    """The names LoRA can target in ``backbone``: its ``Dense`` and ``EinsumDense`` sublayers of
    blocks (see :func:`_sublayer_slots`), sorted, each once."""
    return sorted({layer.name for _, _, layer in _sublayer_slots(backbone) if isinstance(layer, (keras.layers.Dense, keras.layers.EinsumDense))})


def add_adapters(backbone: Any, bottleneck_dim: int, init_scale: float) -> list[BottleneckAdapter]:
    """Put a :class:`BottleneckAdapter` after each block's attention and feed-forward sublayers
    (:data:`ADAPTER_SITES`); return the adapters. A block shared by several positions (ALBERT's)
    gets one pair, shared as its other weights are.

    Raises:
        ConfigError: the backbone has no such sublayer.
    """
    adapters = []
    for owner, attribute, layer in _sublayer_slots(backbone):
        if attribute in ADAPTER_SITES and not isinstance(layer, AdapterAfter):
            wrapper = AdapterAfter(layer, bottleneck_dim, init_scale)
            wrapper.build((None, None, _hidden_dim(owner)))
            _replace(owner, attribute, wrapper)
            adapters.append(wrapper.adapter)
    if not adapters:
        raise ConfigError(
            f"finetune.strategy = 'adapters': the backbone has no transformer block with the sublayers "
            f"{' and '.join(ADAPTER_SITES)} (keras-hub's TransformerEncoder/TransformerDecoder) to put adapters after"
        )
    return adapters


def _hidden_dim(block: Any) -> int:
    """The hidden width of a keras-hub transformer block: its feed-forward output's width."""
    return int(block._feedforward_output_dense.units)


def add_lora(backbone: Any, targets: list[str], rank: int, alpha: float) -> list[LowRankUpdate]:
    """Wrap each ``Dense`` / ``EinsumDense`` sublayer whose name matches a pattern of ``targets``
    (``fnmatch``) in a :class:`LowRankUpdate`; return the wrappers.

    Raises:
        ConfigError: a pattern that matches no candidate (one line listing the candidates).
    """
    candidates = lora_candidates(backbone)
    for pattern in targets:
        if not fnmatch.filter(candidates, pattern):
            raise ConfigError(f"finetune.lora_targets: {pattern!r} matches no dense layer of the backbone's blocks; candidates: {', '.join(candidates) or '(none)'}")
    updates = []
    for owner, attribute, layer in _sublayer_slots(backbone):
        dense = isinstance(layer, (keras.layers.Dense, keras.layers.EinsumDense))
        if dense and any(fnmatch.fnmatchcase(layer.name, pattern) for pattern in targets):
            wrapper = LowRankUpdate(layer, rank, alpha)
            wrapper.build()
            _replace(owner, attribute, wrapper)
            updates.append(wrapper)
    return updates


def prepare_backbone(backbone: Any, ft: Any, head_config: Any = None) -> list[Any]:
    """Add what ``ft.strategy`` trains to ``backbone`` (before the head is built on it) and freeze
    it for ``features``; return the added layers (adapters or LoRA wrappers, else none).

    Args:
        ft: the :class:`~ptmkit.config.FinetuneConfig`.
        head_config: the head's config; its ``freeze_backbone`` (if any) conflicts with
            ``adapters`` and ``lora``.

    Raises:
        ConfigError: :func:`add_adapters`'s or :func:`add_lora`'s refusal (checked first), then
            ``head.freeze_backbone`` with ``adapters`` or ``lora``.
    """
    if ft.strategy == "features":
        backbone.trainable = False
        return []
    added: list[Any] = []
    if ft.strategy == "adapters":
        added = add_adapters(backbone, ft.adapter_size, ft.adapter_init_scale)
    if ft.strategy == "lora":
        added = add_lora(backbone, list(ft.lora_targets), ft.lora_rank, ft.lora_alpha)
    # After the backbone is known to take the strategy: advice to unfreeze must not lead to a refusal.
    if added and getattr(head_config, "freeze_backbone", False):
        raise ConfigError(f"head.freeze_backbone = true freezes the adapters too; with finetune.strategy = {ft.strategy!r} set it to false")
    return added


def apply_strategy(backbone: Any, ft: Any, added: list[Any]) -> None:
    """Freeze the backbone's weights that ``ft.strategy`` does not train (the head's are not the
    backbone's and stay trainable): with ``adapters`` all but the adapters' and the layer norms',
    with ``lora`` all but ``A`` and ``B``."""
    if ft.strategy not in ("adapters", "lora"):
        return
    if ft.strategy == "adapters":
        kept = [layer for layer in backbone._flatten_layers(recursive=True) if isinstance(layer, keras.layers.LayerNormalization)]
        keep = {id(v) for layer in [*added, *kept] for v in layer.weights}
    else:
        keep = {id(v) for layer in added for v in (layer.lora_a, layer.lora_b)}
    for variable in backbone.weights:
        variable.trainable = id(variable) in keep


def parameter_counts(model: Any) -> dict[str, Any]:
    """``{"parameters", "trainable_parameters", "trainable_share"}`` of ``model`` (each weight
    counted once; the share rounded to 6 digits)."""
    total = sum(math.prod(v.shape) for v in model.weights)
    trainable = sum(math.prod(v.shape) for v in model.trainable_weights)
    return {"parameters": int(total), "trainable_parameters": int(trainable), "trainable_share": round(trainable / max(total, 1), 6)}


def transformer_blocks(backbone: Any) -> list[Any]:
    """``backbone``'s transformer blocks in the order it holds them (keras-hub's convention: a layer
    with the sublayers :data:`ADAPTER_SITES`), each once."""
    blocks, seen = [], set()
    for layer in backbone._flatten_layers(include_self=False, recursive=True):
        if id(layer) not in seen and all(hasattr(layer, site) for site in ADAPTER_SITES):
            seen.add(id(layer))
            blocks.append(layer)
    return blocks


def hidden_states_model(backbone: Any) -> Any:
    """A model of ``backbone``'s inputs returning ``hidden_states`` ``(batch, L + 1, sequence,
    hidden)``: the input of its first transformer block (the embeddings) then each block's output
    in the order the backbone calls them (a block shared by several positions, ALBERT's, once per
    call), Hugging Face's ``output_hidden_states`` layout. It shares the backbone's layers.

    Raises:
        ConfigError: ``backbone`` is not a functional model of transformer blocks.
    """
    blocks = transformer_blocks(backbone)
    by_depth = getattr(backbone, "_nodes_by_depth", None)  # Keras' functional graph; larger depth: nearer the inputs
    if not blocks or by_depth is None:
        raise ConfigError(f"the backbone has no functional graph of transformer blocks ({' and '.join(ADAPTER_SITES)}) to take hidden states from")
    nodes = [node for depth in sorted(by_depth, reverse=True) for node in by_depth[depth] if any(node.operation is block for block in blocks)]
    states = [nodes[0].arguments.args[0], *(node.outputs[0] for node in nodes)]
    return keras.Model(backbone.inputs, ops.stack(states, axis=1), name="hidden_states")


def depth_blocks(backbone: Any) -> list[Any]:
    """The blocks that discriminative rates and gradual unfreezing count, input side first: those
    the backbone lists itself with a ``layer_blocks()`` method (a backbone of other blocks than
    transformer ones, e.g. a stack of recurrent layers), else its :func:`transformer_blocks`."""
    listed = getattr(backbone, "layer_blocks", None)
    return list(listed()) if callable(listed) else transformer_blocks(backbone)


def layer_depths(backbone: Any, purpose: str) -> tuple[dict[str, int], int]:
    """``({variable path: depth}, L)`` for the backbone's variables: depth 0 for those before the
    first of its L blocks (:func:`depth_blocks`; the embeddings), ``i + 1`` for block ``i``'s
    (adapters and LoRA factors included), L for those after the last (a pooler, a final norm). A
    head on the backbone is at depth L + 1.

    Raises:
        ConfigError: the backbone has no blocks (naming ``purpose``, the config key).
    """
    blocks = depth_blocks(backbone)
    if not blocks:
        raise ConfigError(
            f"{purpose} works block by block; the backbone has no transformer blocks ({' and '.join(ADAPTER_SITES)}) and lists none (layer_blocks())"
        )
    depth: dict[int, int] = {}
    for i, block in enumerate(blocks):
        for variable in block.weights:
            depth.setdefault(id(variable), i + 1)
    past_blocks, top = False, len(blocks)
    for variable in backbone.weights:
        if id(variable) in depth:
            past_blocks = True
        else:
            depth[id(variable)] = top if past_blocks else 0
    return {variable.path: depth[id(variable)] for variable in backbone.weights}, top


def layer_lr_multipliers(backbone: Any, decay: float) -> dict[str, float]:
    """Layer-wise learning-rate factors, ``{variable path: decay ** (L + 1 - depth)}``
    (:func:`layer_depths`); the head, at depth L + 1, keeps the full rate. The discriminative
    fine-tuning of ULMFiT (Howard and Ruder 2018, section 3.2: ``decay = 1 / 2.6``) and ELECTRA's
    layer-wise decay (Clark et al. 2020, appendix A: 0.8).

    Raises:
        ConfigError: the backbone has no transformer blocks.
    """
    depths, top = layer_depths(backbone, f"finetune.layer_lr_decay = {decay}")
    return {path: float(decay) ** (top + 1 - depth) for path, depth in depths.items()}


def unfreeze_steps(backbone: Any, steps_per_epoch: int) -> dict[str, int]:
    """Gradual unfreezing (ULMFiT, Howard and Ruder 2018, section 3.3): ``{variable path: first
    step}``; the head trains from the start, depth L (the last block and what follows it) from
    epoch 1, and so down to the embeddings from epoch L + 1 (:func:`layer_depths`). A step is
    ``epoch * steps_per_epoch``.

    Raises:
        ConfigError: the backbone has no transformer blocks.
    """
    depths, top = layer_depths(backbone, "finetune.gradual_unfreezing")
    return {path: (top + 1 - depth) * steps_per_epoch for path, depth in depths.items()}


def merge_lora(model: Any) -> int:
    """Fold every :class:`LowRankUpdate` of ``model`` into its layer's kernel (``W += (alpha / r)
    A B``) and put the layer back where the update was; return how many were merged. The merged
    model computes what the unmerged one does, as one projection per target."""
    merged = 0
    for owner in list(model._flatten_layers(include_self=True, recursive=True)):
        if isinstance(owner, keras.Model):
            continue
        for attribute, value in sorted(vars(owner).items()):
            if isinstance(value, LowRankUpdate):
                inner = value.inner
                inner.kernel.assign(ops.add(inner.kernel, ops.cast(value.delta(), inner.kernel.dtype)))
                _replace(owner, attribute, inner)
                merged += 1
    return merged
