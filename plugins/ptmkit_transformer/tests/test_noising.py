"""The denoising noise functions against their papers' parameters over 10,000 draws each, and
exact small cases.

Tolerances: a sample mean of N = 10,000 independent draws of a variable of variance s^2 has
standard error SE = s / sqrt(N); the tests allow 5 SE (the chance that a correct implementation
fails one check is about 6e-7; the draws are seeded anyway, so the tests are deterministic), with
s^2 the variance of the distribution the paper specifies (Poisson: lambda; a Bernoulli share p:
p (1 - p); a discrete uniform over n values: (n^2 - 1) / 12; a part of a uniform random
composition: computed exactly from its pmf). Where the algorithm fixes a count (T5's numbers of
noise tokens and spans, BART's ceil(ratio * length) masked tokens, MASS's fragment length), the
test checks it exactly instead.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ptmkit_transformer import noising

DRAWS = 10_000
TOLERANCE_SE = 5.0
MASK = 1


def _within(values: np.ndarray, expected: float, variance: float) -> tuple[float, float]:
    """``(measured mean, allowed deviation)`` of ``values`` against ``expected``."""
    return float(np.mean(values)), TOLERANCE_SE * math.sqrt(variance / len(values))


def _document(length: int) -> np.ndarray:
    """Distinct token ids ``10 .. 10 + length - 1``: position ``i`` holds ``10 + i``."""
    return np.arange(10, 10 + length, dtype=np.int64)


def test_text_infilling_spans_are_poisson_3_and_mask_30_percent() -> None:
    rng = np.random.default_rng(0)
    length, budget = 100, 30  # BART: 30% of the tokens (section 5), span lengths ~ Poisson(3)
    first_spans, spans_per_document = [], []
    for _ in range(DRAWS):
        out = noising.text_infilling(_document(length), rng, MASK, ratio=0.3, poisson_lambda=3.0)
        kept = out[out != MASK] - 10
        assert len(kept) == length - budget  # exactly ceil(0.3 * 100) tokens masked
        assert np.all(np.diff(kept) > 0)  # the unmasked tokens, in order
        masks = np.flatnonzero(out == MASK)
        assert np.all(np.diff(masks) > 1)  # one mask per span: never two side by side
        before = out[masks[0] - 1] - 10 if masks[0] > 0 else -1
        after = out[masks[0] + 1] - 10 if masks[0] + 1 < len(out) else length
        first_spans.append(after - before - 1)  # tokens the first mask stands for (0: an insertion)
        spans_per_document.append(len(masks))
    first = np.asarray(first_spans)
    # Spans are laid out left to right in the order drawn, so the first mask's span is the first
    # draw: Poisson(3), untouched by the budget's cut of the last span (P(X >= 30) ~ 1e-20).
    mean, allowed = _within(first, 3.0, 3.0)
    assert abs(mean - 3.0) < allowed, (mean, allowed)
    zero_share, zero_allowed = _within(first == 0, math.exp(-3), math.exp(-3) * (1 - math.exp(-3)))
    assert abs(zero_share - math.exp(-3)) < zero_allowed, (zero_share, zero_allowed)  # zero-length spans: P = e^-3
    assert float(np.var(first)) == pytest.approx(3.0, rel=0.1)  # a Poisson's variance is its mean
    # every span together (the last one cut to the budget): 30 tokens over the spans' count
    print(f"BART infilling: first-span mean {mean:.3f} (expected 3, +-{allowed:.3f}), zero-length {zero_share:.4f} "
          f"(expected {math.exp(-3):.4f}), mask share 0.3 exactly, mean span incl. the cut last {budget / np.mean(spans_per_document):.3f}")


def test_infilling_span_lengths_sum_to_the_budget() -> None:
    rng = np.random.default_rng(1)
    for budget in (1, 2, 7, 30, 150):
        lengths = noising.infilling_span_lengths(budget, rng)
        assert lengths.sum() == budget and np.all(lengths >= 0) and lengths[-1] >= 0
    assert noising.infilling_span_lengths(0, rng).size == 0
    with pytest.raises(ValueError, match="poisson_lambda"):
        noising.infilling_span_lengths(3, rng, 0.0)


def test_a_zero_length_span_inserts_a_mask() -> None:
    out = noising._place_spans(_document(5), np.array([0, 2]), np.random.default_rng(3), MASK)
    assert len(out) == 5 - 2 + 2 and (out == MASK).sum() == 2
    kept = out[out != MASK].tolist()
    assert len(kept) == 3 and kept == sorted(kept)  # three tokens kept in order, two removed by the 2-span
    only_insert = noising._place_spans(_document(4), np.array([0]), np.random.default_rng(4), MASK)
    assert (only_insert == MASK).sum() == 1 and only_insert[only_insert != MASK].tolist() == _document(4).tolist()


def test_text_infilling_on_a_short_document_keeps_the_budget() -> None:
    rng = np.random.default_rng(5)
    for _ in range(200):
        out = noising.text_infilling(_document(4), rng, MASK, ratio=0.5)
        assert (out != MASK).sum() == 2 and (out == MASK).sum() >= 1
        masks = np.flatnonzero(out == MASK)
        assert np.all(np.diff(masks) > 1)


def test_token_masking_and_deletion_choose_ceil_ratio_uniformly() -> None:
    rng = np.random.default_rng(6)
    length, ratio = 20, 0.15
    chosen = math.ceil(length * ratio)  # fairseq's num_to_mask
    masked_at = np.zeros((DRAWS, length), bool)
    for draw in range(DRAWS):
        out = noising.token_masking(_document(length), rng, MASK, ratio)
        masked_at[draw] = out == MASK
        assert masked_at[draw].sum() == chosen
        assert np.array_equal(out[~masked_at[draw]], _document(length)[~masked_at[draw]])
    p = chosen / length
    share, allowed = _within(masked_at.reshape(-1), p, p * (1 - p))
    assert abs(share - p) < allowed
    per_position = masked_at.mean(axis=0)  # no position favoured: each is chosen with probability p
    assert np.all(np.abs(per_position - p) < TOLERANCE_SE * math.sqrt(p * (1 - p) / DRAWS)), per_position


def test_deletion_removes_exactly_the_chosen_tokens() -> None:
    document = _document(13)
    out = noising.token_deletion(document, np.random.default_rng(7), ratio=0.3)
    removed = np.random.default_rng(7).choice(13, math.ceil(13 * 0.3), replace=False)  # the same draw
    assert out.tolist() == [t for i, t in enumerate(document.tolist()) if i not in set(removed.tolist())]
    masked = noising.token_masking(document, np.random.default_rng(7), MASK, ratio=0.3)
    assert sorted(np.flatnonzero(masked == MASK).tolist()) == sorted(removed.tolist())


def test_sentence_permutation_is_uniform_over_orders() -> None:
    rng = np.random.default_rng(8)
    sentences = [np.array([10, 11, 4]), np.array([12, 4]), np.array([13, 14, 15])]
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(DRAWS):
        out = noising.sentence_permutation(sentences, rng)
        assert sorted(out.tolist()) == sorted(np.concatenate(sentences).tolist())
        counts[tuple(out.tolist())] = counts.get(tuple(out.tolist()), 0) + 1
    assert len(counts) == 6
    p = 1 / 6
    for count in counts.values():
        assert abs(count / DRAWS - p) < TOLERANCE_SE * math.sqrt(p * (1 - p) / DRAWS)
    assert [s.tolist() for s in noising.split_sentences([10, 11, 4, 12, 4, 13], end_ids=[4])] == [[10, 11, 4], [12, 4], [13]]


def test_document_rotation_keeps_the_tokens_and_starts_uniformly() -> None:
    rng = np.random.default_rng(9)
    length = 50
    starts = []
    for _ in range(DRAWS):
        out = noising.document_rotation(_document(length), rng)
        assert sorted(out.tolist()) == _document(length).tolist()  # the same multiset
        start = int(out[0] - 10)
        assert out.tolist() == np.roll(_document(length), -start).tolist()  # a rotation
        starts.append(start)
    mean, allowed = _within(np.asarray(starts), (length - 1) / 2, (length**2 - 1) / 12)
    assert abs(mean - (length - 1) / 2) < allowed


def _composition_part_moments(total: int, parts: int) -> tuple[float, float]:
    """Mean and variance of one part of a uniform random composition of ``total`` into ``parts``
    positive parts: P(j) = C(total - j - 1, parts - 2) / C(total - 1, parts - 1)."""
    pmf = np.array([math.comb(total - j - 1, parts - 2) for j in range(1, total - parts + 2)], float) / math.comb(total - 1, parts - 1)
    values = np.arange(1, total - parts + 2)
    mean = float((pmf * values).sum())
    return mean, float((pmf * values**2).sum()) - mean**2


def test_t5_span_corruption_corrupts_15_percent_in_spans_of_mean_3() -> None:
    rng = np.random.default_rng(10)
    sentinels = list(range(1000, 1100))
    noise_tokens, spans = 0, 0
    for length in range(16, 513):  # up to T5's 512-token inputs: the counts are fixed by the length
        inputs, targets = noising.t5_span_corruption(_document(length), rng, sentinels)
        tokens, count = noising.t5_noise_counts(length)
        assert tokens == round(length * 0.15) and count == max(1, round(tokens / 3))  # T5's counts, half to even
        assert int(np.isin(inputs, sentinels).sum()) == count == int(np.isin(targets, sentinels).sum())
        assert len(targets) - count == tokens and len(inputs) == length - tokens + count
        noise_tokens, spans = noise_tokens + tokens, spans + count
    share, mean_span = noise_tokens / sum(range(16, 513)), noise_tokens / spans
    assert abs(share - 0.15) < 0.5 / 16  # rounding: at most half a token per document
    assert abs(mean_span - 3.0) < 0.1, mean_span  # round(tokens / 3) spans: within rounding of 3
    # The placement is random: with 15 noise tokens in 5 spans (length 100), each span's length
    # is one part of a uniform composition of 15 into 5 (T5's _random_segmentation).
    spans_at_100 = []
    for _ in range(DRAWS):
        noise = noising.t5_noise_mask(100, rng)
        starts = np.flatnonzero(np.diff(np.concatenate([[0], noise.astype(np.int8), [0]])) == 1)
        ends = np.flatnonzero(np.diff(np.concatenate([[0], noise.astype(np.int8), [0]])) == -1)
        assert noise.sum() == 15 and len(starts) == 5 and not noise[0]
        spans_at_100.append(ends[0] - starts[0])
    expected, variance = _composition_part_moments(15, 5)
    first_mean, allowed = _within(np.asarray(spans_at_100), expected, variance)
    assert abs(first_mean - expected) < allowed, (first_mean, expected, allowed)
    print(f"T5: noise share {share:.4f} (0.15), mean span {mean_span:.3f} (3), first span at length 100 {first_mean:.3f} "
          f"over {DRAWS} draws (expected {expected:.3f} +-{allowed:.3f})")


def test_t5_targets_and_inputs_reconstruct_the_document() -> None:
    rng = np.random.default_rng(11)
    sentinels = [900, 901, 902, 903, 904, 905, 906, 907]
    for length in (2, 3, 10, 37, 64):
        document = _document(length)
        inputs, targets = noising.t5_span_corruption(document, rng, sentinels)
        pieces = {}  # sentinel -> the noise span it stands for
        marks = np.flatnonzero(np.isin(targets, sentinels))
        assert marks[0] == 0  # targets begin with S_0
        for k, at in enumerate(marks):
            assert targets[at] == sentinels[k]  # sentinel-delimited, in order
            pieces[int(targets[at])] = targets[at + 1 : marks[k + 1] if k + 1 < len(marks) else len(targets)].tolist()
        rebuilt = [t for token in inputs.tolist() for t in (pieces[token] if token in pieces else [token])]
        assert rebuilt == document.tolist()
    assert noising.t5_span_corruption([5, 6, 7, 8, 9, 10, 11, 12, 13, 14], np.random.default_rng(0), [99])[0].tolist().count(99) == 1
    with pytest.raises(ValueError, match="sentinel"):
        noising.t5_span_corruption(_document(100), rng, [900])


def test_mass_masks_half_the_sentence_from_a_uniform_start() -> None:
    rng = np.random.default_rng(12)
    length = 100
    k = 50  # MASS: k = 50% of the sentence
    starts, shares = [], []
    for _ in range(DRAWS):
        encoder, decoder_input, target = noising.mass_fragment(_document(length), rng, MASK, ratio=0.5)
        masked = np.flatnonzero(encoder == MASK)
        assert len(masked) == k and np.all(np.diff(masked) == 1)  # one contiguous fragment
        assert target.tolist() == _document(length)[masked].tolist()
        assert decoder_input.tolist() == [MASK, *target[:-1].tolist()]  # shifted right
        starts.append(int(masked[0]))
        shares.append(len(masked) / length)
    positions = length - k + 1
    mean, allowed = _within(np.asarray(starts), (positions - 1) / 2, (positions**2 - 1) / 12)
    assert abs(mean - (positions - 1) / 2) < allowed
    assert np.mean(shares) == 0.5
    encoder, decoder_input, target = noising.mass_fragment(np.array([7, 8, 9]), np.random.default_rng(0), MASK)
    assert len(target) == 2 and (encoder == MASK).sum() == 2  # round(1.5) = 2
