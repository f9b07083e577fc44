"""The word-prediction SGD step (word2vec, fastText) against a NumPy transcription of the
per-pair update: pair batches, window batches (a center's context words sharing its output rows)
and the hot-row scaling; and window batching learning planted co-occurrences."""

from __future__ import annotations

import numpy as np
import pytest

from ptmkit.wordvectors.vocabulary import huffman_codes, noise_table
from ptmkit.wordvectors.word_prediction import (
    MAX_EXP,
    Examples,
    OutputLayer,
    WordPredictionStep,
    _hot_scale,
    make_batch,
    make_window_batch,
    slot_groups,
)

V, DIM, LR = 12, 6, 0.4
COUNTS = np.array([40, 30, 22, 18, 15, 12, 9, 7, 5, 4, 3, 2])


def _per_pair_reference(w_in: np.ndarray, w_out: np.ndarray, pairs: list[tuple[int, list[tuple[int, float, bool]]]], lr: float) -> tuple[np.ndarray, np.ndarray]:
    """One mini-batch step, pair by pair from the same parameters (word2vec.c's update of each
    pair, summed): ``pairs`` = ``[(input row, [(output row, label, is_hs), ...]), ...]``."""
    d_in, d_out = np.zeros_like(w_in, np.float64), np.zeros_like(w_out, np.float64)
    for row, items in pairs:
        x = w_in[row].astype(np.float64)
        for out, label, hs in items:
            u = w_out[out].astype(np.float64)
            f = x @ u
            if hs and abs(f) >= MAX_EXP:
                continue
            g = (label - 1.0 / (1.0 + np.exp(-f))) * lr
            d_in[row] += g * u
            d_out[out] += g * x
    return w_in + d_in, w_out + d_out


def _params(seed: int, out_rows: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.normal(0, 0.5, (V, DIM)).astype(np.float32), rng.normal(0, 0.5, (out_rows, DIM)).astype(np.float32))


def _windows() -> Examples:
    """Three windows: center 0 with contexts 3, 4, 3 (a repeated context); center 5 with 1;
    center 2 with 7, 8, 9, 10."""
    owner = np.array([0, 0, 0, 1, 2, 2, 2, 2])
    return Examples(owner, np.array([3, 4, 3, 1, 7, 8, 9, 10], np.int32), np.array([0, 5, 2], np.int32))


def _step(w_in: np.ndarray, w_out: np.ndarray, batch: dict[str, np.ndarray], grouped: bool) -> tuple[np.ndarray, np.ndarray]:
    step = WordPredictionStep(w_in, len(w_out), grouped=grouped)
    step.output.assign(w_out)
    step(batch, LR)
    return step.input_vectors(), step.output_vectors()


def _placed_windows(arrays: dict[str, np.ndarray]) -> list[tuple[int, int, int, list[int], np.ndarray]]:
    """Each real window of a window batch's step (arrays ``(W_g, ...)``): ``(group, slot width,
    dense row, its context rows, its item arrays' row index)``, group by group."""
    found = []
    group = 0
    while f"slot_row_{group}" in arrays:
        slot_row, slot_weight = arrays[f"slot_row_{group}"], arrays[f"slot_weight_{group}"]
        for r in range(len(slot_row)):
            if slot_weight[r].any():
                found.append((group, slot_row.shape[1], r, [int(x) for x in slot_row[r][slot_weight[r] > 0]], r))
        group += 1
    return found


def test_window_step_with_shared_negatives_equals_the_per_pair_update() -> None:
    examples = _windows()
    output = OutputLayer(V, 3, noise_table(COUNTS))
    made = make_window_batch(examples, output, np.random.default_rng(3), 4, hot_limit=0.0, window=2)
    batch = made.arrays
    # Slot groups of a 2-word window: 2 and 4 slots, two windows a step each; the 1-word window
    # takes the narrow group, the 3- and 4-word windows the wide one.
    assert made.windows == 3 and made.steps == 1
    assert batch["slot_row_0"].shape == (2, 2) and batch["slot_row_1"].shape == (2, 4) and batch["item_row_1"].shape == (2, 4)
    placed = _placed_windows(batch)
    assert sorted((g, sorted(rows)) for g, _, _, rows, _ in placed) == [(0, [1]), (1, [3, 3, 4]), (1, [7, 8, 9, 10])]
    w_in, w_out = _params(0, V)
    pairs = []
    for g, _, r, rows, _ in placed:
        item_row = batch[f"item_row_{g}"][r]
        center, negatives = int(item_row[0]), item_row[1:]
        window = [w for w in range(3) if sorted(examples.bag_row[examples.bag_example == w]) == sorted(rows)][0]
        assert center == examples.target[window]
        # Every pair of the window sees the center (label 1) and the window's noise words,
        # a noise word equal to the center skipped.
        items = [(center, 1.0, False)] + [(int(n), 0.0, False) for n in negatives if n != center]
        pairs += [(row, items) for row in rows]
    want_in, want_out = _per_pair_reference(w_in, w_out, pairs, LR)
    got_in, got_out = _step(w_in, w_out, batch, grouped=True)
    np.testing.assert_allclose(got_in, want_in, atol=2e-6)
    np.testing.assert_allclose(got_out, want_out, atol=2e-6)
    assert not np.allclose(got_in, w_in) and not np.allclose(got_out, w_out)


@pytest.mark.parametrize("window", [None, 2])  # one group as wide as the widest window; slot groups
def test_window_step_with_hierarchical_softmax_equals_the_pair_batch(window: int | None) -> None:
    """The center's Huffman path is every pair's: windows give the pair batch's step exactly."""
    huffman = huffman_codes(COUNTS)
    output = OutputLayer(V, 0, None, huffman)
    w_in, w_out = _params(1, V - 1)
    w_out[0] *= 40.0  # the root: |h . u| >= MAX_EXP for some pairs, which are skipped
    examples = _windows()
    pairs = []
    for window_index, center in enumerate(examples.target):
        path = range(huffman.offsets[center], huffman.offsets[center + 1])
        items = [(int(huffman.points[i]), 1.0 - float(huffman.codes[i]), True) for i in path]
        pairs += [(int(row), items) for row in examples.bag_row[examples.bag_example == window_index]]
    assert any(abs(w_in[row] @ w_out[0]) >= MAX_EXP for row, _ in pairs) and any(abs(w_in[row] @ w_out[0]) < MAX_EXP for row, _ in pairs)
    want_in, want_out = _per_pair_reference(w_in, w_out, pairs, LR)
    window_batch = make_window_batch(examples, output, np.random.default_rng(0), 4, hot_limit=0.0, window=window)
    assert window_batch.windows == 3 and len(_placed_windows(window_batch.arrays)) == 3
    got_in, got_out = _step(w_in, w_out, window_batch.arrays, grouped=True)
    np.testing.assert_allclose(got_in, want_in, atol=2e-6)
    np.testing.assert_allclose(got_out, want_out, atol=2e-6)
    # The same pairs through the per-pair batch (skip-gram examples: one per pair).
    pair_examples = Examples(np.arange(8), examples.bag_row, examples.target[examples.bag_example])
    pair_in, pair_out = _step(w_in, w_out, make_batch(pair_examples, output, np.random.default_rng(0), 8, hot_limit=0.0), grouped=False)
    np.testing.assert_allclose(pair_in, got_in, atol=2e-6)
    np.testing.assert_allclose(pair_out, got_out, atol=2e-6)


def test_slot_groups_follow_the_dynamic_window() -> None:
    """Group j holds windows of reach up to ceil(window j / 5): 2 b slots for reach b, a share
    of the step's windows equal to those reaches' share of 1 .. window."""
    assert slot_groups(5, 100) == ((2, 20), (4, 20), (6, 20), (8, 20), (10, 20))
    assert slot_groups(2, 4) == ((2, 2), (4, 2))
    assert slot_groups(10, 100) == ((4, 20), (8, 20), (12, 20), (16, 20), (20, 20))
    assert slot_groups(7, 70) == ((4, 20), (6, 10), (10, 20), (12, 10), (14, 10))
    assert slot_groups(5, 1) == ((10, 1),) and slot_groups(7, 3) == ((6, 1), (10, 1), (14, 1))  # batch_size honoured
    with pytest.raises(ValueError, match="window"):
        slot_groups(0, 10)


def test_window_batch_places_every_window_once_in_the_narrowest_group_with_room() -> None:
    """Windows go to the narrowest slot group they fit, spill to a wider one when it is full,
    keep corpus order within a group over the steps, and a call ends before the first window
    that cannot fit (the rest are the next call's)."""
    rng = np.random.default_rng(2)
    sizes = rng.integers(1, 5, 40)  # 1 to 4 context words: a 2-word window
    sizes[:6] = 4  # wide windows first: group 1 (4 slots, 2 a step, 3 steps: 6) is then full
    owner = np.repeat(np.arange(40), sizes)
    examples = Examples(owner, np.arange(len(owner), dtype=np.int32), (np.arange(40) % V).astype(np.int32))  # row = its position
    output = OutputLayer(V, 0, None, huffman_codes(COUNTS))
    made = make_window_batch(examples, output, np.random.default_rng(0), 4, hot_limit=0.0, updates=3, window=2)
    # Windows 0-5 fill the wide group; window 6 needs 3 or 4 slots: the call ends before it
    # unless it is narrow, and every narrow window after it goes to the narrow group.
    first_wide = 6 + int(np.argmax(sizes[6:] > 2))
    assert made.windows == min(first_wide, 6 + 6)
    assert made.steps == 3
    seen = []
    for k in range(3):
        step = {name: value[k] for name, value in made.arrays.items()}
        for g, width, _, rows, _ in _placed_windows(step):
            window = int(owner[rows[0]])  # bag rows are numbered in corpus order
            assert rows == list(np.flatnonzero(owner == window))
            assert sizes[window] <= width
            seen.append((g, k, window))
    assert sorted(w for _, _, w in seen) == list(range(made.windows))
    assert all(g == 1 for g, _, w in seen if w < 6)
    for g in (0, 1):  # corpus order within a group, over the steps
        order = [w for gg, _, w in sorted(seen, key=lambda x: (x[1], x[0])) if gg == g]
        assert order == sorted(order)


def test_per_pair_step_equals_the_reference_with_unpadded_widths() -> None:
    """Skip-gram pairs have one input row and 1 + k items each: no padding (every gathered row
    costs), and the step is still word2vec.c's update."""
    output = OutputLayer(V, 4, noise_table(COUNTS))
    examples = Examples(np.arange(5), np.array([3, 4, 3, 1, 7], np.int32), np.array([0, 0, 0, 5, 2], np.int32))
    batch = make_batch(examples, output, np.random.default_rng(5), 5, hot_limit=0.0)
    assert batch["bag_row"].shape == (5, 1) and batch["item_row"].shape == (5, 5)
    w_in, w_out = _params(2, V)
    pairs = []
    for p in range(5):
        items = [(int(r), float(lab), False) for r, lab, w in zip(batch["item_row"][p], batch["item_label"][p], batch["item_weight"][p], strict=True) if w > 0]
        pairs.append((int(examples.bag_row[p]), items))
    want_in, want_out = _per_pair_reference(w_in, w_out, pairs, LR)
    got_in, got_out = _step(w_in, w_out, batch, grouped=False)
    np.testing.assert_allclose(got_in, want_in, atol=2e-6)
    np.testing.assert_allclose(got_out, want_out, atol=2e-6)


def test_shared_negatives_of_a_window_equal_the_per_pair_update() -> None:
    """fastText's skip-gram example: a center's bag of rows (its mean is the input) and the words
    of its window as targets; the noise words drawn once per window are the per-pair update with
    every pair drawing the window's noise words (one of which equals a target: skipped for that
    pair only)."""
    output = OutputLayer(V, 3, np.array([2, 2, 2, 5, 6, 7, 8], np.int32))
    # Window 0: bag rows 0, 1, 2 (mean), targets 2, 3, 4; window 1: bag row 5, targets 6, 6.
    examples = Examples(np.array([0, 0, 0, 1]), np.array([0, 1, 2, 5], np.int32), np.array([2, 3, 4, 6, 6], np.int32), np.array([0, 0, 0, 1, 1]), 2)
    batch = make_batch(examples, output, np.random.default_rng(11), 3, hot_limit=0.0, shared_negatives=True)
    w_in, w_out = _params(4, V)
    d_in, d_out = np.zeros((V, DIM)), np.zeros((V, DIM))
    for window in range(2):
        bag = examples.bag_row[examples.bag_example == window]
        h = w_in[bag].astype(np.float64).mean(axis=0)
        items = batch["item_row"][window][batch["item_label"][window] == 0][: output.negative]
        assert len(items) == output.negative
        for target in examples.target[examples.target_example == window]:
            pair = [(int(target), 1.0)] + [(int(n), 0.0) for n in items if n != target]
            for row, label in pair:
                u = w_out[row].astype(np.float64)
                g = (label - 1.0 / (1.0 + np.exp(-(h @ u)))) * LR
                d_in[bag] += g * u  # each bag row gets the mean's full gradient (word2vec.c, fastText)
                d_out[row] += g * h
    assert (batch["item_row"][0] == 2).sum() >= 2  # a noise word equal to a target occurs
    got_in, got_out = _step(w_in, w_out, batch, grouped=False)
    np.testing.assert_allclose(got_in, w_in + d_in, atol=2e-6)
    np.testing.assert_allclose(got_out, w_out + d_out, atol=2e-6)
    # T + k items a window instead of T (1 + k).
    assert batch["item_row"].shape[1] < make_batch(examples, output, np.random.default_rng(11), 3)["item_row"].shape[1]


def _hot_scale_by_sorting(rows: np.ndarray, weight: np.ndarray, limit: float, updates: np.ndarray | None = None) -> np.ndarray:
    count = np.ones(rows.shape) if updates is None else np.broadcast_to(updates, rows.shape)
    real = weight > 0
    scale = np.ones(rows.shape, np.float32)
    for row in np.unique(rows[real]):
        where = real & (rows == row)
        n = count[where].sum()
        if n > limit:
            scale[where] = limit / n
    return scale


@pytest.mark.parametrize("top", [50, 3_000_000])  # a vocabulary; fastText's bucket rows
def test_hot_scale_gives_each_hot_row_limit_over_its_updates(top: int) -> None:
    rng = np.random.default_rng(7)
    rows = np.where(rng.random((300, 6)) < 0.5, rng.integers(0, 4, (300, 6)), rng.integers(0, top, (300, 6)))
    weight = (rng.random((300, 6)) < 0.9).astype(np.float32)
    updates = rng.integers(1, 9, (300, 1)).astype(np.float32)
    for limit in (4.0, 64.0):
        np.testing.assert_allclose(_hot_scale(rows, weight, limit), _hot_scale_by_sorting(rows, weight, limit), rtol=1e-6)
        np.testing.assert_allclose(_hot_scale(rows, weight, limit, updates), _hot_scale_by_sorting(rows, weight, limit, updates), rtol=1e-6)
    assert (_hot_scale(rows, weight, 0.0) == 1.0).all()


def test_hot_scale_counts_each_stacked_batch_apart() -> None:
    """``groups = K``: the K batches of a call are counted one by one (a row hot in one batch
    is scaled there only)."""
    rng = np.random.default_rng(8)
    rows = np.where(rng.random((60, 5)) < 0.4, rng.integers(0, 3, (60, 5)), rng.integers(0, 40, (60, 5)))
    rows[:20, 0] = 7  # hot in the first batch only
    weight = (rng.random((60, 5)) < 0.9).astype(np.float32)
    updates = rng.integers(1, 4, (60, 1)).astype(np.float32)
    for counted in (None, updates):
        got = _hot_scale(rows, weight, 6.0, counted, groups=3)
        want = np.concatenate([_hot_scale_by_sorting(rows[k * 20 : (k + 1) * 20], weight[k * 20 : (k + 1) * 20], 6.0, None if counted is None else counted[k * 20 : (k + 1) * 20]) for k in range(3)])
        np.testing.assert_allclose(got, want, rtol=1e-6)
        hot = (rows[:20] == 7) & (weight[:20] > 0)
        assert (got[:20][hot] < 1).all() and (got[20:][rows[20:] == 7] > got[:20][hot].max()).all()


@pytest.mark.parametrize("windows", [True, False])
def test_skipgram_learns_planted_cooccurrences(tmp_path, windows: bool) -> None:  # type: ignore[no-untyped-def]
    """Twenty word pairs (x_i, y_i), each only ever between the same two words (c_i _ d_i), among
    filler words: trained with window batches (shared noise words) or pair batches, each x_i's
    nearest word (cosine of the input vectors) is y_i."""
    from ptmkit.data.readers import read_corpus
    from ptmkit.wordvectors.training import SGDSchedule, train_word_prediction
    from ptmkit.wordvectors.vocabulary import build_vocabulary, encode_corpus
    from ptmkit.wordvectors.word_prediction import cbow_examples, skipgram_examples

    rng = np.random.default_rng(0)
    lines = []
    for _ in range(4000):
        words = [f"f{j}" for j in rng.integers(0, 200, 12)]
        i, at = int(rng.integers(0, 20)), int(rng.integers(0, 10))
        words[at : at + 3] = [f"c{i}", f"{'xy'[int(rng.integers(0, 2))]}{i}", f"d{i}"]
        lines.append(" ".join(words))
    corpus = tmp_path / "planted.txt"
    corpus.write_text("\n".join(lines) + "\n")
    vocabulary = build_vocabulary(corpus, read_corpus(corpus), 1, 0, False)
    tokens = encode_corpus(read_corpus(corpus), vocabulary, tmp_path / "tokens", False)
    output = OutputLayer(len(vocabulary), 5, noise_table(vocabulary.counts))
    initial = ((rng.random((len(vocabulary), 32), dtype=np.float32) - 0.5) / 32).astype(np.float32)
    schedule = SGDSchedule(epochs=5, sample=0.0, batch_examples=256 if windows else 1024, windows=windows, window=2 if windows else 0, seed=3)
    examples = cbow_examples if windows else skipgram_examples
    step, stats = train_word_prediction(tokens, vocabulary.counts, lambda i, s, g: examples(i, s, 2, g), output, initial, schedule)
    assert stats["final_loss"] < 0.8 * np.log(2)
    vectors = step.input_vectors()
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    index = {w: k for k, w in enumerate(vocabulary.words)}
    hits = 0
    for i in range(20):
        x = index[f"x{i}"]
        similarity = unit @ unit[x]
        similarity[x] = -2.0
        hits += vocabulary.words[int(np.argmax(similarity))] == f"y{i}"
    assert hits >= 18, hits


@pytest.mark.parametrize("grouped", [False, True])
def test_updates_stacked_in_one_call_equal_one_call_each(grouped: bool) -> None:
    """``K`` batches in one call (an XLA loop) are ``K`` updates in sequence, each reading the
    parameters the previous one wrote: the same as ``K`` calls, to float32 rounding; the batches
    made in one pass (``updates=K``) are the ``K`` batches made one by one."""
    rng = np.random.default_rng(4)
    huffman = huffman_codes(COUNTS)
    output = OutputLayer(V, 3, noise_table(COUNTS), huffman if grouped else None)
    count = 24  # three batches of 8 examples
    if grouped:  # windows of 1 to 4 context words in slot groups of 2 and 4, 4 windows each a step
        owner = np.repeat(np.arange(count), np.tile([1, 4, 2, 3], count // 4))
        examples = Examples(owner, rng.integers(0, V, len(owner)).astype(np.int32), rng.integers(0, V, count).astype(np.int32))
        made = make_window_batch(examples, output, np.random.default_rng(9), 8, hot_limit=0.0, updates=3, window=2)
        assert made.windows == count and made.steps == 3
        stacked = made.arrays
        assert all(value.shape[:2] == (3, 4) for value in stacked.values())
    else:
        examples = Examples(np.arange(count), rng.integers(0, V, count).astype(np.int32), rng.integers(0, V, count).astype(np.int32))
        stacked = make_batch(examples, output, np.random.default_rng(9), 8, hot_limit=0.0, updates=3)
        assert all(value.shape[:2] == (3, 8) for value in stacked.values())
    w_in, w_out = _params(5, output.rows)
    one_call = WordPredictionStep(w_in, output.rows, grouped=grouped)
    one_call.output.assign(w_out)
    loss = one_call(stacked, np.array([LR, LR / 2, LR / 4], np.float32))
    separate = WordPredictionStep(w_in, output.rows, grouped=grouped)
    separate.output.assign(w_out)
    losses = [separate({name: value[k] for name, value in stacked.items()}, LR / 2**k) for k in range(3)]
    np.testing.assert_allclose(one_call.input_vectors(), separate.input_vectors(), atol=1e-6)
    np.testing.assert_allclose(one_call.output_vectors(), separate.output_vectors(), atol=1e-6)
    assert not np.allclose(separate.input_vectors(), w_in)
    # The call's loss is the mean over all its items: the batches' losses weighted by their items.
    if not grouped:
        items = stacked["item_weight"].sum(axis=(1, 2))
        assert loss == pytest.approx(float(np.dot(losses, items) / items.sum()), rel=1e-5)
    # The second batch differs from a first batch of the same examples: sequence matters.
    first_only = WordPredictionStep(w_in, output.rows, grouped=grouped)
    first_only.output.assign(w_out)
    first_only({name: value[1] for name, value in stacked.items()}, LR / 2)
    assert not np.allclose(first_only.input_vectors(), separate.input_vectors(), atol=1e-6)
