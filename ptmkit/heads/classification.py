"""Sequence classification: dropout and a dense layer on the pooled output (Devlin et al. 2019,
section 4.1; keras-hub's ``BertTextClassifier``), or on the mean of a scalar mix of the backbone's
layers with the backbone frozen (Peters et al. 2018, section 3.3; :mod:`ptmkit.heads.scalar_mix`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ptmkit.contract import HIDDEN_STATES, POOLED_OUTPUT, Head
from ptmkit.errors import ConfigError

#: What the classification head reads (``head.pooling``).
POOLINGS = ("pooler", "mean")
#: Which of the backbone's layers it reads (``head.layers``), besides an index of one layer.
LAYERS = ("last", "mix")


@dataclasses.dataclass
class ClassificationConfig:
    """Classification-head settings (section ``[head]``).

    Attributes:
        dropout: dropout rate before the output layer.
        initializer_range: standard deviation of the output layer's normal initialisation (Hugging
            Face's ``initializer_range``; its ``BertForSequenceClassification`` draws the classifier
            from ``normal(0, 0.02)``). Keras' ``TruncatedNormal(stddev=0.02)``, which this head used
            before, redraws beyond two deviations and so has a deviation of 0.0176: fine-tuning
            all-MiniLM-L6-v2 on WordNet supersenses from the same draw rescaled to 0.02, the mean
            loss of steps 201-300 fell from 2.251 to 2.185 (on the batches of
            ``benchmarks/minilm_trajectory.py``; recorded in the README of commit 4f2df65).
    """

    dropout: float = 0.1
    initializer_range: float = 0.02
    pooling: str = "pooler"
    """What the output layer reads: ``"pooler"``, the backbone's pooled output (BERT: a tanh dense
    on the ``[CLS]`` state, Devlin et al. 2019), or ``"mean"``, the mean of the last hidden states
    over the non-padding tokens (sentence-transformers' pooling, Reimers and Gurevych 2019: the
    start that fits a checkpoint trained for mean-pooled embeddings, such as all-MiniLM-L6-v2,
    whose pooler is not in the checkpoint)."""
    layers: str = "last"
    """Which token states ``"mean"`` pooling averages: ``"last"``, the backbone's
    ``sequence_output``; ``"mix"``, a learnt scalar mix of all its layers,
    ``gamma * sum_j softmax(w)_j h_j`` (Peters et al. 2018, equation 1); or an index into them
    (``"0"``, ``"-2"``: the feature-based approach of Devlin et al. 2019, section 5.3). The layers
    are the backbone's ``hidden_states`` output, or for a backbone of transformer blocks the
    embeddings then each block's output (Hugging Face's ``output_hidden_states``); ``"mix"`` and an
    index need ``pooling = "mean"``."""
    mix_layer_norm: bool = False
    """With ``layers = "mix"``: normalise each layer over its hidden axis at each token before
    mixing (Peters et al. 2018 found it helped in some tasks)."""
    freeze_backbone: bool = False
    """Keep the pre-trained backbone's weights fixed: only the mix and the output layer learn
    (ELMo's recipe, Peters et al. 2018, section 3.3)."""

    def validate(self) -> None:
        if self.pooling not in POOLINGS:
            raise ConfigError(f"config key 'head.pooling' must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")
        if self.layers not in LAYERS and not self.layers.lstrip("-").isdigit():
            raise ConfigError(f"config key 'head.layers' must be one of {', '.join(LAYERS)} or a layer index (0, -2, ...), got {self.layers!r}")
        if self.layers != "last" and self.pooling != "mean":
            raise ConfigError(f"config key 'head.layers' = {self.layers!r} reads token states and needs 'head.pooling' = 'mean', got {self.pooling!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"config key 'head.dropout' must be in [0, 1), got {self.dropout}")
        if not self.initializer_range > 0.0:
            raise ConfigError(f"config key 'head.initializer_range' must be > 0, got {self.initializer_range}")


class SequenceClassification(Head):
    """``pooled_output`` (or, with ``head.pooling = "mean"``, the masked mean of ``sequence_output``,
    or with ``head.layers = "mix"`` of the :class:`~ptmkit.heads.scalar_mix.ScalarMix` of
    ``hidden_states``) ``-> Dropout -> Dense(num_labels)``, returning ``logits`` ``(batch,
    num_labels)`` float32; the dense kernel is drawn from ``normal(0, head.initializer_range)``,
    its bias is 0. With ``head.freeze_backbone`` the backbone is not trained.

    Raises:
        ConfigError: ``mean`` pooling without a ``padding_mask`` input; ``mix`` or a layer index
            on a backbone without a ``hidden_states`` output or transformer blocks; an index
            outside its layers.
    """

    name = "classification"
    description = "sequence classification on the pooled output (logits over the labels)"
    requires = frozenset({POOLED_OUTPUT})
    config_class = ClassificationConfig

    def build(self, backbone: Any, num_labels: int, config: ClassificationConfig) -> Any:
        import keras

        from ptmkit.training.pretrain import backbone_inputs

        if config.freeze_backbone:
            backbone.trainable = False
        inputs = backbone_inputs(backbone)
        outputs = backbone(inputs)
        if config.pooling == "mean" and "padding_mask" not in inputs:
            raise ConfigError(f"head.pooling = 'mean' needs a padding_mask input; this backbone takes {', '.join(inputs)}")
        if config.pooling == "mean":
            states = outputs["sequence_output"]
            if config.layers != "last":
                hidden_states = _hidden_states(backbone, inputs, outputs, config.layers)  # (batch, layers, sequence, hidden)
                if config.layers == "mix":
                    from ptmkit.heads.scalar_mix import ScalarMix

                    states = ScalarMix(int(hidden_states.shape[1]), layer_norm=config.mix_layer_norm, name="scalar_mix")(hidden_states)
                else:
                    states = _layer(hidden_states, int(config.layers))
            # (batch, sequence, hidden) averaged over the tokens where padding_mask is 1
            mask = keras.ops.expand_dims(keras.ops.cast(inputs["padding_mask"], states.dtype), -1)
            total = keras.ops.sum(states * mask, axis=1)
            pooled = total / keras.ops.maximum(keras.ops.sum(mask, axis=1), 1.0)
        else:
            pooled = outputs["pooled_output"]
        hidden = keras.layers.Dropout(config.dropout, name="head_dropout")(pooled)
        logits = keras.layers.Dense(
            num_labels,
            kernel_initializer=keras.initializers.RandomNormal(stddev=config.initializer_range),
            dtype="float32",
            name="logits",
        )(hidden)
        return keras.Model(inputs, logits, name="classifier")


def _hidden_states(backbone: Any, inputs: dict[str, Any], outputs: dict[str, Any], layers: str) -> Any:
    """The backbone's ``hidden_states`` output, else those of its transformer blocks
    (:func:`ptmkit.training.strategies.hidden_states_model`).

    Raises:
        ConfigError: neither.
    """
    if HIDDEN_STATES in outputs:
        return outputs[HIDDEN_STATES]
    from ptmkit.training.strategies import hidden_states_model

    try:
        return hidden_states_model(backbone)(inputs)
    except ConfigError:
        raise ConfigError(
            f"head.layers = {layers!r} needs a backbone output {HIDDEN_STATES!r} or a functional backbone of transformer blocks "
            f"(keras-hub's); this backbone gives {', '.join(outputs)}"
        ) from None


def _layer(hidden_states: Any, index: int) -> Any:
    """Layer ``index`` (negative: from the last) of ``(batch, layers, sequence, hidden)`` states.

    Raises:
        ConfigError: an index outside the layers.
    """
    count = int(hidden_states.shape[1])
    if not -count <= index < count:
        raise ConfigError(f"head.layers = {index}: the backbone has {count} layers (the embeddings and each block: 0 to {count - 1}, or -1 to -{count})")
    import keras

    return keras.ops.take(hidden_states, index % count, axis=1)
