"""XLM's translation language modelling (Lample & Conneau 2019, "Cross-lingual Language Model
Pretraining", section 3.3).

"TLM is an extension of MLM, where instead of considering monolingual text streams, we
concatenate parallel sentences ... We randomly mask words in both the source and target
sentences. To predict a word masked in an English sentence, the model can either attend to
surrounding English words or to the French translation ... we also reset the positional
embeddings of target sentences." Each instance is one pair of a parallel file
(``ptmkit train FAMILY --objective tlm --parallel FILE``, :mod:`ptmkit.data.parallel`), packed by
the family as a segment pair (BERT: ``[CLS] source [SEP] target [SEP]``); the sides are cut, the
longer first, to fit ``train.sequence_length``. Then:

- masking is BERT's, over the real tokens of both sentences (:func:`~ptmkit.objectives.mlm.mask_tokens`:
  15% selected, 80% ``[MASK]``, 10% random, 10% kept; XLM's ``word_pred`` 0.15 and
  ``word_mask_keep_rand`` 0.8,0.1,0.1), with the ``[objectives.mlm]`` variants (static/dynamic,
  whole words, n-grams);
- ``position_ids`` count from 0 in the source and from 0 again at the target's first token
  (XLM's ``concat_batches(..., reset_positions=True)``);
- ``language_ids`` are 0 on the source side and 1 on the target side (the file's two languages,
  named by its header when it has one; one parallel file a run, so one language pair);
  padding gets 0.

The backbone must take position and language ids (:class:`~ptmkit.contract.EmbedsLanguages`,
capability ``positions_and_languages``); the trained backbone is then an ordinary encoder for
``finetune`` and ``export``. Left as in the paper but not here: XLM's streams of 256 tokens made
of several pairs, its sampling of language pairs in one run, and alternating TLM with
monolingual MLM steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from ptmkit.contract import POSITIONS_AND_LANGUAGES, SEQUENCE_OUTPUT, TOKEN_EMBEDDING, Objective, SpecialTokens
from ptmkit.errors import ConfigError
from ptmkit.objectives.mlm import MaskedLMConfig, mask_batch, masked_lm_head, prediction_loss

#: The language ids of the pair's two sides: source, target.
LANGUAGES = 2


@dataclasses.dataclass
class TranslationLMConfig(MaskedLMConfig):
    """Translation-LM settings (section ``[objectives.tlm]``); defaults are XLM's, which are BERT's.

    Attributes:
        mask_rate: fraction of the real tokens of both sentences selected for prediction (0.15).
        mask_token_rate: of the selected, the fraction replaced by ``[MASK]`` (0.8).
        random_token_rate: of the selected, the fraction replaced by a random token (0.1).
        max_predictions: predictions per sequence (0: ``ceil(mask_rate * sequence_length)``).
        masking: ``"dynamic"`` or ``"static"``, as ``objectives.mlm.masking``.
        dupe_factor: with static masking, differently masked copies of each pair (10).
        whole_word: mask whole words, as ``objectives.mlm.whole_word``.
        max_ngram: the longest n-gram masked at once, as ``objectives.mlm.max_ngram`` (1: none).
    """

    def validate(self) -> None:
        self.check_masked_lm("tlm")


def pair_positions(segment_ids: np.ndarray, padding_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """XLM's ``positions`` and ``langs`` of packed pairs.

    Args:
        segment_ids: ``(batch, sequence)`` int, 0 on the source segment (with its specials), 1 on
            the target segment.
        padding_mask: ``(batch, sequence)`` int, 1 on real tokens.

    Returns:
        ``(position_ids, language_ids)``, ``(batch, sequence)`` int32: positions ``0, 1, ...``
        from the start and again from each row's first target token (padding continues the
        count); language ids ``segment_ids`` on real tokens, 0 on padding.
    """
    batch, length = segment_ids.shape
    target = (segment_ids > 0) & padding_mask.astype(bool)
    first_target = np.where(target.any(axis=1), target.argmax(axis=1), length)
    index = np.arange(length)[None, :]
    position_ids = np.where(index >= first_target[:, None], index - first_target[:, None], index)
    return position_ids.astype(np.int32), target.astype(np.int32)


class TranslationLM(Objective):
    """XLM's translation LM: masked LM over a concatenated sentence pair, positions reset at the
    second sentence, a language embedding per side."""

    name = "tlm"
    description = "translation LM over parallel pairs (--parallel): masked LM, positions reset at the target, language ids (XLM)"
    requires = frozenset({SEQUENCE_OUTPUT, TOKEN_EMBEDDING, POSITIONS_AND_LANGUAGES})
    config_class = TranslationLMConfig
    token_level_lm = True
    corrupts_token_ids = True
    needs_parallel_pairs = True

    def needs_word_starts(self, config: TranslationLMConfig) -> bool:
        return config.whole_word

    def prepare(
        self,
        batch: Mapping[str, np.ndarray],
        rng: np.random.Generator,
        config: TranslationLMConfig,
        specials: SpecialTokens,
        vocabulary_size: int,
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
        masked, positions, ids, weights = mask_batch("tlm", batch, rng, config, specials, vocabulary_size)
        position_ids, language_ids = pair_positions(batch["segment_ids"], batch["padding_mask"])
        inputs = {"token_ids": masked, "mask_positions": positions, "position_ids": position_ids, "language_ids": language_ids}
        return inputs, {"tlm": ids}, {"tlm": weights}

    def build(self, backbone: Any, inputs: dict[str, Any], config: TranslationLMConfig) -> tuple[dict, dict, dict, dict]:
        """The masked-LM head on ``backbone.sequence_output_with_languages``.

        Raises:
            ConfigError: a backbone with fewer than two language embeddings.
        """
        import keras

        if backbone.num_languages < LANGUAGES:
            raise ConfigError(
                f"objective 'tlm' gives the two sides of a pair language ids 0 and 1, but the backbone holds "
                f"{backbone.num_languages} language embedding(s); give it at least {LANGUAGES}"
            )
        extra = {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in ("mask_positions", "position_ids", "language_ids")}
        sequence_output = backbone.sequence_output_with_languages(inputs, extra["position_ids"], extra["language_ids"])
        logits = masked_lm_head(backbone, sequence_output, extra["mask_positions"], "tlm")
        metrics = {"tlm": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]}
        return extra, {"tlm": logits}, {"tlm": prediction_loss()}, metrics
