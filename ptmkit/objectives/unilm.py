"""UniLM's unified language modelling (Dong et al. 2019, "Unified Language Model Pre-training for
Natural Language Understanding and Generation", sections 2.1-2.3).

One Transformer is trained as a bidirectional, a unidirectional and a sequence-to-sequence LM by
changing only its self-attention mask; the task is always a cloze (masked LM: 15% of tokens, 80%
``[MASK]``, 10% random, 10% kept, :func:`~ptmkit.objectives.mlm.mask_tokens`). Each sequence of a
batch gets one mode, in the paper's proportions (section 2.3: "1/3 of the time we use the
bidirectional LM objective, 1/3 ... the sequence-to-sequence LM objective, and both
left-to-right and right-to-left LM objectives are sampled with rate of 1/6"):

- **bidirectional**: every token attends to every token (BERT);
- **left-to-right** / **right-to-left**: token ``i`` attends to tokens ``j <= i`` / ``j >= i``;
- **sequence-to-sequence**: the packed pair ``[CLS] S1 [SEP] S2 [SEP]`` is source and target;
  source tokens (segment 0) attend to the source only, target tokens (segment 1) to the source
  and to the target up to themselves.

Every sequence is packed as a pair of consecutive segments (the sampler's segment pairs), so the
mode changes the mask alone. Left as in the paper but not here: its segment embeddings as LM
identifiers per mode, and masking a bigram or trigram 20% of the time. The backbone must run
under an arbitrary attention mask (:class:`~ptmkit.contract.AttendsWithMask`, capability
``self_attention_mask``); the trained backbone is then an ordinary bidirectional encoder for
``finetune`` and ``export``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from ptmkit.contract import SELF_ATTENTION_MASK, SEQUENCE_OUTPUT, TOKEN_EMBEDDING, Objective, SpecialTokens
from ptmkit.errors import ConfigError
from ptmkit.objectives.mlm import (
    MaskedLMConfig,
    mask_batch,
    masked_lm_head,
    prediction_loss,
)

#: The modes, in the order of their ids in :func:`attention_masks`.
MODES = ("bidirectional", "seq2seq", "left_to_right", "right_to_left")


@dataclasses.dataclass
class UniLMConfig(MaskedLMConfig):
    """UniLM settings (section ``[objectives.unilm]``); defaults are the paper's.

    Attributes:
        mask_rate: fraction of real tokens selected for prediction (UniLM, as BERT: 0.15).
        mask_token_rate: of the selected, the fraction replaced by ``[MASK]`` (0.8).
        random_token_rate: of the selected, the fraction replaced by a random token (0.1).
        max_predictions: predictions per sequence (0: ``ceil(mask_rate * sequence_length)``).
        masking: ``"dynamic"`` or ``"static"``, as ``objectives.mlm.masking``.
        dupe_factor: with static masking, differently masked copies of each sequence (10).
        whole_word: mask whole words, as ``objectives.mlm.whole_word``.
        max_ngram: the longest n-gram masked at once, as ``objectives.mlm.max_ngram`` (1: none).
        bidirectional_rate: share of sequences with full attention (UniLM: 1/3).
        seq2seq_rate: share with the sequence-to-sequence mask (UniLM: 1/3).
        left_to_right_rate: share with the left-to-right mask (UniLM: 1/6).
        right_to_left_rate: share with the right-to-left mask (UniLM: 1/6). The four sum to 1.
    """

    bidirectional_rate: float = 1 / 3
    seq2seq_rate: float = 1 / 3
    left_to_right_rate: float = 1 / 6
    right_to_left_rate: float = 1 / 6

    @property
    def mode_rates(self) -> tuple[float, float, float, float]:
        """The four rates in the order of :data:`MODES`."""
        return (self.bidirectional_rate, self.seq2seq_rate, self.left_to_right_rate, self.right_to_left_rate)

    def validate(self) -> None:
        self.check_masked_lm("unilm")
        for mode, rate in zip(MODES, self.mode_rates, strict=True):
            if not 0.0 <= rate <= 1.0:
                raise ConfigError(f"config key 'objectives.unilm.{mode}_rate' must be in [0, 1], got {rate}")
        if abs(sum(self.mode_rates) - 1.0) > 1e-6:
            raise ConfigError(f"config keys 'objectives.unilm.*_rate' must sum to 1, got {sum(self.mode_rates):.6g}")


def attention_masks(modes: np.ndarray, segment_ids: np.ndarray) -> np.ndarray:
    """UniLM's self-attention masks (module docstring), before padding (the backbone adds it).

    Args:
        modes: ``(batch,)`` int, an index into :data:`MODES` per sequence.
        segment_ids: ``(batch, sequence)`` int, 0 for the source segment (``[CLS] S1 [SEP]``),
            1 for the target.

    Returns:
        ``(batch, sequence, sequence)`` int32, 1 where query ``i`` may attend to key ``j``.
    """
    batch, length = segment_ids.shape
    lower = np.tril(np.ones((length, length), np.int32))
    masks = np.ones((batch, length, length), np.int32)
    masks[modes == MODES.index("left_to_right")] = lower
    masks[modes == MODES.index("right_to_left")] = lower.T
    for row in np.flatnonzero(modes == MODES.index("seq2seq")):
        target = segment_ids[row].astype(bool)
        masks[row] = (~target[None, :]) | (target[:, None] & target[None, :] & lower.astype(bool))
    return masks


class UnifiedLM(Objective):
    """UniLM: masked LM under bidirectional, unidirectional and sequence-to-sequence attention."""

    name = "unilm"
    description = "masked LM under mixed attention masks: 1/3 bidirectional, 1/3 seq2seq, 1/6 each direction (UniLM)"
    requires = frozenset({SEQUENCE_OUTPUT, TOKEN_EMBEDDING, SELF_ATTENTION_MASK})
    config_class = UniLMConfig
    token_level_lm = True
    corrupts_token_ids = True
    needs_segment_pairs = True

    def needs_word_starts(self, config: UniLMConfig) -> bool:
        return config.whole_word

    def prepare(
        self,
        batch: Mapping[str, np.ndarray],
        rng: np.random.Generator,
        config: UniLMConfig,
        specials: SpecialTokens,
        vocabulary_size: int,
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
        masked, positions, ids, weights = mask_batch("unilm", batch, rng, config, specials, vocabulary_size)
        modes = rng.choice(len(MODES), size=len(masked), p=np.asarray(config.mode_rates) / sum(config.mode_rates))
        inputs = {"token_ids": masked, "mask_positions": positions, "self_attention_mask": attention_masks(modes, batch["segment_ids"])}
        return inputs, {"unilm": ids}, {"unilm": weights}

    def build(self, backbone: Any, inputs: dict[str, Any], config: UniLMConfig) -> tuple[dict, dict, dict, dict]:
        import keras

        extra = {
            "mask_positions": keras.Input(shape=(None,), dtype="int32", name="mask_positions"),
            "self_attention_mask": keras.Input(shape=(None, None), dtype="int32", name="self_attention_mask"),
        }
        sequence_output = backbone.sequence_output_with_attention_mask(inputs, extra["self_attention_mask"])
        logits = masked_lm_head(backbone, sequence_output, extra["mask_positions"], "unilm")
        return extra, {"unilm": logits}, {"unilm": prediction_loss()}, {"unilm": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]}
