"""StructBERT's structural objectives (Wang et al. 2020, "StructBERT: Incorporating Language
Structures into Pre-training for Deep Language Understanding", section 2.2).

**Word structural objective** (``wso``). A sequence is masked as BERT's masked LM does
(:func:`~ptmkit.objectives.mlm.mask_tokens`, section ``[objectives.wso]`` has the same keys);
then, of the trigrams of unmasked real tokens, ``shuffle_rate`` (5%) are chosen (non-overlapping)
and each is put in a random order other than its own (one of the 5 non-identity permutations,
uniformly). The model predicts the original token at every shuffled position, through a second
masked-LM head tied to the token embedding, beside the masked-LM prediction. The loss is their
sum, ``L_MLM + L_WSO``, as the paper trains them "jointly ... with equal weights".

**Sentence structural objective** (``sso``). Segment pairs ``[CLS] S1 [SEP] S2 [SEP]`` where S2
follows S1 (label 0), precedes it (the consecutive segments swapped; label 1), or comes from
another document (label 2), a third each; a 3-way classifier on the pooled ``[CLS]`` state.

The paper's StructBERT is ``--objective wso,sso``; :class:`ptmkit.data.pretraining.InstanceSampler`
builds the pairs.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ptmkit.contract import SEQUENCE_OUTPUT, TOKEN_EMBEDDING, Objective, SpecialTokens
from ptmkit.errors import ConfigError
from ptmkit.objectives.mlm import (
    MaskedLMConfig,
    mask_batch,
    masked_lm_head,
    prediction_loss,
)
from ptmkit.objectives.nsp import SegmentPairClassification


@dataclasses.dataclass
class WordStructuralConfig(MaskedLMConfig):
    """Word structural objective settings (section ``[objectives.wso]``); defaults are the paper's.

    Attributes:
        mask_rate: the masked LM beside it: fraction of real tokens selected (BERT: 0.15).
        mask_token_rate: of the selected, the fraction replaced by ``[MASK]`` (BERT: 0.8).
        random_token_rate: of the selected, the fraction replaced by a random token (BERT: 0.1).
        max_predictions: masked-LM predictions per sequence (0: ``ceil(mask_rate * sequence_length)``).
        masking: ``"dynamic"`` or ``"static"``, as ``objectives.mlm.masking``.
        dupe_factor: with static masking, differently masked copies of each sequence (10).
        whole_word: mask whole words, as ``objectives.mlm.whole_word``.
        max_ngram: the longest n-gram masked at once, as ``objectives.mlm.max_ngram`` (1: none).
        shuffle_rate: fraction of the trigrams of unmasked tokens that are shuffled (StructBERT:
            5%); at least one per sequence that has one.
        ngram: tokens per shuffled group (StructBERT: 3, "K = 3").
    """

    shuffle_rate: float = 0.05
    ngram: int = 3

    def validate(self) -> None:
        self.check_masked_lm("wso")
        if not 0.0 < self.shuffle_rate <= 1.0:
            raise ConfigError(f"config key 'objectives.wso.shuffle_rate' must be in (0, 1], got {self.shuffle_rate}")
        if not 2 <= self.ngram <= 5:
            raise ConfigError(f"config key 'objectives.wso.ngram' must be in [2, 5], got {self.ngram}")


def non_identity_permutations(n: int) -> np.ndarray:
    """``(n! - 1, n)`` int: every order of ``range(n)`` but the identity, in lexicographic order."""
    return np.array(list(itertools.permutations(range(n)))[1:], np.int64)


def shuffle_ngrams(
    token_ids: np.ndarray,
    candidates: np.ndarray,
    rng: np.random.Generator,
    config: WordStructuralConfig,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Shuffle non-overlapping n-grams of candidate tokens (the word structural objective).

    Args:
        token_ids: ``(batch, sequence)`` int32 ids, already masked (they are shuffled in a copy).
        candidates: ``(batch, sequence)`` bool, True where a token may move (real, not special,
            not selected by the masked LM).
        rng: the step's generator.

    Returns:
        ``(shuffled_token_ids, shuffle_positions, shuffle_ids, shuffle_weights)``: the
        ``(batch, sequence)`` int32 ids with the chosen n-grams reordered, and
        ``(batch, ngram * ceil(shuffle_rate * sequence))`` int32 positions, int32 original ids
        and float32 weights (1 for a shuffled position, 0 for padding of the list).
    """
    batch, length = token_ids.shape
    n = config.ngram
    slots = n * max(1, math.ceil(config.shuffle_rate * length))
    shuffled = token_ids.copy()
    positions = np.zeros((batch, slots), np.int32)
    ids = np.zeros((batch, slots), np.int32)
    weights = np.zeros((batch, slots), np.float32)
    orders = non_identity_permutations(n)
    # an n-gram may start at p when candidates[p : p + n] are all True
    runs = np.ones((batch, max(0, length - n + 1)), bool)
    for offset in range(n):
        runs &= candidates[:, offset : length - n + 1 + offset]
    for row in range(batch):
        starts = np.flatnonzero(runs[row])
        if starts.size == 0:
            continue
        wanted = min(slots // n, max(1, int(round(config.shuffle_rate * starts.size))))
        taken: list[int] = []
        for start in rng.permutation(starts):
            if len(taken) == wanted:
                break
            if all(abs(int(start) - other) >= n for other in taken):
                taken.append(int(start))
        for index, start in enumerate(sorted(taken)):
            span = np.arange(start, start + n)
            shuffled[row, span] = token_ids[row, span[orders[rng.integers(len(orders))]]]
            cells = slice(index * n, (index + 1) * n)
            positions[row, cells], ids[row, cells], weights[row, cells] = span, token_ids[row, span], 1.0
    return shuffled, positions, ids, weights


class WordStructuralObjective(Objective):
    """StructBERT's word structural objective with its masked LM (module docstring)."""

    name = "wso"
    description = "masked LM + recovery of shuffled trigrams (StructBERT's word structural objective)"
    requires = frozenset({SEQUENCE_OUTPUT, TOKEN_EMBEDDING})
    config_class = WordStructuralConfig
    token_level_lm = True
    corrupts_token_ids = True

    def needs_word_starts(self, config: WordStructuralConfig) -> bool:
        return config.whole_word

    def prepare(
        self,
        batch: Mapping[str, np.ndarray],
        rng: np.random.Generator,
        config: WordStructuralConfig,
        specials: SpecialTokens,
        vocabulary_size: int,
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
        masked, mask_positions, mask_ids, mask_weights = mask_batch("wso", batch, rng, config, specials, vocabulary_size)
        movable = batch["padding_mask"].astype(bool) & ~np.isin(batch["token_ids"], specials.structural())
        rows, slots = np.nonzero(mask_weights > 0)
        movable[rows, mask_positions[rows, slots]] = False  # tokens the masked LM predicts stay put
        shuffled, positions, ids, weights = shuffle_ngrams(masked, movable, rng, config)
        inputs = {"token_ids": shuffled, "mask_positions": mask_positions, "shuffle_positions": positions}
        return inputs, {"wso": mask_ids, "word_order": ids}, {"wso": mask_weights, "word_order": weights}

    def build(self, backbone: Any, inputs: dict[str, Any], config: WordStructuralConfig) -> tuple[dict, dict, dict, dict]:
        import keras

        extra = {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in ("mask_positions", "shuffle_positions")}
        sequence_output = backbone(inputs)["sequence_output"]
        outputs = {
            "wso": masked_lm_head(backbone, sequence_output, extra["mask_positions"], "wso"),
            "word_order": masked_lm_head(backbone, sequence_output, extra["shuffle_positions"], "word_order"),
        }
        losses = {name: prediction_loss() for name in outputs}
        metrics = {name: [keras.metrics.SparseCategoricalAccuracy(name="accuracy")] for name in outputs}
        return extra, outputs, losses, metrics


@dataclasses.dataclass
class SentenceStructuralConfig:
    """Sentence structural objective settings (section ``[objectives.sso]``); the paper's thirds.

    Attributes:
        random_next_rate: fraction of pairs whose second segment comes from another document.
        swap_rate: fraction of pairs whose consecutive segments are packed in reversed order.
    """

    random_next_rate: float = 1 / 3
    swap_rate: float = 1 / 3

    def validate(self) -> None:
        for key, value in (("random_next_rate", self.random_next_rate), ("swap_rate", self.swap_rate)):
            if not 0.0 < value < 1.0:
                raise ConfigError(f"config key 'objectives.sso.{key}' must be in (0, 1), got {value}")
        if self.random_next_rate + self.swap_rate >= 1.0:
            raise ConfigError("config keys 'objectives.sso.random_next_rate' + 'swap_rate' must be < 1 (the rest are pairs in order)")


class SentenceStructuralObjective(SegmentPairClassification):
    """Three-way classification of segment pairs: next (0), previous (1) or random (2)."""

    name = "sso"
    description = "sentence structural objective: next / previous / random segment, a third each (StructBERT)"
    config_class = SentenceStructuralConfig
    num_classes = 3

    def prepare(
        self,
        batch: Mapping[str, np.ndarray],
        rng: np.random.Generator,
        config: Any,
        specials: SpecialTokens,
        vocabulary_size: int,
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
        labels = (batch["is_swapped"] + 2 * batch["is_random_next"]).astype(np.int32)
        return {}, {self.name: labels}, {self.name: np.ones(labels.shape, np.float32)}
