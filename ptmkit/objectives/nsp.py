"""Next-sentence prediction (Devlin et al. 2019, section 3.1, task #2).

Each instance is a segment pair ``[CLS] A [SEP] B [SEP]``; in 50% of instances B is the text that
follows A, in the others B comes from another document. A binary classifier on the pooled
``[CLS]`` state predicts which (label 1: B is random).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from ptmkit.contract import POOLED_OUTPUT, Objective, SpecialTokens
from ptmkit.errors import ConfigError


@dataclasses.dataclass
class NextSentenceConfig:
    """Next-sentence settings (section ``[objectives.nsp]``).

    Attributes:
        random_next_rate: fraction of pairs whose second segment comes from another document.
    """

    random_next_rate: float = 0.5

    def validate(self) -> None:
        if not 0.0 <= self.random_next_rate <= 1.0:
            raise ConfigError(f"config key 'objectives.nsp.random_next_rate' must be in [0, 1], got {self.random_next_rate}")


class SegmentPairClassification(Objective):
    """A binary label per packed segment pair, from the pooled output through one dense layer
    (BERT's NSP head): the base of :class:`NextSentencePrediction` and ALBERT's sentence-order
    prediction (:class:`ptmkit.objectives.sop.SentenceOrderPrediction`).

    Attributes:
        label_field: the batch field holding the 0/1 label of each pair (the sampler fills it).
        num_classes: labels of the classifier (StructBERT's sentence objective has 3).
    """

    requires = frozenset({POOLED_OUTPUT})
    needs_segment_pairs = True
    label_field = ""
    num_classes = 2

    def prepare(
        self,
        batch: Mapping[str, np.ndarray],
        rng: np.random.Generator,
        config: Any,
        specials: SpecialTokens,
        vocabulary_size: int,
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
        labels = batch[self.label_field].astype(np.int32)
        return {}, {self.name: labels}, {self.name: np.ones(labels.shape, np.float32)}

    def build(self, backbone: Any, inputs: dict[str, Any], config: Any) -> tuple[dict, dict, dict, dict]:
        import keras

        pooled = backbone(inputs)["pooled_output"]
        logits = keras.layers.Dense(
            self.num_classes, kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02), dtype="float32", name=self.name
        )(pooled)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        return {}, {self.name: logits}, {self.name: loss}, {self.name: [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]}


class NextSentencePrediction(SegmentPairClassification):
    """Binary classification of segment pairs: is B the continuation of A?"""

    name = "nsp"
    description = "next-sentence prediction: 50% true next segment, 50% from another document (BERT)"
    config_class = NextSentenceConfig
    label_field = "is_random_next"
