"""Sequence classification: dropout and a dense layer on the pooled output (Devlin et al. 2019,
section 4.1; keras-hub's ``BertTextClassifier``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ptmkit.contract import POOLED_OUTPUT, Head
from ptmkit.errors import ConfigError


@dataclasses.dataclass
class ClassificationConfig:
    """Classification-head settings (section ``[head]``).

    Attributes:
        dropout: dropout rate before the output layer.
    """

    dropout: float = 0.1

    def validate(self) -> None:
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"config key 'head.dropout' must be in [0, 1), got {self.dropout}")


class SequenceClassification(Head):
    """``pooled_output -> Dropout -> Dense(num_labels)``, returning ``logits``."""

    name = "classification"
    description = "sequence classification on the pooled output (logits over the labels)"
    requires = frozenset({POOLED_OUTPUT})
    config_class = ClassificationConfig

    def build(self, backbone: Any, num_labels: int, config: ClassificationConfig) -> Any:
        import keras

        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in backbone.input}
        pooled = backbone(inputs)["pooled_output"]
        hidden = keras.layers.Dropout(config.dropout, name="head_dropout")(pooled)
        logits = keras.layers.Dense(
            num_labels, kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02), dtype="float32", name="logits"
        )(hidden)
        return keras.Model(inputs, logits, name="classifier")
