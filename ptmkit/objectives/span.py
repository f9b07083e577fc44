"""SpanBERT's span masking and span-boundary objective (Joshi et al. 2020, sections 3.1-3.2).

**Span masking.** Until 15% of a sequence's real tokens are masked, a span length ``l`` (in whole
words) is drawn from a geometric distribution ``Geo(p = 0.2)`` truncated to ``[1, 10]`` (its
probabilities renormalised, so the mean is ``3.80`` words as the paper says), a start is drawn
uniformly (a token, taken with its whole word), and the ``l`` words from there are masked.
Replacement is decided per span, not per token: 80% of spans become ``[MASK]`` tokens, 10%
random tokens and 10% stay as they are.

**Span-boundary objective (SBO).** Each masked token is also predicted from the encoder's
outputs at the two unmasked tokens around its span and its position in the span
(:class:`~ptmkit.objectives.span_layers.SpanBoundaryHead`); the loss is the sum of the masked-LM
and SBO losses (Keras sums the outputs' losses), as SpanBERT's ``L(x_i) = L_MLM + L_SBO``.
SpanBERT trains single segments without next-sentence prediction.

Spans that touch merge into one, as in SpanBERT's ``merge_intervals``; the merged span is then
the unit of replacement and of the boundary objective.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ptmkit.contract import SEQUENCE_OUTPUT, TOKEN_EMBEDDING, Objective, SpecialTokens
from ptmkit.errors import ConfigError
from ptmkit.objectives.mlm import (
    check_masking,
    check_replacement_rates,
    masked_lm_head,
    prediction_count,
    prediction_loss,
    require_mask_token,
    row_generators,
    word_groups,
)


@dataclasses.dataclass
class SpanMaskingConfig:
    """SpanBERT settings (section ``[objectives.span]``); defaults are the paper's.

    Attributes:
        mask_rate: fraction of real tokens masked, the budget (SpanBERT: 0.15).
        geometric_p: ``p`` of the span-length distribution ``Geo(p)`` (SpanBERT: 0.2).
        max_span_length: longest span, in words; lengths are drawn from the geometric
            distribution truncated to ``[1, max_span_length]`` (SpanBERT: 10; mean 3.8 words).
        mask_token_rate: of the spans, the fraction replaced by ``[MASK]`` tokens (0.8).
        random_token_rate: of the spans, the fraction replaced by random tokens (0.1; the rest,
            0.1, are kept).
        max_predictions: predictions per sequence (0: ``ceil(mask_rate * sequence_length)``).
        boundary_objective: add the span-boundary objective (SBO) head and loss.
        boundary_positions: relative positions the SBO head embeds; a token further than this
            into a (merged) span gets no SBO prediction, only the masked-LM one.
        masking: ``"dynamic"`` (new masks each time a sequence is drawn; SpanBERT, like RoBERTa)
            or ``"static"`` (fixed windows, each masked as one of ``dupe_factor`` fixed copies;
            see ``[objectives.mlm]``).
        dupe_factor: with static masking, differently masked copies of each sequence.
    """

    mask_rate: float = 0.15
    geometric_p: float = 0.2
    max_span_length: int = 10
    mask_token_rate: float = 0.8
    random_token_rate: float = 0.1
    max_predictions: int = 0
    boundary_objective: bool = True
    boundary_positions: int = 32
    masking: str = "dynamic"
    dupe_factor: int = 10

    def validate(self) -> None:
        check_replacement_rates("span", self.mask_rate, self.mask_token_rate, self.random_token_rate)
        check_masking("span", self.masking, self.dupe_factor)
        if not 0.0 < self.geometric_p <= 1.0:
            raise ConfigError(f"config key 'objectives.span.geometric_p' must be in (0, 1], got {self.geometric_p}")
        for key in ("max_span_length", "boundary_positions"):
            if getattr(self, key) < 1:
                raise ConfigError(f"config key 'objectives.span.{key}' must be >= 1, got {getattr(self, key)}")
        if self.max_predictions < 0:
            raise ConfigError(f"config key 'objectives.span.max_predictions' must be >= 0, got {self.max_predictions}")


def span_length_probabilities(p: float, max_length: int) -> np.ndarray:
    """``(max_length,)`` float64: ``P(l)`` for ``l = 1 .. max_length`` of ``Geo(p)`` truncated and
    renormalised, ``p (1 - p)^(l - 1) / (1 - (1 - p)^max_length)``."""
    lengths = np.arange(1, max_length + 1)
    weights = p * (1.0 - p) ** (lengths - 1)
    return weights / weights.sum()


def choose_spans(words: list[np.ndarray], count: int, rng: np.random.Generator, probabilities: np.ndarray) -> np.ndarray:
    """SpanBERT's span selection over one sequence's ``words`` (arrays of positions, in order).

    Repeatedly: draw a length ``l`` from ``probabilities`` and an anchor token uniformly; unless
    its word is masked already, mask ``l`` whole words from it, stopping early at the end of the
    sequence or segment, at a masked word, or at a word that would overflow the ``count`` budget.
    Ends when ``count`` tokens are masked (or after ``20 * count + 20`` draws: a budget that only
    long words remain for).

    Returns:
        sorted positions, at most ``count``.
    """
    sizes = np.array([w.size for w in words])
    word_of_token = np.repeat(np.arange(len(words)), sizes)
    taken = np.zeros(len(words), bool)
    masked = 0
    for _ in range(20 * count + 20):
        if masked >= count:
            break
        length = 1 + int(rng.choice(probabilities.size, p=probabilities))
        first = int(word_of_token[rng.integers(word_of_token.size)])
        for index in range(first, min(first + length, len(words))):
            contiguous = index == first or words[index][0] == words[index - 1][-1] + 1
            if taken[index] or not contiguous or masked + sizes[index] > count:
                break
            taken[index] = True
            masked += int(sizes[index])
    chosen = [w for w, t in zip(words, taken, strict=True) if t]
    return np.concatenate(chosen) if chosen else np.zeros(0, np.int64)


def runs(positions: np.ndarray) -> list[np.ndarray]:
    """Split sorted ``positions`` into maximal runs of consecutive positions (merged spans)."""
    return np.split(positions, np.flatnonzero(np.diff(positions) != 1) + 1) if positions.size else []


def mask_spans(
    token_ids: np.ndarray,
    padding_mask: np.ndarray,
    word_start: np.ndarray,
    rng: np.random.Generator,
    config: SpanMaskingConfig,
    specials: SpecialTokens,
    vocabulary_size: int,
) -> dict[str, np.ndarray]:
    """Mask spans of whole words and lay out the span-boundary targets.

    Args:
        token_ids: ``(batch, sequence)`` int32, packed with specials and padding.
        padding_mask: ``(batch, sequence)``, 1 for real tokens (specials included).
        word_start: ``(batch, sequence)`` int, 1 where a token begins a word.
        rng: the step's generator.

    Returns:
        ``token_ids`` (corrupted, ``(batch, sequence)`` int32) and, each ``(batch,
        max_predictions)``: ``mask_positions``, ``mask_ids`` (original ids), ``mask_weights``
        (float32, 1 on real predictions), ``boundary_left`` / ``boundary_right`` (int32 positions
        of the unmasked tokens around each prediction's span), ``span_offsets`` (int32 position
        in the span) and ``boundary_weights`` (float32, 1 where both boundaries are real tokens
        and the offset is below ``boundary_positions``).
    """
    batch, length = token_ids.shape
    predictions = config.max_predictions or math.ceil(config.mask_rate * length)
    probabilities = span_length_probabilities(config.geometric_p, config.max_span_length)
    out = {"token_ids": token_ids.copy()}
    for key in ("mask_positions", "mask_ids", "boundary_left", "boundary_right", "span_offsets"):
        out[key] = np.zeros((batch, predictions), np.int32)
    out["mask_weights"] = np.zeros((batch, predictions), np.float32)
    out["boundary_weights"] = np.zeros((batch, predictions), np.float32)
    candidates = padding_mask.astype(bool) & ~np.isin(token_ids, specials.structural())
    for row, row_rng in enumerate(row_generators(token_ids, rng, config.masking, config.dupe_factor)):
        where = np.flatnonzero(candidates[row])
        if where.size == 0:
            continue
        count = prediction_count(where.size, predictions, config.mask_rate)
        chosen = choose_spans(word_groups(where, word_start[row]), count, row_rng, probabilities)
        column = 0
        for span in runs(chosen):
            _replace_span(out["token_ids"][row], span, row_rng, config, specials, vocabulary_size)
            left, right = int(span[0]) - 1, int(span[-1]) + 1
            offsets = np.arange(span.size)
            bounded = left >= 0 and right < length and bool(padding_mask[row, right])
            cells = slice(column, column + span.size)
            out["mask_positions"][row, cells] = span
            out["mask_ids"][row, cells] = token_ids[row, span]
            out["mask_weights"][row, cells] = 1.0
            out["boundary_left"][row, cells] = max(left, 0)
            out["boundary_right"][row, cells] = min(right, length - 1)
            out["span_offsets"][row, cells] = np.minimum(offsets, config.boundary_positions - 1)
            out["boundary_weights"][row, cells] = (offsets < config.boundary_positions) & bounded
            column += span.size
    return out


def _replace_span(row: np.ndarray, span: np.ndarray, rng: np.random.Generator, config: SpanMaskingConfig, specials: SpecialTokens, vocabulary_size: int) -> None:
    """SpanBERT's span-level replacement, in place: one draw decides the whole span."""
    draw = rng.random()
    if draw < config.mask_token_rate:
        row[span] = specials["mask"]
    elif draw < config.mask_token_rate + config.random_token_rate:
        row[span] = rng.integers(0, vocabulary_size, size=span.size)


class SpanMasking(Objective):
    """SpanBERT: masked LM over spans of whole words, plus the span-boundary objective."""

    name = "span"
    description = "span masking (Geo(0.2) words, max 10, 15%) + span-boundary objective (SpanBERT)"
    requires = frozenset({SEQUENCE_OUTPUT, TOKEN_EMBEDDING})
    config_class = SpanMaskingConfig
    token_level_lm = True
    corrupts_token_ids = True

    def needs_word_starts(self, config: SpanMaskingConfig) -> bool:
        return True

    def prepare(
        self,
        batch: Mapping[str, np.ndarray],
        rng: np.random.Generator,
        config: SpanMaskingConfig,
        specials: SpecialTokens,
        vocabulary_size: int,
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
        require_mask_token("span", specials)
        out = mask_spans(batch["token_ids"], batch["padding_mask"], batch["word_start"], rng, config, specials, vocabulary_size)
        inputs = {"token_ids": out["token_ids"], "mask_positions": out["mask_positions"]}
        targets, weights = {"span": out["mask_ids"]}, {"span": out["mask_weights"]}
        if config.boundary_objective:
            inputs.update({key: out[key] for key in ("boundary_left", "boundary_right", "span_offsets")})
            targets["sbo"], weights["sbo"] = out["mask_ids"], out["boundary_weights"]
        return inputs, targets, weights

    def build(self, backbone: Any, inputs: dict[str, Any], config: SpanMaskingConfig) -> tuple[dict, dict, dict, dict]:
        import keras

        names = ["mask_positions"] + (["boundary_left", "boundary_right", "span_offsets"] if config.boundary_objective else [])
        extra = {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in names}
        sequence_output = backbone(inputs)["sequence_output"]
        outputs = {"span": masked_lm_head(backbone, sequence_output, extra["mask_positions"], "span")}
        if config.boundary_objective:
            from ptmkit.objectives.span_layers import SpanBoundaryHead

            head = SpanBoundaryHead(
                backbone.vocabulary_size,
                backbone.token_embedding,
                config.boundary_positions,
                kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
                dtype="float32",
                name="sbo",
            )
            outputs["sbo"] = head(sequence_output, extra["boundary_left"], extra["boundary_right"], extra["span_offsets"])
        losses = {name: prediction_loss() for name in outputs}
        metrics = {name: [keras.metrics.SparseCategoricalAccuracy(name="accuracy")] for name in outputs}
        return extra, outputs, losses, metrics
