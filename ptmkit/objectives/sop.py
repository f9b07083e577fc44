"""Sentence-order prediction (ALBERT, Lan et al. 2020, section 3.1 "inter-sentence coherence loss").

Each instance is two consecutive segments of text, ``[CLS] A [SEP] B [SEP]``; in 50% of instances
they are swapped, ``[CLS] B [SEP] A [SEP]`` (:class:`ptmkit.data.pretraining.InstanceSampler`
builds the pairs: a window of contiguous text split at a random point, as NSP's true
continuations). A binary classifier on the pooled
``[CLS]`` state predicts which (label 1: swapped). Unlike next-sentence prediction, both orders
hold text of one topic, so the task cannot be solved by topic alone; ALBERT found that it
improves downstream results where NSP does not (its table 5).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from ptmkit.contract import POOLED_OUTPUT, Objective, SpecialTokens
from ptmkit.errors import ConfigError


@dataclasses.dataclass
class SentenceOrderConfig:
    """Sentence-order settings (section ``[objectives.sop]``); ALBERT's default.

    Attributes:
        swap_rate: fraction of pairs packed in reversed order ``B, A`` (ALBERT: 0.5).
    """

    swap_rate: float = 0.5

    def validate(self) -> None:
        if not 0.0 < self.swap_rate < 1.0:
            raise ConfigError(f"config key 'objectives.sop.swap_rate' must be in (0, 1), got {self.swap_rate}")


class SentenceOrderPrediction(Objective):
    """Binary classification of consecutive segment pairs: are A and B swapped?"""

    name = "sop"
    description = "sentence-order prediction: consecutive segments, 50% swapped (ALBERT)"
    requires = frozenset({POOLED_OUTPUT})
    config_class = SentenceOrderConfig
    needs_segment_pairs = True

    def prepare(
        self,
        batch: Mapping[str, np.ndarray],
        rng: np.random.Generator,
        config: SentenceOrderConfig,
        specials: SpecialTokens,
        vocabulary_size: int,
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
        labels = batch["is_swapped"].astype(np.int32)
        return {}, {"sop": labels}, {"sop": np.ones(labels.shape, np.float32)}

    def build(self, backbone: Any, inputs: dict[str, Any], config: SentenceOrderConfig) -> tuple[dict, dict, dict, dict]:
        import keras

        pooled = backbone(inputs)["pooled_output"]
        logits = keras.layers.Dense(
            2, kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02), dtype="float32", name="sop"
        )(pooled)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        return {}, {"sop": logits}, {"sop": loss}, {"sop": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]}
