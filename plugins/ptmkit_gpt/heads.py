"""Sequence classification from the last token (Radford et al. 2018, section 3.2), with GPT-1's
auxiliary language-modelling loss.

A causal backbone's state at a text's last real token is the only one that has read the whole
text: ``h_last -> Dropout -> Dense(num_labels)`` gives the ``logits``. GPT-1 added the
pre-training loss on the fine-tuning texts, ``L3 = L2 + lambda * L1`` with ``lambda = 0.5``
(``head.lm_loss_weight``); it improved larger data sets. Hugging Face's
``GPT2ForSequenceClassification`` reads the same position (the last non-padding token).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from ptmkit.api import SEQUENCE_OUTPUT, TOKEN_EMBEDDING, ConfigError, Head
from ptmkit_gpt.objectives import CAUSAL_SEQUENCE_OUTPUT


@dataclasses.dataclass
class LastTokenClassificationConfig:
    """Last-token classification settings (section ``[head]``).

    Attributes:
        dropout: dropout rate before the output layer (GPT-1: 0.1).
        initializer_range: standard deviation of the output layer's normal initialisation.
        lm_loss_weight: weight of the auxiliary causal-LM loss (mean negative log-likelihood of
            the texts' next tokens) added to the classification loss; GPT-1 used 0.5, 0 turns it off.
    """

    dropout: float = 0.1
    initializer_range: float = 0.02
    lm_loss_weight: float = 0.0

    def validate(self) -> None:
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"config key 'head.dropout' must be in [0, 1), got {self.dropout}")
        if not self.initializer_range > 0.0:
            raise ConfigError(f"config key 'head.initializer_range' must be > 0, got {self.initializer_range}")
        if not self.lm_loss_weight >= 0.0:
            raise ConfigError(f"config key 'head.lm_loss_weight' must be >= 0, got {self.lm_loss_weight}")


def last_token_states(sequence_output: Any, padding_mask: Any) -> Any:
    """``(batch, hidden)``: each row's state at its last position where ``padding_mask`` is 1
    (right padding; a row without tokens reads position 0)."""
    from keras import ops

    last = ops.maximum(ops.sum(ops.cast(padding_mask, "int32"), axis=1) - 1, 0)
    return ops.take_along_axis(sequence_output, ops.reshape(last, (-1, 1, 1)), axis=1)[:, 0, :]


@functools.cache
def _auxiliary_lm_layer() -> Any:
    """The ``AuxiliaryLMLoss`` layer class (made on first use: this module loads without Keras)."""
    import keras
    from keras import ops

    @keras.saving.register_keras_serializable(package="ptmkit_gpt")
    class AuxiliaryLMLoss(keras.layers.Layer):
        """Adds ``weight * mean next-token NLL`` of the fed texts (``add_loss``) and passes
        ``logits`` through, so that the loss is part of the classifier's graph.

        Call arguments: ``logits`` ``(batch, labels)``; ``lm_logits`` ``(batch, sequence,
        vocabulary)`` next-token logits; ``token_ids`` and ``padding_mask`` ``(batch, sequence)``.
        """

        def __init__(self, weight: float, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.weight = weight

        def call(self, logits: Any, lm_logits: Any, token_ids: Any, padding_mask: Any) -> Any:
            targets = token_ids[:, 1:]
            weights = ops.cast(padding_mask[:, 1:], "float32")  # a target that is a real token
            nll = keras.losses.sparse_categorical_crossentropy(targets, ops.cast(lm_logits[:, :-1, :], "float32"), from_logits=True)
            self.add_loss(self.weight * ops.sum(nll * weights) / ops.maximum(ops.sum(weights), 1.0))
            return logits

        def get_config(self) -> dict[str, Any]:
            config: dict[str, Any] = super().get_config()
            config.update(weight=self.weight)
            return config

    return AuxiliaryLMLoss


class LastTokenClassification(Head):
    """The last real token's ``sequence_output`` ``-> Dropout -> Dense(num_labels)``, returning
    ``logits`` ``(batch, num_labels)`` float32; with ``head.lm_loss_weight`` > 0 the causal-LM
    loss of the texts is added to the training loss."""

    name = "last-token-classification"
    description = "sequence classification from the last non-padding token (GPT-1), optional auxiliary LM loss"
    requires = frozenset({SEQUENCE_OUTPUT, CAUSAL_SEQUENCE_OUTPUT, TOKEN_EMBEDDING})
    config_class = LastTokenClassificationConfig

    def build(self, backbone: Any, num_labels: int, config: LastTokenClassificationConfig) -> Any:
        import keras

        inputs = {name: keras.Input(shape=tuple(t.shape[1:]), dtype=t.dtype, name=name) for name, t in backbone.input.items()}
        sequence_output = backbone(inputs)["sequence_output"]
        pooled = last_token_states(sequence_output, inputs["padding_mask"])
        hidden = keras.layers.Dropout(config.dropout, name="head_dropout")(pooled)
        logits = keras.layers.Dense(
            num_labels, kernel_initializer=keras.initializers.RandomNormal(stddev=config.initializer_range), dtype="float32", name="logits"
        )(hidden)
        if config.lm_loss_weight > 0:
            lm_logits = backbone.token_embedding(sequence_output, reverse=True)  # tied, as in pre-training
            layer = _auxiliary_lm_layer()(config.lm_loss_weight, name="auxiliary_lm_loss")
            logits = layer(logits, lm_logits, inputs["token_ids"], inputs["padding_mask"])
        return keras.Model(inputs, logits, name="classifier")
