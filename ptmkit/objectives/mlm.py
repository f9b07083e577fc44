"""Masked language modelling (Devlin et al. 2019, section 3.1 and appendix A.1), with its variants.

Of the real (non-special, non-padding) tokens of each sequence, ``mask_rate`` (15%) are selected
for prediction; of those, 80% are replaced by ``[MASK]``, 10% by a random token and 10% are left
unchanged. The model predicts the original token at each selected position through a head tied
to the token embedding (keras-hub's ``MaskedLMHead``, as in ``BertMaskedLM``).

Variants (section ``[objectives.mlm]``):

- **dynamic masking** (the default; RoBERTa, Liu et al. 2019, section 4.1): every time a sequence
  is drawn it gets new masks, from the step's generator;
- **static masking** (BERT's ``create_pretraining_data.py``): instances and masks are fixed.
  BERT cut its data into instances once and masked them ``dupe_factor`` = 10 times with
  different masks, then trained on the copies. Here the sampler then draws fixed windows (the
  corpus tiled, :class:`~ptmkit.data.pretraining.InstanceSampler`'s ``fixed_windows``), and a
  sequence's mask is a function of its tokens and of a copy index drawn in ``[0, dupe_factor)``,
  so a sequence drawn again gets one of the same ``dupe_factor`` masks (with ``dupe_factor = 1``,
  always the same). The masks do not depend on ``train.seed``; which copies are drawn does;
- **whole-word masking** (Google's BERT release of 2019-05-31, ``--do_whole_word_mask``): words,
  not word pieces, are selected: a word's continuation pieces (WordPiece ``##x``) are masked with
  it, each piece then replaced 80/10/10 on its own as in that implementation;
- **n-gram masking** (ALBERT, Lan et al. 2020, section 4.1, after SpanBERT: "we generate masked
  inputs for the MLM targets using n-gram masking ... with the length of each n-gram mask selected
  randomly. The probability for the length n is given by p(n) = (1/n) / sum_{k=1..N} 1/k";
  N = 3): with ``max_ngram = N`` > 1, units (whole words with ``whole_word``, else tokens) are
  visited in random order and from each an n-gram of ``n ~ p(n)`` consecutive units is selected,
  as ALBERT's ``create_pretraining_data.py`` does (:func:`choose_ngrams`), until the 15% budget
  is spent; each selected piece is then replaced 80/10/10 on its own.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ptmkit.contract import SEQUENCE_OUTPUT, TOKEN_EMBEDDING, Objective, SpecialTokens
from ptmkit.errors import ConfigError

#: ``objectives.mlm.masking``: when masks are drawn.
MASKING_MODES = ("dynamic", "static")


def check_masking(section: str, masking: str, dupe_factor: int) -> None:
    """Validate a ``masking`` / ``dupe_factor`` pair of config keys in ``[objectives.SECTION]``.

    Raises:
        ConfigError: an unknown mode, or ``dupe_factor`` < 1.
    """
    if masking not in MASKING_MODES:
        raise ConfigError(f"config key 'objectives.{section}.masking' must be one of {', '.join(MASKING_MODES)}, got {masking!r}")
    if dupe_factor < 1:
        raise ConfigError(f"config key 'objectives.{section}.dupe_factor' must be >= 1, got {dupe_factor}")


def check_replacement_rates(section: str, mask_rate: float, mask_token_rate: float, random_token_rate: float) -> None:
    """Validate the 15% / 80% / 10% rates of ``[objectives.SECTION]``.

    Raises:
        ConfigError: a rate outside [0, 1], or ``mask_token_rate + random_token_rate`` > 1.
    """
    for name, value in (("mask_rate", mask_rate), ("mask_token_rate", mask_token_rate), ("random_token_rate", random_token_rate)):
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"config key 'objectives.{section}.{name}' must be in [0, 1], got {value}")
    if mask_token_rate + random_token_rate > 1.0:
        raise ConfigError(f"config keys 'objectives.{section}.mask_token_rate' + 'random_token_rate' must be <= 1")


@dataclasses.dataclass
class MaskedLMConfig:
    """Masked-LM settings (section ``[objectives.mlm]``); defaults are BERT's (Devlin et al. 2019).

    Attributes:
        mask_rate: fraction of real tokens selected for prediction (BERT: 0.15).
        mask_token_rate: of the selected, the fraction replaced by ``[MASK]`` (BERT: 0.8).
        random_token_rate: of the selected, the fraction replaced by a uniformly random token
            (BERT: 0.1; the rest, 0.1, are kept).
        max_predictions: predictions per sequence (0: ``ceil(mask_rate * sequence_length)``).
        masking: ``"dynamic"``: random windows, new masks each time a sequence is drawn (RoBERTa,
            Liu et al. 2019; ptmkit's behaviour from the start); ``"static"``: fixed windows (the
            corpus tiled), each masked as one of ``dupe_factor`` fixed copies (BERT's
            create_pretraining_data.py).
        dupe_factor: with static masking, how many differently masked copies of each sequence
            there are (BERT: 10); ignored with dynamic masking.
        whole_word: select whole words: every piece of a word is masked with it (BERT's whole-word
            masking); needs a tokenizer that marks word continuations (WordPiece ``##``) or word
            starts (SentencePiece's ``▁``, :func:`ptmkit.data.tokenization.word_start_table`).
        max_ngram: the longest n-gram selected at once, in units (words with ``whole_word``, else
            tokens); 1 (the default): single units (BERT); 3: ALBERT's n-gram masking, lengths
            ``n ~ p(n) = (1/n) / sum_{k=1..max_ngram} 1/k`` (:func:`choose_ngrams`).
    """

    mask_rate: float = 0.15
    mask_token_rate: float = 0.8
    random_token_rate: float = 0.1
    max_predictions: int = 0
    masking: str = "dynamic"
    dupe_factor: int = 10
    whole_word: bool = False
    max_ngram: int = 1

    def validate(self) -> None:
        self.check_masked_lm("mlm")

    def check_masked_lm(self, section: str) -> None:
        """Validate these keys in ``[objectives.SECTION]`` (objectives that extend this config).

        Raises:
            ConfigError: a rate out of range, an unknown masking mode, ``dupe_factor`` < 1 or
                negative ``max_predictions``.
        """
        check_replacement_rates(section, self.mask_rate, self.mask_token_rate, self.random_token_rate)
        check_masking(section, self.masking, self.dupe_factor)
        if self.max_predictions < 0:
            raise ConfigError(f"config key 'objectives.{section}.max_predictions' must be >= 0, got {self.max_predictions}")
        if self.max_ngram < 1:
            raise ConfigError(f"config key 'objectives.{section}.max_ngram' must be >= 1, got {self.max_ngram}")


def row_generators(token_ids: np.ndarray, rng: np.random.Generator, masking: str, dupe_factor: int) -> list[np.random.Generator]:
    """One generator per row of ``token_ids`` to draw that row's masks from.

    Dynamic masking: the step's ``rng`` for every row (new masks at every draw). Static masking:
    a generator seeded by the row's tokens (a BLAKE2b digest of its ``(sequence,)`` int32 ids,
    padding included) and a copy index drawn from ``rng`` in ``[0, dupe_factor)``, so that a
    sequence drawn twice is masked alike whenever the copy index repeats.
    """
    if masking == "dynamic":
        return [rng] * len(token_ids)
    copies = rng.integers(0, dupe_factor, size=len(token_ids))
    generators = []
    for row, copy in zip(np.ascontiguousarray(token_ids, dtype=np.int32), copies, strict=True):
        digest = np.frombuffer(hashlib.blake2b(row.tobytes(), digest_size=16).digest(), dtype=np.uint32)
        generators.append(np.random.default_rng([int(copy), *digest.tolist()]))
    return generators


def word_groups(positions: np.ndarray, word_start: np.ndarray | None) -> list[np.ndarray]:
    """Split a row's candidate ``positions`` (sorted) into words.

    A word starts at a position whose ``word_start`` is 1, after a gap (a special token such as
    ``[SEP]`` between two segments) or at the first candidate (a window that begins inside a
    word keeps that word's tail as a word). Without ``word_start`` each position is a word.
    """
    if positions.size == 0:
        return []
    if word_start is None:
        return [positions[i : i + 1] for i in range(positions.size)]
    begins = word_start[positions].astype(bool)
    begins[1:] |= np.diff(positions) != 1
    begins[0] = True
    return np.split(positions, np.flatnonzero(begins)[1:])


def prediction_count(candidates: int, predictions: int, mask_rate: float) -> int:
    """BERT's ``num_to_predict``: ``min(max_predictions, max(1, round(candidates * mask_rate)))``."""
    return min(predictions, max(1, int(round(candidates * mask_rate))))


def choose_whole_words(words: list[np.ndarray], count: int, rng: np.random.Generator) -> np.ndarray:
    """Google BERT's whole-word selection: words in random order, each taken whole when it still
    fits into ``count`` predictions (a word that would overflow is skipped). Sorted positions."""
    chosen: list[np.ndarray] = []
    taken = 0
    for index in rng.permutation(len(words)):
        if taken >= count:
            break
        if taken + words[index].size > count:
            continue
        chosen.append(words[index])
        taken += words[index].size
    return np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, np.int64)


def ngram_length_probabilities(max_ngram: int) -> np.ndarray:
    """``(max_ngram,)`` float64: ALBERT's ``p(n) = (1/n) / sum_{k=1..max_ngram} 1/k`` for
    ``n = 1 .. max_ngram`` (N = 3: 6/11, 3/11, 2/11)."""
    weights = 1.0 / np.arange(1, max_ngram + 1)
    return weights / weights.sum()


def choose_ngrams(units: list[np.ndarray], count: int, max_ngram: int, rng: np.random.Generator) -> tuple[np.ndarray, list[int]]:
    """ALBERT's n-gram selection (``create_masked_lm_predictions`` of its
    ``create_pretraining_data.py``, ``favor_shorter_ngram``) over one sequence's ``units`` (arrays
    of positions, in order: whole words or single tokens).

    The units are visited in random order. From unit ``i``, ``n`` is drawn from
    :func:`ngram_length_probabilities` restricted to the n-grams that fit before the last unit
    (renormalised); while units ``i .. i+n-1`` would overflow the ``count`` budget, ``n`` is
    shortened (a unigram that still overflows is skipped); an n-gram that overlaps one chosen
    already is skipped. Ends when ``count`` positions are chosen or every unit was visited.

    Returns:
        ``(positions, lengths)``: the chosen positions, sorted (at most ``count``), and the length
        ``n`` of each chosen n-gram in units, in the order chosen.
    """
    probabilities = ngram_length_probabilities(max_ngram)
    sizes = np.array([unit.size for unit in units], np.int64)
    covered = np.zeros(len(units), bool)
    chosen: list[np.ndarray] = []
    lengths: list[int] = []
    taken = 0
    for start in rng.permutation(len(units)):
        if taken >= count:
            break
        fitting = min(max_ngram, len(units) - start)
        n = 1 + int(rng.choice(fitting, p=probabilities[:fitting] / probabilities[:fitting].sum()))
        while n > 1 and taken + sizes[start : start + n].sum() > count:
            n -= 1
        size = int(sizes[start : start + n].sum())
        if taken + size > count or covered[start : start + n].any():
            continue
        covered[start : start + n] = True
        chosen.extend(units[start : start + n])
        lengths.append(n)
        taken += size
    return (np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, np.int64)), lengths


def mask_tokens(
    token_ids: np.ndarray,
    padding_mask: np.ndarray,
    rng: np.random.Generator,
    config: MaskedLMConfig,
    specials: SpecialTokens,
    vocabulary_size: int,
    word_start: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Select and corrupt tokens for masked-LM training.

    Args:
        token_ids: ``(batch, sequence)`` int32, packed with specials and padding.
        padding_mask: ``(batch, sequence)``, 1 for real tokens (specials included), 0 for padding.
        rng: the NumPy generator (deterministic per step, so a resumed run masks identically).
        word_start: ``(batch, sequence)`` int, 1 where a token begins a word; required by
            ``config.whole_word``. With ``config.max_ngram`` > 1, n-grams of words (whole words)
            or of tokens are selected (:func:`choose_ngrams`).

    Returns:
        ``(masked_token_ids, mask_positions, mask_ids, mask_weights)``: the corrupted
        ``(batch, sequence)`` int32 ids; ``(batch, max_predictions)`` int32 positions, original
        ids, and float32 weights (1 for a real prediction, 0 for padding of the prediction list).

    Raises:
        ValueError: ``config.whole_word`` without ``word_start``.
    """
    if config.whole_word and word_start is None:
        raise ValueError("whole-word masking needs the batch's word_start")
    batch, length = token_ids.shape
    predictions = config.max_predictions or math.ceil(config.mask_rate * length)
    masked = token_ids.copy()
    positions = np.zeros((batch, predictions), np.int32)
    ids = np.zeros((batch, predictions), np.int32)
    weights = np.zeros((batch, predictions), np.float32)
    special = np.isin(token_ids, specials.structural())
    candidates = (padding_mask.astype(bool)) & ~special
    for row, row_rng in enumerate(row_generators(token_ids, rng, config.masking, config.dupe_factor)):
        where = np.flatnonzero(candidates[row])
        if where.size == 0:
            continue
        count = prediction_count(where.size, predictions, config.mask_rate)
        if config.max_ngram > 1:
            units = word_groups(where, word_start[row] if config.whole_word and word_start is not None else None)
            chosen, _ = choose_ngrams(units, count, config.max_ngram, row_rng)
            count = chosen.size
        elif config.whole_word:
            assert word_start is not None
            chosen = choose_whole_words(word_groups(where, word_start[row]), count, row_rng)
            count = chosen.size
        else:
            chosen = np.sort(row_rng.choice(where, size=count, replace=False))
        draw = row_rng.random(count)
        to_mask = draw < config.mask_token_rate
        to_random = (draw >= config.mask_token_rate) & (draw < config.mask_token_rate + config.random_token_rate)
        positions[row, :count] = chosen
        ids[row, :count] = token_ids[row, chosen]
        weights[row, :count] = 1.0
        masked[row, chosen[to_mask]] = specials["mask"]
        masked[row, chosen[to_random]] = row_rng.integers(0, vocabulary_size, size=int(to_random.sum()))
    return masked, positions, ids, weights


def masked_lm_head(backbone: Any, sequence_output: Any, mask_positions: Any, name: str) -> Any:
    """keras-hub's ``MaskedLMHead`` tied to ``backbone.token_embedding`` (as ``BertMaskedLM``):
    ``(batch, predictions, vocabulary)`` float32 logits at ``mask_positions``.

    The head computes in the backbone's dtype policy, as ``BertMaskedLM`` does: under
    ``mixed_bfloat16`` its output projection (hidden x vocabulary, the largest matmul of a small
    model's step) runs in bfloat16 on the CPU's matrix units instead of an fp32 GEMM; the logits are
    cast to float32 for the softmax and the loss. The tied table's reverse projection is set to the
    policy's compute dtype too: Keras' ``Embedding`` keeps its table out of autocasting, so the
    ``matmul`` of bfloat16 states with it would otherwise be promoted to a float32 GEMM (a third
    of oneDNN's time in a bf16 step of the quickstart's BERT, measured with ``ONEDNN_VERBOSE``)."""
    import keras
    import keras_hub

    embedding = backbone.token_embedding
    compute_dtype = backbone.dtype_policy.compute_dtype
    if compute_dtype != "float32" and getattr(embedding, "reverse_dtype", "") is None:
        embedding.reverse_dtype = compute_dtype
    head = keras_hub.layers.MaskedLMHead(
        vocabulary_size=backbone.vocabulary_size,
        token_embedding=backbone.token_embedding,
        intermediate_activation="gelu",
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
        dtype=backbone.dtype_policy,
        name=name,
    )
    logits = head(sequence_output, mask_positions=mask_positions)
    return logits if logits.dtype == "float32" else keras.layers.Activation("linear", dtype="float32", name=f"{name}_logits")(logits)


def prediction_loss() -> Any:
    """Cross-entropy with Keras' default reduction. With the core's relative sample weights
    (:func:`ptmkit.data.pretraining.relative_weights`, mean 1 per step) it is the mean over the
    real predictions, ``sum(w * nll) / sum(w)``, as BERT's ``get_masked_lm_output``
    (``numerator / denominator``), not a loss lowered by the share of empty slots of the
    ``(batch, max_predictions)`` list."""
    import keras

    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def mask_batch(
    objective: str, batch: Mapping[str, np.ndarray], rng: np.random.Generator, config: MaskedLMConfig, specials: SpecialTokens, vocabulary_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`mask_tokens` on a packed batch (its ``word_start`` when whole words are masked), for
    objective ``objective``, which needs the tokenizer's mask token (:func:`require_mask_token`)."""
    require_mask_token(objective, specials)
    return mask_tokens(batch["token_ids"], batch["padding_mask"], rng, config, specials, vocabulary_size, batch.get("word_start"))


def require_mask_token(objective: str, specials: SpecialTokens) -> None:
    """Raises ConfigError when the tokenizer has no mask token."""
    if "mask" not in specials:
        raise ConfigError(f"objective {objective!r} replaces tokens by the mask token, which this tokenizer lacks (its specials: {dict(specials)})")


class MaskedLM(Objective):
    """Masked language modelling with an output layer tied to the token embedding."""

    name = "mlm"
    description = "masked LM: 15% of tokens, 80% [MASK] / 10% random / 10% kept (BERT); static/dynamic, whole-word, n-gram (ALBERT)"
    requires = frozenset({SEQUENCE_OUTPUT, TOKEN_EMBEDDING})
    config_class = MaskedLMConfig
    token_level_lm = True
    corrupts_token_ids = True

    def needs_word_starts(self, config: MaskedLMConfig) -> bool:
        return config.whole_word

    def prepare(
        self,
        batch: Mapping[str, np.ndarray],
        rng: np.random.Generator,
        config: MaskedLMConfig,
        specials: SpecialTokens,
        vocabulary_size: int,
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
        masked, positions, ids, weights = mask_batch("mlm", batch, rng, config, specials, vocabulary_size)
        return {"token_ids": masked, "mask_positions": positions}, {"mlm": ids}, {"mlm": weights}

    def build(self, backbone: Any, inputs: dict[str, Any], config: MaskedLMConfig) -> tuple[dict, dict, dict, dict]:
        import keras

        mask_positions = keras.Input(shape=(None,), dtype="int32", name="mask_positions")
        logits = masked_lm_head(backbone, backbone(inputs)["sequence_output"], mask_positions, "mlm")
        loss = prediction_loss()
        metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
        return {"mask_positions": mask_positions}, {"mlm": logits}, {"mlm": loss}, {"mlm": metrics}
