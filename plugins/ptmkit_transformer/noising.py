"""Denoising noise functions of encoder-decoder pre-training, as pure NumPy functions over one
document's token ids.

- BART's five noising transformations (Lewis et al. 2020, "BART: Denoising Sequence-to-Sequence
  Pre-training for Natural Language Generation, Translation, and Comprehension", section 2.2),
  ported from fairseq's ``fairseq/data/denoising_dataset.py`` (``DenoisingDataset``):
  :func:`token_masking`, :func:`token_deletion`, :func:`text_infilling`,
  :func:`sentence_permutation`, :func:`document_rotation`.
- T5's span corruption (Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a
  Unified Text-to-Text Transformer", sections 3.1.4 and 3.3), ported from
  ``t5/data/preprocessors.py`` (``random_spans_noise_mask``, ``noise_span_to_unique_sentinel``,
  ``nonnoise_span_to_unique_sentinel``): :func:`t5_span_corruption`.
- MASS (Song et al. 2019, "MASS: Masked Sequence to Sequence Pre-training for Language
  Generation", section 2.2): :func:`mass_fragment`.

Every function takes ``ids``, a ``(length,)`` integer array of token ids without specials (no
``<s>``/``</s>``: the family adds them when it packs a batch), and a ``numpy.random.Generator``;
it returns new ``int64`` arrays and leaves ``ids`` as it was. Special ids (``mask_id``, the
sentinels) are passed in; they should not occur in ``ids``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

#: fairseq's span-length distribution is a Poisson pmf truncated at 128 tokens
#: (``DenoisingDataset.__init__``: ``k`` up to 128 for ``mask_length = "span-poisson"``).
MAX_SPAN_LENGTH = 128


def _ids(ids: Sequence[int] | np.ndarray) -> np.ndarray:
    array = np.asarray(ids, dtype=np.int64)
    if array.ndim != 1:
        raise ValueError(f"ids must be a (length,) array, got shape {array.shape}")
    return array


def _check_ratio(name: str, value: float, high: float = 1.0) -> None:
    if not 0.0 <= value <= high:
        raise ValueError(f"{name} must be in [0, {high}], got {value}")


def masked_count(length: int, ratio: float) -> int:
    """How many of ``length`` tokens BART's noising selects: ``ceil(length * ratio)``
    (fairseq's ``num_to_mask = int(math.ceil(is_word_start.float().sum() * p))``)."""
    return int(math.ceil(length * ratio - 1e-9))


def token_masking(ids: Sequence[int] | np.ndarray, rng: np.random.Generator, mask_id: int, ratio: float = 0.15) -> np.ndarray:
    """BART's token masking (section 2.2, "following BERT, random tokens are sampled and replaced
    with [MASK]"): ``ceil(ratio * length)`` positions drawn without replacement become ``mask_id``
    (fairseq's ``add_whole_word_mask`` with single-token units and ``replace_length = 1``; its
    optional 10% random replacements, ``mask_random``, are not drawn here).

    Args:
        ids: ``(length,)`` int token ids.
        rng: the draws.
        mask_id: the ``<mask>`` id.
        ratio: the share of tokens masked, in ``[0, 1]`` (BERT's 0.15 by default; the paper does
            not fix it for this transformation).

    Returns:
        ``(length,)`` int64: ``ids`` with the chosen positions set to ``mask_id``.

    Raises:
        ValueError: ``ratio`` outside ``[0, 1]``; ``ids`` not one-dimensional.
    """
    _check_ratio("ratio", ratio)
    out = _ids(ids).copy()
    out[rng.choice(len(out), masked_count(len(out), ratio), replace=False)] = mask_id
    return out


def token_deletion(ids: Sequence[int] | np.ndarray, rng: np.random.Generator, ratio: float = 0.15) -> np.ndarray:
    """BART's token deletion (section 2.2, "random tokens are deleted from the input; the model
    must decide which positions are missing"): ``ceil(ratio * length)`` positions drawn without
    replacement are removed (fairseq: ``replace_length = 0``).

    Args:
        ids: ``(length,)`` int token ids.
        rng: the draws.
        ratio: the share of tokens deleted, in ``[0, 1]``.

    Returns:
        ``(length - ceil(ratio * length),)`` int64: the kept tokens, in their order.

    Raises:
        ValueError: ``ratio`` outside ``[0, 1]``.
    """
    _check_ratio("ratio", ratio)
    array = _ids(ids)
    keep = np.ones(len(array), bool)
    keep[rng.choice(len(array), masked_count(len(array), ratio), replace=False)] = False
    return array[keep]


@functools.lru_cache(maxsize=8)
def _poisson_pmf(poisson_lambda: float) -> np.ndarray:
    """Poisson(``poisson_lambda``) probabilities of ``0 .. MAX_SPAN_LENGTH - 1``, renormalised."""
    k = np.arange(MAX_SPAN_LENGTH)
    pmf = np.exp(k * math.log(poisson_lambda) - poisson_lambda - np.array([math.lgamma(i + 1) for i in k]))
    return pmf / pmf.sum()


def infilling_span_lengths(budget: int, rng: np.random.Generator, poisson_lambda: float = 3.0) -> np.ndarray:
    """The span lengths of BART's text infilling for a budget of ``budget`` masked tokens, in the
    order drawn (fairseq's ``add_whole_word_mask``): lengths ~ Poisson(``poisson_lambda``)
    truncated at :data:`MAX_SPAN_LENGTH` are drawn until they add up to at least ``budget``, and
    the last one is cut so that they add up to exactly ``budget``. Zero lengths are kept (each
    inserts a mask).

    Returns:
        ``(spans,)`` int64 lengths, summing to ``budget`` (empty when ``budget`` is 0).
    """
    if budget <= 0:
        return np.zeros(0, np.int64)
    if poisson_lambda <= 0:
        raise ValueError(f"poisson_lambda must be positive, got {poisson_lambda}")
    pmf = _poisson_pmf(float(poisson_lambda))
    lengths = rng.choice(MAX_SPAN_LENGTH, size=budget, p=pmf)
    while lengths.sum() < budget:  # only when poisson_lambda is small: fairseq draws more too
        lengths = np.concatenate([lengths, rng.choice(MAX_SPAN_LENGTH, size=budget, p=pmf)])
    last = int(np.searchsorted(np.cumsum(lengths), budget))  # first span reaching the budget
    lengths = lengths[: last + 1].astype(np.int64)
    lengths[last] = budget - lengths[:last].sum()
    return lengths


def text_infilling(
    ids: Sequence[int] | np.ndarray, rng: np.random.Generator, mask_id: int, ratio: float = 0.3, poisson_lambda: float = 3.0
) -> np.ndarray:
    """BART's text infilling (section 2.2: "a number of text spans are sampled, with span lengths
    drawn from a Poisson distribution (lambda = 3). Each span is replaced with a single [MASK]
    token. 0-length spans correspond to the insertion of [MASK] tokens"; section 5.1: 30% of the
    tokens of each document masked, with sentence permutation).

    ``ceil(ratio * length)`` tokens are masked in spans whose lengths come from
    :func:`infilling_span_lengths`. Each span of ``n >= 1`` tokens becomes one ``mask_id``; each
    zero-length span inserts one ``mask_id``. One deviation from fairseq: fairseq draws span starts
    independently and lets spans overlap (so that fewer than ``ratio`` of the tokens may end up
    masked); here the spans are laid out without overlap and with at least one unmasked token
    between two of them (each span gets its own gap between the unmasked tokens, gaps drawn
    uniformly without replacement), so exactly ``ceil(ratio * length)`` tokens are masked and every
    span is one visible mask. When a document is too short for that many separate spans, the
    surplus zero-length spans are dropped first, then the shortest spans are merged into one.

    Args:
        ids: ``(length,)`` int token ids.
        rng: the draws.
        mask_id: the ``<mask>`` id.
        ratio: the share of tokens masked, in ``[0, 1]`` (paper: 0.3).
        poisson_lambda: the mean span length (paper: 3), positive.

    Returns:
        ``(length - masked + spans,)`` int64: the document with each span replaced by one mask.

    Raises:
        ValueError: ``ratio`` outside ``[0, 1]`` or ``poisson_lambda <= 0``.
    """
    _check_ratio("ratio", ratio)
    array = _ids(ids)
    budget = masked_count(len(array), ratio)
    lengths = _fit_spans(infilling_span_lengths(budget, rng, poisson_lambda), len(array) - budget + 1)
    return _place_spans(array, lengths, rng, mask_id)


def _fit_spans(lengths: np.ndarray, gaps: int) -> np.ndarray:
    """``lengths`` reduced to at most ``gaps`` spans, same total (:func:`text_infilling`)."""
    if len(lengths) <= gaps:
        return lengths
    nonzero = lengths[lengths > 0]
    zeros = lengths[lengths == 0][: max(0, gaps - len(nonzero))]
    if len(nonzero) > gaps:
        nonzero = np.sort(nonzero)[::-1]
        nonzero = np.concatenate([nonzero[: gaps - 1], [nonzero[gaps - 1 :].sum()]])
    return np.concatenate([nonzero, zeros]).astype(np.int64)


def _place_spans(array: np.ndarray, lengths: np.ndarray, rng: np.random.Generator, mask_id: int) -> np.ndarray:
    """``array`` with spans of ``lengths`` (in this order, left to right) each replaced by one
    ``mask_id``, span ``j`` in the ``j``-th of ``len(lengths)`` distinct gaps drawn among the
    ``len(array) - sum(lengths) + 1`` gaps around the unmasked tokens."""
    kept = len(array) - int(lengths.sum())
    gaps = np.sort(rng.choice(kept + 1, size=len(lengths), replace=False))
    out, source, previous_gap = [], 0, 0
    for gap, length in zip(gaps, lengths, strict=True):
        take = int(gap - previous_gap)  # unmasked tokens before this span
        out.append(array[source : source + take])
        out.append(np.array([mask_id], np.int64))
        source, previous_gap = source + take + int(length), int(gap)
    out.append(array[source:])
    return np.concatenate(out) if out else array.copy()


def split_sentences(ids: Sequence[int] | np.ndarray, end_ids: Sequence[int]) -> list[np.ndarray]:
    """``ids`` cut after every token in ``end_ids`` (fairseq's ``permute_sentences`` cuts at its
    full-stop index): ``(n_i,)`` int64 pieces whose concatenation is ``ids``; a last piece without
    an end token is a sentence too."""
    array = _ids(ids)
    ends = np.flatnonzero(np.isin(array, list(end_ids))) + 1
    return [piece for piece in np.split(array, ends) if len(piece)]


def sentence_permutation(sentences: Sequence[Sequence[int] | np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """BART's sentence permutation (section 2.2: "a document is divided into sentences based on
    full stops, and these sentences are shuffled in a random order"; fairseq's
    ``permute_sentences`` with ``permute_sentence_ratio = 1.0``, the BART-large setting).

    Args:
        sentences: the document's sentences, each ``(n_i,)`` int token ids (split them with
            :func:`split_sentences`, or tokenize the text's sentences one by one).
        rng: the draws.

    Returns:
        ``(sum n_i,)`` int64: the sentences concatenated in a uniformly random order.
    """
    pieces = [_ids(s) for s in sentences]
    if not pieces:
        return np.zeros(0, np.int64)
    return np.concatenate([pieces[i] for i in rng.permutation(len(pieces))])


def document_rotation(ids: Sequence[int] | np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """BART's document rotation (section 2.2: "a token is chosen uniformly at random, and the
    document is rotated so that it begins with that token"; fairseq's ``add_rolling_noise``).

    Returns:
        ``(length,)`` int64: ``ids[k:] + ids[:k]`` for ``k`` uniform in ``[0, length)``.
    """
    array = _ids(ids)
    return np.roll(array, -int(rng.integers(len(array)))) if len(array) else array.copy()


def t5_noise_counts(length: int, noise_density: float = 0.15, mean_span_length: float = 3.0) -> tuple[int, int]:
    """``(noise tokens, noise spans)`` of T5's ``random_spans_noise_mask`` for a ``length``-token
    input: ``round(max(length, 2) * noise_density)`` tokens, clipped to ``[1, length - 1]``, in
    ``max(1, round(tokens / mean_span_length))`` spans (NumPy's round is TensorFlow's: half to
    even). Deterministic: only the placement is random."""
    length = max(length, 2)
    tokens = min(max(int(np.round(length * noise_density)), 1), length - 1)
    return tokens, max(int(np.round(tokens / mean_span_length)), 1)


def _random_segmentation(items: int, segments: int, rng: np.random.Generator) -> np.ndarray:
    """T5's ``_random_segmentation``: ``items`` split into ``segments`` non-empty runs, the
    partition uniform over the compositions (a shuffled indicator of segment starts)."""
    first_in_segment = np.concatenate([[0], rng.permutation(np.arange(items - 1) < segments - 1).astype(np.int64)])
    segment_id = np.cumsum(first_in_segment)
    return np.bincount(segment_id, minlength=segments).astype(np.int64)


def t5_noise_mask(length: int, rng: np.random.Generator, noise_density: float = 0.15, mean_span_length: float = 3.0) -> np.ndarray:
    """T5's ``random_spans_noise_mask`` (``random_roll = False``): ``(length,)`` bool, True on
    the noise tokens; :func:`t5_noise_counts` of them, in that many spans, alternating with as many
    non-empty non-noise spans, the sequence starting with non-noise."""
    original = length
    length = max(length, 2)
    tokens, spans = t5_noise_counts(length, noise_density, mean_span_length)
    noise = _random_segmentation(tokens, spans, rng)
    nonnoise = _random_segmentation(length - tokens, spans, rng)
    interleaved = np.stack([nonnoise, noise], axis=1).reshape(-1)
    span_start = np.zeros(length, np.int64)
    span_start[np.cumsum(interleaved)[:-1]] = 1
    return (np.cumsum(span_start) % 2 == 1)[:original]


def t5_span_corruption(
    ids: Sequence[int] | np.ndarray, rng: np.random.Generator, sentinel_ids: Sequence[int], noise_density: float = 0.15, mean_span_length: float = 3.0
) -> tuple[np.ndarray, np.ndarray]:
    """T5's span corruption (Raffel et al. 2020, section 3.1.4; the baseline's 15% of tokens in
    spans of mean length 3, section 3.3.4), as T5's ``span_corruption`` preprocessor: a noise mask
    from :func:`t5_noise_mask`, then ``noise_span_to_unique_sentinel`` for the inputs and
    ``nonnoise_span_to_unique_sentinel`` for the targets.

    With ``S_j = sentinel_ids[j]`` and the document ``u_1 n_1 u_2 n_2 ... u_k n_k`` (``u`` the
    kept runs, ``n`` the noise spans)::

        inputs   u_1 S_0 u_2 S_1 ... u_k S_{k-1}
        targets  S_0 n_1 S_1 n_2 ... S_{k-1} n_k

    (T5's ``<extra_id_0>``, ``<extra_id_1>``, ... are its vocabulary's last ids, counted down;
    here they are whatever ``sentinel_ids`` holds, in order.)

    Args:
        ids: ``(length,)`` int token ids, ``length >= 2``.
        rng: the draws (two shuffles, as T5's two seeds).
        sentinel_ids: at least as many ids as there are spans (:func:`t5_noise_counts`).
        noise_density: the share of tokens corrupted (paper: 0.15).
        mean_span_length: the mean noise span length (paper: 3).

    Returns:
        ``(inputs, targets)``, int64 ``(length - noise + spans,)`` and ``(noise + spans,)``.

    Raises:
        ValueError: ``noise_density`` outside ``(0, 1)``, ``mean_span_length < 1``, fewer than
            2 tokens, or fewer sentinels than spans.
    """
    if not 0.0 < noise_density < 1.0:
        raise ValueError(f"noise_density must be in (0, 1), got {noise_density}")
    if mean_span_length < 1.0:
        raise ValueError(f"mean_span_length must be at least 1, got {mean_span_length}")
    array = _ids(ids)
    if len(array) < 2:
        raise ValueError(f"span corruption needs at least 2 tokens, got {len(array)}")
    spans = t5_noise_counts(len(array), noise_density, mean_span_length)[1]
    if len(sentinel_ids) < spans:
        raise ValueError(f"{spans} noise spans need as many sentinel ids, got {len(sentinel_ids)}")
    noise = t5_noise_mask(len(array), rng, noise_density, mean_span_length)
    return _to_sentinels(array, noise, sentinel_ids), _to_sentinels(array, ~noise, sentinel_ids)


def _to_sentinels(array: np.ndarray, noise: np.ndarray, sentinel_ids: Sequence[int]) -> np.ndarray:
    """T5's ``noise_span_to_unique_sentinel``: each run of ``noise`` tokens replaced by the next
    sentinel, the others kept."""
    previous = np.concatenate([[False], noise[:-1]])
    first = noise & ~previous
    out = array.copy()
    out[first] = np.asarray(sentinel_ids, np.int64)[np.cumsum(first)[first] - 1]
    return out[~(noise & previous)]


def mass_fragment(
    ids: Sequence[int] | np.ndarray, rng: np.random.Generator, mask_id: int, ratio: float = 0.5
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """MASS (Song et al. 2019, section 2.2): a contiguous fragment ``x^{u:v}`` of
    ``k = max(1, round(ratio * length))`` tokens (the paper sets ``k`` to about 50% of the
    sentence, the best value of its study of ``k``), from a start ``u`` uniform over the
    ``length - k + 1`` possible ones, is masked
    in the encoder and predicted by the decoder, whose inputs are the fragment shifted right by
    one (the paper's Figure 1: the tokens of the sentence outside the fragment are not fed to the
    decoder; its first input is a mask).

    Args:
        ids: ``(length,)`` int token ids, ``length >= 1``.
        rng: the draws.
        mask_id: the ``<mask>`` id.
        ratio: the fragment's share of the sentence, in ``(0, 1]`` (paper: 0.5).

    Returns:
        ``(encoder_input, decoder_input, decoder_target)``, int64 ``(length,)``, ``(k,)``,
        ``(k,)``: ``ids`` with the fragment set to ``mask_id``; ``[mask_id, *fragment[:-1]]``;
        the fragment.

    Raises:
        ValueError: ``ratio`` outside ``(0, 1]``, an empty ``ids``.
    """
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    array = _ids(ids)
    if not len(array):
        raise ValueError("MASS needs at least 1 token")
    k = max(1, int(np.round(ratio * len(array))))
    start = int(rng.integers(len(array) - k + 1))
    fragment = array[start : start + k].copy()
    encoder = array.copy()
    encoder[start : start + k] = mask_id
    return encoder, np.concatenate([[mask_id], fragment[:-1]]).astype(np.int64), fragment
