"""Masked language modelling (Devlin et al. 2019, section 3.1 and appendix A.1).

Of the real (non-special, non-padding) tokens of each sequence, ``mask_rate`` (15%) are selected
for prediction; of those, 80% are replaced by ``[MASK]``, 10% by a random token and 10% are left
unchanged. The model predicts the original token at each selected position through a head tied
to the token embedding (keras-hub's ``MaskedLMHead``, as in ``BertMaskedLM``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ptmkit.contract import SEQUENCE_OUTPUT, TOKEN_EMBEDDING, Objective, SpecialTokens
from ptmkit.errors import ConfigError


@dataclasses.dataclass
class MaskedLMConfig:
    """Masked-LM settings (section ``[objectives.mlm]``).

    Attributes:
        mask_rate: fraction of real tokens selected for prediction.
        mask_token_rate: of the selected, the fraction replaced by ``[MASK]``.
        random_token_rate: of the selected, the fraction replaced by a uniformly random token.
        max_predictions: predictions per sequence (0: ``ceil(mask_rate * sequence_length)``).
    """

    mask_rate: float = 0.15
    mask_token_rate: float = 0.8
    random_token_rate: float = 0.1
    max_predictions: int = 0

    def validate(self) -> None:
        for name in ("mask_rate", "mask_token_rate", "random_token_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"config key 'objectives.mlm.{name}' must be in [0, 1], got {getattr(self, name)}")
        if self.mask_token_rate + self.random_token_rate > 1.0:
            raise ConfigError("config keys 'objectives.mlm.mask_token_rate' + 'random_token_rate' must be <= 1")


def mask_tokens(
    token_ids: np.ndarray,
    padding_mask: np.ndarray,
    rng: np.random.Generator,
    config: MaskedLMConfig,
    specials: SpecialTokens,
    vocabulary_size: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Select and corrupt tokens for masked-LM training.

    Args:
        token_ids: ``(batch, sequence)`` int32, packed with specials and padding.
        padding_mask: ``(batch, sequence)``, 1 for real tokens (specials included), 0 for padding.
        rng: the NumPy generator (deterministic per step, so a resumed run masks identically).

    Returns:
        ``(masked_token_ids, mask_positions, mask_ids, mask_weights)``: the corrupted
        ``(batch, sequence)`` int32 ids; ``(batch, max_predictions)`` int32 positions, original
        ids, and float32 weights (1 for a real prediction, 0 for padding of the prediction list).
    """
    batch, length = token_ids.shape
    predictions = config.max_predictions or math.ceil(config.mask_rate * length)
    masked = token_ids.copy()
    positions = np.zeros((batch, predictions), np.int32)
    ids = np.zeros((batch, predictions), np.int32)
    weights = np.zeros((batch, predictions), np.float32)
    special = np.isin(token_ids, specials.structural())
    candidates = (padding_mask.astype(bool)) & ~special
    for row in range(batch):
        where = np.flatnonzero(candidates[row])
        if where.size == 0:
            continue
        count = min(predictions, max(1, int(round(where.size * config.mask_rate))))
        chosen = np.sort(rng.choice(where, size=count, replace=False))
        draw = rng.random(count)
        to_mask = draw < config.mask_token_rate
        to_random = (draw >= config.mask_token_rate) & (draw < config.mask_token_rate + config.random_token_rate)
        positions[row, :count] = chosen
        ids[row, :count] = token_ids[row, chosen]
        weights[row, :count] = 1.0
        masked[row, chosen[to_mask]] = specials["mask"]
        masked[row, chosen[to_random]] = rng.integers(0, vocabulary_size, size=int(to_random.sum()))
    return masked, positions, ids, weights


class MaskedLM(Objective):
    """Masked language modelling with an output layer tied to the token embedding."""

    name = "mlm"
    description = "masked LM: 15% of tokens, 80% [MASK] / 10% random / 10% kept (BERT)"
    requires = frozenset({SEQUENCE_OUTPUT, TOKEN_EMBEDDING})
    config_class = MaskedLMConfig
    token_level_lm = True

    def prepare(
        self,
        batch: Mapping[str, np.ndarray],
        rng: np.random.Generator,
        config: MaskedLMConfig,
        specials: SpecialTokens,
        vocabulary_size: int,
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
        if "mask" not in specials:
            raise ConfigError(f"objective 'mlm' replaces tokens by the mask token, which this tokenizer lacks (its specials: {dict(specials)})")
        masked, positions, ids, weights = mask_tokens(
            batch["token_ids"], batch["padding_mask"], rng, config, specials, vocabulary_size
        )
        return {"token_ids": masked, "mask_positions": positions}, {"mlm": ids}, {"mlm": weights}

    def build(self, backbone: Any, inputs: dict[str, Any], config: MaskedLMConfig) -> tuple[dict, dict, dict, dict]:
        import keras
        import keras_hub

        mask_positions = keras.Input(shape=(None,), dtype="int32", name="mask_positions")
        sequence_output = backbone(inputs)["sequence_output"]
        head = keras_hub.layers.MaskedLMHead(
            vocabulary_size=backbone.vocabulary_size,
            token_embedding=backbone.token_embedding,
            intermediate_activation="gelu",
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            dtype="float32",
            name="mlm",
        )
        logits = head(sequence_output, mask_positions=mask_positions)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
        return {"mask_positions": mask_positions}, {"mlm": logits}, {"mlm": loss}, {"mlm": metrics}
