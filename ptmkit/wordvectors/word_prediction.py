"""Word prediction with negative sampling and hierarchical softmax: the objective of word2vec's
CBOW and skip-gram and of fastText's unsupervised models, as one sparse SGD step.

An *example* is a bag of input rows (one context word for skip-gram, the window's words for
CBOW, a word and its character n-grams for fastText) whose mean ``h`` predicts a target word.
The objective turns each example's target into *items*, ``(example, output row, label)``:

* negative sampling (Mikolov et al. 2013): the target with label 1 and ``k`` words drawn from the
  unigram^0.75 noise table with label 0 (a noise word equal to the target is skipped, as in
  word2vec.c);
* hierarchical softmax (Morin & Bengio 2005; word2vec.c): one item per inner node on the target's
  Huffman path, label ``1 - code``; items with ``|h . u| >= 6`` are skipped, as in word2vec.c.

Both give the same gradient, ``g = (label - sigmoid(h . u)) * lr``: ``u += g h`` for the item's
output row and ``sum g u`` for every input row of the example (the mean's gradient is not divided
by the bag size, as in word2vec.c and fastText). The step gathers and scatter-adds only the rows a
batch touches (``tf.Variable.scatter_add``), jit-compiled with XLA; all examples of a batch are
updated at once from the same parameters (mini-batch SGD instead of word2vec.c's Hogwild loop).

Batches are dense: ``(examples, bag width)`` input rows and ``(examples, items)`` output rows,
the widths rounded up and the padding weighted 0, so that XLA compiles a handful of programs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ptmkit.wordvectors.vocabulary import HuffmanCodes

MAX_EXP = 6.0  # word2vec.c's sigmoid table range; hierarchical softmax skips nodes beyond it


@dataclasses.dataclass
class Examples:
    """Examples of one corpus chunk, in corpus order.

    Attributes:
        bag_example: ``(M,)`` int64, sorted: the example each bag row belongs to (``0 .. E-1``).
        bag_row: ``(M,)`` int32 input-matrix rows.
        target: ``(T,)`` int32 target word ids.
        target_example: ``(T,)`` int64, sorted: the example each target belongs to; None when
            every example has exactly one target (``target[e]``).
        count: number of examples ``E`` (when ``target_example`` is given).
    """

    bag_example: np.ndarray
    bag_row: np.ndarray
    target: np.ndarray
    target_example: np.ndarray | None = None
    count: int = -1

    def __len__(self) -> int:
        return len(self.target) if self.target_example is None else self.count

    def owners(self) -> np.ndarray:
        """``(T,)`` the example of each target."""
        return np.arange(len(self.target), dtype=np.int64) if self.target_example is None else self.target_example

    def slice(self, start: int, stop: int) -> Examples:
        """Examples ``start .. stop`` renumbered from 0."""
        lo, hi = np.searchsorted(self.bag_example, [start, stop])
        bags = (self.bag_example[lo:hi] - start, self.bag_row[lo:hi])
        if self.target_example is None:
            return Examples(*bags, self.target[start:stop])
        t_lo, t_hi = np.searchsorted(self.target_example, [start, stop])
        return Examples(*bags, self.target[t_lo:t_hi], self.target_example[t_lo:t_hi] - start, stop - start)

    @staticmethod
    def concatenate(parts: list[Examples]) -> Examples:
        shift, bags, owners = 0, [], []
        for part in parts:
            bags.append(part.bag_example + shift)
            owners.append(part.owners() + shift)
            shift += len(part)
        grouped = any(p.target_example is not None for p in parts)
        return Examples(
            np.concatenate(bags),
            np.concatenate([p.bag_row for p in parts]),
            np.concatenate([p.target for p in parts]),
            np.concatenate(owners) if grouped else None,
            shift if grouped else -1,
        )


@dataclasses.dataclass
class OutputLayer:
    """What the objective predicts with.

    Attributes:
        vocabulary_size: V; negative-sampling rows are ``0 .. V-1``.
        negative: ``k`` noise words per example (0: no negative sampling).
        noise: the noise table (:func:`ptmkit.wordvectors.vocabulary.noise_table`) when ``negative > 0``.
        huffman: the Huffman codes when hierarchical softmax is on; its inner-node rows follow
            the negative-sampling rows (``V + point``) in the output matrix.
    """

    vocabulary_size: int
    negative: int = 5
    noise: np.ndarray | None = None
    huffman: HuffmanCodes | None = None

    @property
    def rows(self) -> int:
        """Rows of the output matrix."""
        return (self.vocabulary_size if self.negative else 0) + (self.vocabulary_size - 1 if self.huffman else 0)


def _dense(owner: np.ndarray, values: np.ndarray, count: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Scatter ragged ``values`` (sorted by ``owner``) into ``(count, width)`` and a 0/1 mask."""
    lengths = np.bincount(owner, minlength=count)
    dense = np.zeros((count, width), values.dtype)
    mask = np.zeros((count, width), np.float32)
    examples = int(owner[-1]) + 1 if len(owner) else 0
    length = int(lengths[0]) if examples else 0
    if examples and len(owner) == examples * length and (lengths[:examples] == length).all():
        dense[:examples, :length] = values.reshape(examples, length)  # equal lengths: a reshape
        mask[:examples, :length] = 1.0
        return dense, mask
    within = np.arange(len(owner)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    dense[owner, within] = values
    mask[owner, within] = 1.0
    return dense, mask


def _width(lengths: np.ndarray, multiple: int, steps: int = 4) -> int:
    """Padded width: the common length when every example has the same, without padding (a
    padded row is gathered and scattered like a real one: word2vec's skip-gram pairs, one input
    row and 1 + k items each, padded to 4 and 8 rows took 3x the step time); else a multiple of
    ``multiple`` up to ``steps`` of them, then a multiple of 16 up to 128, then the next power of
    two, so that few distinct shapes reach XLA (each compiles once). The longest example of a
    call sets the width: fastText's bags (a word and its 3-6-gram rows, 24 on average, 50-80 for
    the longest words) went to 128 with powers of two, to 64-80 with multiples of 16."""
    longest = int(lengths.max()) if len(lengths) else 1
    if len(lengths) and int(lengths.min()) == longest:
        return longest
    if longest <= steps * multiple:
        return max(multiple, -(-longest // multiple) * multiple)
    if longest <= 128:
        return -(-longest // 16) * 16
    return 1 << (longest - 1).bit_length()


def make_batch(
    examples: Examples,
    output: OutputLayer,
    rng: np.random.Generator,
    batch_examples: int,
    pad_width: int = 4,
    hot_limit: float = 0.0,
    shared_negatives: bool = False,
    updates: int | None = None,
) -> dict[str, np.ndarray]:
    """The arrays one :class:`WordPredictionStep` call takes, for at most ``batch_examples`` examples
    (or ``updates`` batches of ``batch_examples``, made in one pass).

    Returns:
        ``bag_row`` ``(P, Lb)`` int32 and ``bag_weight`` ``(P, Lb)`` float32 (1 for a real row);
        ``item_row`` ``(P, Li)`` int32, ``item_label``, ``item_weight`` and ``item_hs`` ``(P, Li)``
        float32 (``item_hs`` is 1 for hierarchical-softmax items); ``bag_scale`` and
        ``item_scale``, the share of its update each row gets (below). ``P = batch_examples``;
        the widths ``Lb`` and ``Li`` are rounded up (multiples of ``pad_width``, then powers of
        two) and padding has weight 0, so XLA sees few distinct shapes. With ``updates = K``:
        the same arrays with shape ``(K, P, L)``, examples ``k P .. (k + 1) P - 1`` in batch
        ``k`` (hot rows counted per batch), for one call of ``K`` updates in sequence.

    Shared negatives (``shared_negatives``, for examples with several targets: fastText's
    skip-gram window): the ``k`` noise words are drawn once per example instead of once per
    target, and each is one item weighted by the number of the example's targets it differs
    from. The input (the bag's mean) is the same for every target of the example, so this is
    exactly the per-pair update with the same noise words for every pair of the window (Ji et
    al. 2016), with ``T + k`` items an example instead of ``T (1 + k)``.

    Hot rows: all updates of a batch are computed from the same parameters and summed, so a row
    that occurs ``n`` times in a batch moves ``n`` steps at once; with ``n`` in the hundreds (a
    tiny vocabulary, the most frequent noise words) input and output vectors feed each other's
    growth and training diverges. With ``hot_limit > 0`` a row occurring ``n > hot_limit`` times
    gets ``hot_limit / n`` of each of its updates.
    """
    size = batch_examples * (updates or 1)
    bag_row, bag_weight = _bags(examples, size, pad_width)
    owner, targets = examples.owners(), examples.target.astype(np.int64)
    parts = []
    if output.negative and shared_negatives and examples.target_example is not None:
        parts.append(_shared_negative_items(owner, targets, len(examples), size, output, rng, pad_width))
    elif output.negative:
        pairs = _negative_pairs(targets, output, rng)
        parts.append(_dense_items(np.repeat(owner, output.negative + 1), pairs, len(examples), size, pad_width))
    if output.huffman is not None:
        parts.append(_huffman_items(owner, targets, len(examples), size, output, pad_width))
    items = _Items.concatenate(parts)
    groups = updates or 1
    return _split({
        "bag_row": bag_row,
        "bag_weight": bag_weight,
        "bag_scale": _hot_scale(bag_row, bag_weight, hot_limit, groups=groups),
        **items.arrays(),
        "item_scale": _hot_scale(items.row, items.weight, hot_limit, items.weight if shared_negatives else None, groups=groups),
    }, updates)


@dataclasses.dataclass
class _Items:
    """Output items, ``(examples, items)`` each: ``row`` (output-matrix rows), ``label``,
    ``weight`` (0 for padding and skipped items) and ``hs`` (1 for hierarchical softmax)."""

    row: np.ndarray
    label: np.ndarray
    weight: np.ndarray
    hs: np.ndarray

    @staticmethod
    def concatenate(parts: list[_Items]) -> _Items:
        """The parts side by side (negative sampling's items, then hierarchical softmax's); rows int32."""
        return _Items(
            np.concatenate([p.row for p in parts], axis=1).astype(np.int32),
            np.concatenate([p.label for p in parts], axis=1),
            np.concatenate([p.weight for p in parts], axis=1),
            np.concatenate([p.hs for p in parts], axis=1),
        )

    def arrays(self) -> dict[str, np.ndarray]:
        """The step's ``item_row``, ``item_label``, ``item_weight`` and ``item_hs``."""
        return {"item_row": self.row, "item_label": self.label, "item_weight": self.weight, "item_hs": self.hs}


def _bags(examples: Examples, size: int, pad_width: int) -> tuple[np.ndarray, np.ndarray]:
    """``(bag_row, bag_weight)`` ``(size, Lb)``: each example's input rows, padded."""
    bag_lengths = np.bincount(examples.bag_example, minlength=len(examples))
    # Bags in steps of half the pad width up to 16 rows: a word2vec CBOW window (2 x window
    # context words, 10 by default) is not padded to 12.
    bag_width = _width(bag_lengths, max(1, pad_width // 2), steps=8)
    return _dense(examples.bag_example, examples.bag_row.astype(np.int32), size, bag_width)


def _draw_negatives(output: OutputLayer, rng: np.random.Generator, count: int) -> np.ndarray:
    """``(count, k)`` int64 noise words from the unigram^0.75 table."""
    assert output.noise is not None
    return output.noise[rng.integers(0, len(output.noise), size=(count, output.negative))].astype(np.int64)


def _negative_pairs(targets: np.ndarray, output: OutputLayer, rng: np.random.Generator) -> _Items:
    """Negative sampling's items of each target, ``(T, 1 + k)``: the target (label 1), then ``k``
    noise words (label 0; weight 0 for a noise word equal to the target, as in word2vec.c)."""
    negatives = _draw_negatives(output, rng, len(targets))
    row = np.concatenate([targets[:, None], negatives], axis=1)
    label = np.zeros(row.shape, np.float32)
    label[:, 0] = 1.0
    weight = np.ones(row.shape, np.float32)
    weight[:, 1:] = negatives != targets[:, None]
    return _Items(row, label, weight, np.zeros(row.shape, np.float32))


def _dense_items(item_owner: np.ndarray, items: _Items, count: int, size: int, pad_width: int) -> _Items:
    """Ragged negative-sampling ``items`` (flattened in ``item_owner`` order) as ``(size, Li)``."""
    width = _width(np.bincount(item_owner, minlength=count), pad_width)
    row, mask = _dense(item_owner, items.row.ravel().astype(np.int32), size, width)
    label = _dense(item_owner, items.label.ravel(), size, width)[0]
    weight = _dense(item_owner, items.weight.ravel(), size, width)[0] * mask
    return _Items(row, label, weight, np.zeros((size, width), np.float32))


def _shared_negative_items(
    owner: np.ndarray, targets: np.ndarray, count: int, size: int, output: OutputLayer, rng: np.random.Generator, pad_width: int
) -> _Items:
    """Negative sampling with ``k`` noise words per example (``make_batch``'s shared negatives):
    the example's targets (label 1), then its noise words, each weighted by the number of the
    example's targets it differs from."""
    k = output.negative
    negatives = _draw_negatives(output, rng, count)
    same = np.zeros((count, k), np.float64)
    np.add.at(same, owner, (negatives[owner] == targets[:, None]).astype(np.float64))
    per_example = np.bincount(owner, minlength=count).astype(np.float64)[:, None]
    item_owner = np.concatenate([owner, np.repeat(np.arange(count, dtype=np.int64), k)])
    order = np.argsort(item_owner, kind="stable")
    row = np.concatenate([targets, negatives.ravel()])[order]
    label = np.concatenate([np.ones(len(targets), np.float32), np.zeros(count * k, np.float32)])[order]
    weight = np.concatenate([np.ones(len(targets), np.float32), (per_example - same).ravel().astype(np.float32)])[order]
    return _dense_items(item_owner[order], _Items(row, label, weight, np.zeros_like(label)), count, size, pad_width)


def _huffman_items(owner: np.ndarray, targets: np.ndarray, count: int, size: int, output: OutputLayer, pad_width: int) -> _Items:
    """Hierarchical softmax's items ``(size, Li)``: the inner nodes on each target's Huffman path
    (output rows ``V + point`` after negative sampling's), label ``1 - code``; ``owner`` is each
    target's example."""
    huffman = output.huffman
    assert huffman is not None
    starts = huffman.offsets[targets]
    lengths = huffman.offsets[targets + 1] - starts
    target_index = np.repeat(np.arange(len(targets), dtype=np.int64), lengths)
    position = starts[target_index] + (np.arange(len(target_index)) - np.repeat(np.cumsum(lengths) - lengths, lengths))
    item_owner = owner[target_index]
    shift = output.vocabulary_size if output.negative else 0
    width = _width(np.bincount(item_owner, minlength=count), pad_width, steps=8)
    point, mask = _dense(item_owner, huffman.points[position] + np.int32(shift), size, width)
    code, _ = _dense(item_owner, huffman.codes[position].astype(np.float32), size, width)
    return _Items(point, (1.0 - code) * mask, mask, np.ones((size, width), np.float32))


def _split(batch: dict[str, np.ndarray], updates: int | None) -> dict[str, np.ndarray]:
    """``(K P, L)`` arrays as ``(K, P, L)`` when ``updates = K`` (a reshape, no copy)."""
    if updates is None:
        return batch
    return {name: value.reshape(updates, -1, value.shape[1]) for name, value in batch.items()}


def slot_groups(window: int, windows_per_step: int, most: int = 5) -> tuple[tuple[int, int], ...]:
    """The slot groups of a window step for a context ``window``: ``(slot width, windows per
    step)`` each, at most ``most`` groups.

    A dynamic window's reach ``b`` is uniform in ``1 .. window`` (:func:`window_pairs`), so a
    window holds up to ``2 b`` context words: group ``j`` takes the windows of reach
    ``r_(j-1) < b <= r_j`` (``r_j = ceil(window j / most)``), ``2 r_j`` slots wide, and a share
    of the step's windows equal to those reaches' share. For ``window = 5``: widths 2, 4, 6, 8,
    10, a fifth of the windows each. Fewer than ``most`` windows a step: one group per window.
    """
    if window < 1 or windows_per_step < 1:
        raise ValueError(f"window ({window}) and windows_per_step ({windows_per_step}) must be >= 1")
    most = min(most, windows_per_step)  # a group holds at least one window: no more groups than windows
    reaches = sorted({-(-window * j // most) for j in range(1, most + 1)})
    groups, previous = [], 0
    for reach in reaches:
        groups.append((2 * reach, max(1, round(windows_per_step * (reach - previous) / window))))
        previous = reach
    return tuple(groups)


@dataclasses.dataclass
class WindowBatch:
    """One call's window steps (:func:`make_window_batch`).

    Attributes:
        arrays: what :class:`WordPredictionStep` (``grouped=True``) takes: per slot group ``g``,
            ``slot_row_g`` ``(K, W_g, S_g)`` int32, ``slot_weight_g`` and ``slot_scale_g``
            ``(K, W_g, S_g)`` float32, ``item_row_g`` ``(K, W_g, I)`` int32 and
            ``item_label_g``, ``item_weight_g``, ``item_hs_g``, ``item_scale_g`` ``(K, W_g, I)``
            float32 (without ``updates``: no leading ``K``). Padding windows and slots have
            weight 0.
        windows: the windows taken, the first ``windows`` of the examples given.
        steps: steps holding windows (the first ``steps`` of the ``K``; the rest are empty).
    """

    arrays: dict[str, np.ndarray]
    windows: int
    steps: int


def make_window_batch(
    examples: Examples,
    output: OutputLayer,
    rng: np.random.Generator,
    batch_examples: int,
    pad_width: int = 4,
    hot_limit: float = 0.0,
    updates: int | None = None,
    window: int | None = None,
) -> WindowBatch:
    """The arrays of ``updates`` (default 1) window steps (:class:`WordPredictionStep` with
    ``grouped=True``) of about ``batch_examples`` windows each, taken from the start of
    ``examples``.

    Each example is a window: its bag rows are separate inputs (*slots*, the context words of
    word2vec's skip-gram, each predicting the center on its own), its target the center word. The
    slots of a window share its output items, so one window is a small dense product
    ``(slots, d) x (d, items)`` and each output row is gathered and updated once per window
    instead of once per pair (Ji et al. 2016, "Parallelizing Word2Vec in Shared and Distributed
    Memory"):

    * hierarchical softmax: the items are the center's Huffman path, which every pair of the
      window has anyway, so the gradient equals the per-pair batch's exactly;
    * negative sampling: the center (label 1) and ``k`` noise words drawn once per window and
      shared by its pairs (a noise word equal to the center is skipped). Each pair still sees
      ``k`` noise words and each noise row is updated by as many pairs on average as per-pair
      drawing gives; the pairs of one window see the same ones (an approximation, reported on
      par in quality by Ji et al.).

    Slot groups: a padded slot is gathered, multiplied and scattered like a real one, and a
    dynamic window holds 2 to ``2 x window`` context words (5.7 of 10 on average on the
    Wikipedia corpus), so with ``window`` given the step's windows are split into
    :func:`slot_groups` of widths 2, 4, .. ``2 x window``: a window goes to the narrowest group
    it fits, or a wider one when that is full (the widest windows are placed first). Within a
    group windows keep corpus order, spread evenly over the steps. Windows are taken from the
    start of ``examples`` as long as they fit (:attr:`WindowBatch.windows`), all of them when
    every group has room. Without ``window``: one group of ``batch_examples`` windows as wide as
    the widest (rounded up to even).

    Items: ``I = 1 + k`` plus the longest Huffman path (rounded up to ``pad_width``), the same
    for every group. Hot rows (``hot_limit``) are counted per step over all groups and count
    pair updates: a shared output row of a window counts once per slot.

    Raises:
        ValueError: one target per example is needed; a window wider than ``2 x window``.
    """
    if examples.target_example is not None:
        raise ValueError("window batches need one target per example")
    steps_per_call = updates or 1
    lengths = np.bincount(examples.bag_example, minlength=len(examples))
    groups = _window_groups(lengths, batch_examples, window)
    placement = _place_windows(lengths, groups, steps_per_call)
    # Items of the taken windows, (count, I), in corpus order.
    targets = examples.target[: placement.count].astype(np.int64)
    parts = [_negative_pairs(targets, output, rng)] if output.negative else []
    if output.huffman is not None:
        parts.append(_huffman_items(np.arange(len(targets), dtype=np.int64), targets, len(targets), len(targets), output, pad_width))
    arrays = _window_arrays(examples, lengths, groups, placement, _Items.concatenate(parts), steps_per_call)
    _window_hot_scales(arrays, len(groups), steps_per_call, hot_limit)
    return WindowBatch(_split(arrays, updates), placement.count, placement.steps)


def _window_groups(lengths: np.ndarray, batch_examples: int, window: int | None) -> tuple[tuple[int, int], ...]:
    """``(slot width, windows per step)`` of each slot group: :func:`slot_groups` of ``window``;
    without it, one group of ``batch_examples`` windows as wide as the widest (rounded up to even)."""
    if window is not None:
        return slot_groups(window, batch_examples)
    widest = max(2, -(-int(lengths.max() if len(lengths) else 1) // 2) * 2)
    return ((widest, batch_examples),)


@dataclasses.dataclass
class _Placement:
    """Where :func:`_place_windows` puts the first ``count`` windows.

    Attributes:
        count: windows taken.
        group: ``(count,)`` int64 slot group of each window.
        members: per group, its windows in corpus order.
        dense_row: ``(count,)`` int64 each window's row in its group's ``(K W_g, ...)`` arrays.
        steps: steps holding windows.
    """

    count: int
    group: np.ndarray
    members: list[np.ndarray]
    dense_row: np.ndarray
    steps: int


def _place_windows(lengths: np.ndarray, groups: tuple[tuple[int, int], ...], steps_per_call: int) -> _Placement:
    """Put the longest prefix of windows (``lengths`` context words each) that fits into the slot
    ``groups`` of ``steps_per_call`` steps: the widest windows first, each into the narrowest
    group with room.

    Raises:
        ValueError: a window wider than the widest group.
    """
    widths = np.array([width for width, _ in groups])
    capacity = np.array([per_step for _, per_step in groups]) * steps_per_call
    group_of = np.searchsorted(widths, lengths)  # the narrowest group a window fits
    if len(lengths) and group_of.max() >= len(widths):
        raise ValueError(f"a window of {int(lengths.max())} context words is wider than the widest slot group ({int(widths[-1])})")
    count = _windows_that_fit(group_of, capacity)
    order = np.argsort(-group_of[:count], kind="stable")  # widest first
    placed = np.empty(count, np.int64)
    placed[order] = len(widths) - 1 - np.searchsorted(np.cumsum(capacity[::-1]), np.arange(count), side="right")
    members = [np.flatnonzero(placed == g) for g in range(len(widths))]  # corpus order
    steps, dense_row = _spread_over_steps(members, capacity // steps_per_call, count)
    return _Placement(count, placed, members, dense_row, steps)


def _windows_that_fit(group_of: np.ndarray, capacity: np.ndarray) -> int:
    """The longest prefix of windows that fits: for every g, the windows needing group g or
    wider fit in those groups (filling the widest first then places every window)."""
    count = min(len(group_of), int(capacity.sum()))
    for g in range(len(capacity)):
        wide = np.flatnonzero(group_of[:count] >= g)
        room = int(capacity[g:].sum())
        if len(wide) > room:
            count = int(wide[room])
    return count


def _spread_over_steps(members: list[np.ndarray], per_step: np.ndarray, count: int) -> tuple[int, np.ndarray]:
    """``(steps, dense_row)``: the steps used, every group's windows spread evenly over them, each
    step within its room (``per_step`` windows of each group); and each of the ``count`` windows'
    row in its group's ``(K W_g, ...)`` arrays."""
    steps = max(-(-len(m) // int(c)) for m, c in zip(members, per_step, strict=True))
    dense_row = np.zeros(count, np.int64)
    for m, c in zip(members, per_step, strict=True):
        t = np.arange(len(m))
        step_of = t * steps // max(len(m), 1)
        dense_row[m] = step_of * c + t - (step_of * len(m) + steps - 1) // steps
    return steps, dense_row


def _window_arrays(
    examples: Examples, lengths: np.ndarray, groups: tuple[tuple[int, int], ...], placement: _Placement, items: _Items, steps_per_call: int
) -> dict[str, np.ndarray]:
    """Each group's ``slot_row_g``, ``slot_weight_g`` (the taken windows' context rows) and
    ``item_*_g`` (their ``items``, ``(count, I)`` in corpus order), ``(K W_g, ...)``."""
    count, placed, dense_row = placement.count, placement.group, placement.dense_row
    lo = int(np.searchsorted(examples.bag_example, count))
    owner = examples.bag_example[:lo]
    within = np.arange(lo) - (np.cumsum(lengths[:count]) - lengths[:count])[owner]
    arrays: dict[str, np.ndarray] = {}
    for g, ((width, c), m) in enumerate(zip(groups, placement.members, strict=True)):
        size = steps_per_call * c
        slot_row = np.zeros((size, width), np.int32)
        slot_weight = np.zeros((size, width), np.float32)
        mine = placed[owner] == g
        slot_row[dense_row[owner[mine]], within[mine]] = examples.bag_row[:lo][mine]
        slot_weight[dense_row[owner[mine]], within[mine]] = 1.0
        arrays[f"slot_row_{g}"], arrays[f"slot_weight_{g}"] = slot_row, slot_weight
        for name, value in items.arrays().items():
            grouped = np.zeros((size, value.shape[1]), value.dtype)
            grouped[dense_row[m]] = value[m]
            arrays[f"{name}_{g}"] = grouped
    return arrays


def _window_hot_scales(arrays: dict[str, np.ndarray], groups: int, steps: int, hot_limit: float) -> None:
    """Add ``slot_scale_g`` and ``item_scale_g``: :func:`_hot_scale` counted per step over all
    groups (slots: one update per slot; items: one per pair, the window's slots)."""

    def per_step(parts: list[np.ndarray]) -> np.ndarray:  # (K, everything of that step)
        return np.concatenate([part.reshape(steps, -1) for part in parts], axis=1)

    def named(name: str) -> list[np.ndarray]:
        return [arrays[f"{name}_{g}"] for g in range(groups)]

    def split(scale: np.ndarray, name: str) -> None:
        at = 0
        for g in range(groups):
            shape = arrays[f"{name}_row_{g}"].shape
            part = scale[:, at : at + shape[0] // steps * shape[1]]
            arrays[f"{name}_scale_{g}"] = part.reshape(shape)
            at += part.shape[1]

    split(_hot_scale(per_step(named("slot_row")), per_step(named("slot_weight")), hot_limit, groups=steps), "slot")
    # An output row of a window counts once per pair: the window's slots.
    pairs = per_step([np.broadcast_to(w.sum(axis=1, keepdims=True), r.shape) for w, r in zip(named("slot_weight"), named("item_row"), strict=True)])
    split(_hot_scale(per_step(named("item_row")), per_step(named("item_weight")) * (pairs > 0), hot_limit, pairs, groups=steps), "item")


def _hot_scale(rows: np.ndarray, weight: np.ndarray, hot_limit: float, updates: np.ndarray | None = None, groups: int = 1) -> np.ndarray:
    """``hot_limit / n`` for rows updated ``n > hot_limit`` times in the batch, else 1.

    ``n`` counts real occurrences (``weight > 0``), each counting ``updates`` (default 1: one
    pair update per occurrence; a shared output row of a window counts one per pair). With
    ``groups = K``, ``rows`` ``(K P, L)`` holds ``K`` batches of ``P`` examples, counted apart.
    Only rows updated more than ``hot_limit`` times in all ``K`` batches together are counted
    per batch (a few hundred: the most frequent words, the Huffman tree's top nodes), so the
    cost is in the occurrences, not in ``K`` times the rows.
    """
    scale = np.ones(rows.shape, np.float32)
    if not hot_limit:
        return scale
    real = np.flatnonzero(weight.ravel() > 0)
    if not len(real):
        return scale
    flat = rows.ravel()[real].astype(np.int64)
    counted = None if updates is None else np.broadcast_to(updates, rows.shape).ravel()[real].astype(np.float64)
    if int(flat.max()) < max(1 << 20, 8 * len(flat)):  # a small row range: one bincount, no sort
        row_of = flat
    else:  # fastText's millions of bucket rows: number only the rows this batch touches
        row_of = np.unique(flat, return_inverse=True)[1]
    candidate = np.bincount(row_of, weights=counted) > hot_limit
    if not candidate.any():
        return scale
    pick = np.flatnonzero(candidate[row_of])  # occurrences of the candidate rows
    number = np.cumsum(candidate) - 1  # each candidate's number
    key = real[pick] // (rows.size // groups) * int(candidate.sum()) + number[row_of[pick]]
    n = np.bincount(key, weights=None if counted is None else counted[pick])
    values = np.ones(len(real), np.float32)
    values[pick] = np.minimum(1.0, hot_limit / n[key])
    scale.ravel()[real] = values
    return scale


class WordPredictionStep:
    """The sparse SGD step on an input matrix ``(input_rows, dim)`` and an output matrix
    ``(output_rows, dim)`` (Keras variables).

    Args:
        input_matrix: float32 initial input vectors (word2vec's ``syn0``, fastText's word and
            n-gram rows).
        output_rows: rows of the output matrix (zero-initialised, as word2vec.c's ``syn1neg`` and
            ``syn1``).
        jit_compile: compile with XLA (much faster on CPU than TensorFlow's scatter kernels).
        grouped: take window batches (:attr:`WindowBatch.arrays` of :func:`make_window_batch`:
            each window's input slots share its output items) instead of :func:`make_batch`'s
            examples.
        output_matrix: initial output vectors ``(output_rows, dim)`` float32 (a resumed run's);
            default zeros.

    Calling it with a batch from :func:`make_batch` (or :attr:`WindowBatch.arrays`) and a
    learning rate updates both matrices and returns the batch's mean log loss over items (a
    float). Calling it with ``K`` batches (arrays ``(K, P, L)``: :func:`make_batch` with
    ``updates=K``; window batches with ``updates=K``) and ``K`` learning rates makes ``K``
    updates one after the other in one XLA call (a loop in the compiled program): the same as
    ``K`` calls (test), without the ~0.5 ms each call costs in dispatch, and with a batch small
    enough that its gathered rows stay in the core's cache (1,024 skip-gram pairs: 2.4 MB of
    output rows; 4,096 pairs in one update were 0.9 us a pair, 8 x 1,024 in one call 0.5 us).
    :meth:`feeds` and :meth:`run` split a call in two: making its tensors and running it.
    """

    def __init__(
        self, input_matrix: np.ndarray, output_rows: int, jit_compile: bool = True, grouped: bool = False, output_matrix: np.ndarray | None = None
    ) -> None:
        import keras
        import tensorflow as tf

        dim = input_matrix.shape[1]
        if output_matrix is None:
            output_matrix = np.zeros((output_rows, dim), np.float32)
        elif output_matrix.shape != (output_rows, dim):
            raise ValueError(f"output_matrix has shape {output_matrix.shape}, expected {(output_rows, dim)}")
        self.input = keras.Variable(input_matrix.astype(np.float32), name="input_vectors")
        self.output = keras.Variable(output_matrix.astype(np.float32), name="output_vectors")
        w_in, w_out = self.input.value, self.output.value

        def step(batch: dict[str, Any], lr: Any) -> tuple[Any, Any]:
            bag_row, bag_weight = batch["bag_row"], batch["bag_weight"]
            x = tf.gather(w_in, bag_row)  # (P, Lb, d)
            size = tf.reduce_sum(bag_weight, axis=1, keepdims=True)
            h = tf.einsum("pl,pld->pd", bag_weight, x) / tf.maximum(size, 1.0)
            item_row = batch["item_row"]
            u = tf.gather(w_out, item_row)  # (P, Li, d)
            f = tf.einsum("pd,pld->pl", h, u)
            label, hs = batch["item_label"], batch["item_hs"]
            weight = batch["item_weight"] * (1.0 - hs * tf.cast(tf.abs(f) >= MAX_EXP, tf.float32))
            g = (label - tf.sigmoid(f)) * lr * weight
            dh = tf.einsum("pl,pld->pd", g, u)
            du = g[:, :, None] * h[:, None, :]
            du = du * batch["item_scale"][:, :, None]
            w_out.scatter_add(tf.IndexedSlices(tf.reshape(du, (-1, dim)), tf.reshape(item_row, (-1,))))
            dx = (bag_weight * batch["bag_scale"])[:, :, None] * dh[:, None, :]
            w_in.scatter_add(tf.IndexedSlices(tf.reshape(dx, (-1, dim)), tf.reshape(bag_row, (-1,))))
            sign = 2.0 * label - 1.0
            return tf.reduce_sum(weight * tf.math.softplus(-sign * f)), tf.reduce_sum(weight)

        def window_step(batch: dict[str, Any], lr: Any) -> tuple[Any, Any]:
            # One product per slot group, one scatter per matrix for all groups.
            groups = sorted(int(name.rsplit("_", 1)[1]) for name in batch if name.startswith("slot_row_"))
            d_out, out_rows, d_in, in_rows = [], [], [], []
            loss, total = tf.constant(0.0), tf.constant(0.0)
            for g in groups:
                slot_row, slot_weight, item_row = batch[f"slot_row_{g}"], batch[f"slot_weight_{g}"], batch[f"item_row_{g}"]
                x = tf.gather(w_in, slot_row)  # (W, S, d)
                u = tf.gather(w_out, item_row)  # (W, I, d)
                f = tf.einsum("wsd,wid->wsi", x, u)
                label, hs = batch[f"item_label_{g}"][:, None, :], batch[f"item_hs_{g}"][:, None, :]
                weight = slot_weight[:, :, None] * batch[f"item_weight_{g}"][:, None, :] * (1.0 - hs * tf.cast(tf.abs(f) >= MAX_EXP, tf.float32))
                gradient = (label - tf.sigmoid(f)) * lr * weight
                d_in.append(tf.reshape(tf.einsum("wsi,wid->wsd", gradient, u) * batch[f"slot_scale_{g}"][:, :, None], (-1, dim)))
                d_out.append(tf.reshape(tf.einsum("wsi,wsd->wid", gradient, x) * batch[f"item_scale_{g}"][:, :, None], (-1, dim)))
                in_rows.append(tf.reshape(slot_row, (-1,)))
                out_rows.append(tf.reshape(item_row, (-1,)))
                sign = 2.0 * label - 1.0
                loss += tf.reduce_sum(weight * tf.math.softplus(-sign * f))
                total += tf.reduce_sum(weight)
            w_out.scatter_add(tf.IndexedSlices(tf.concat(d_out, 0), tf.concat(out_rows, 0)))
            w_in.scatter_add(tf.IndexedSlices(tf.concat(d_in, 0), tf.concat(in_rows, 0)))
            return loss, total

        update = window_step if grouped else step

        def updates(batches: dict[str, Any], lrs: Any) -> Any:
            # K updates in sequence: an XLA while loop, each iteration reading the variables the
            # previous one scattered into (written as tf.while_loop: autograph's conversion of
            # a Python loop took a third of the tracing time).
            def body(k: Any, loss: Any, weight: Any) -> tuple[Any, Any, Any]:
                item_loss, item_weight = update({name: value[k] for name, value in batches.items()}, lrs[k])
                return k + 1, loss + item_loss, weight + item_weight

            zero = tf.constant(0.0)
            _, loss, weight = tf.while_loop(lambda k, *_: k < tf.shape(lrs)[0], body, (tf.constant(0), zero, zero))
            return loss / tf.maximum(weight, 1.0)

        self.grouped = grouped
        self._step = tf.function(updates, jit_compile=jit_compile, reduce_retracing=True, autograph=False)
        self._tf = tf

    def __call__(self, batch: dict[str, np.ndarray], lr: float | np.ndarray) -> float:
        return self.run(self.feeds(batch, lr))

    def feeds(self, batch: dict[str, np.ndarray], lr: float | np.ndarray) -> tuple[dict[str, Any], Any]:
        """The tensors one call takes (any thread may make them: the trainer's producer does,
        so that the step's thread does not spend a millisecond a call converting 40-odd
        arrays)."""
        tf = self._tf
        lrs = np.atleast_1d(np.asarray(lr, np.float32))
        if np.ndim(next(iter(batch.values()))) == 2:  # one batch
            batch = {name: value[None] for name, value in batch.items()}
        if len(lrs) != len(next(iter(batch.values()))):
            raise ValueError(f"{len(lrs)} learning rates for {len(next(iter(batch.values())))} stacked batches")
        return {k: tf.constant(v) for k, v in batch.items()}, tf.constant(lrs)

    def run(self, feeds: tuple[dict[str, Any], Any]) -> float:
        """Make the updates of :meth:`feeds`' tensors; return their mean item log loss."""
        return float(self._step(*feeds))

    def input_vectors(self) -> np.ndarray:
        """The input matrix, ``(input_rows, dim)`` float32."""
        return np.asarray(self.input.numpy())

    def output_vectors(self) -> np.ndarray:
        """The output matrix, ``(output_rows, dim)`` float32."""
        return np.asarray(self.output.numpy())


# -- examples from running text ---------------------------------------------------------------


@dataclasses.dataclass
class Subwords:
    """Input rows of each word: word ``w`` reads rows ``rows[offsets[w]:offsets[w + 1]]`` (fastText:
    the word's own row and its hashed character n-gram rows).

    Attributes:
        rows: ``(total,)`` int32.
        offsets: ``(V + 1,)`` int64.
    """

    rows: np.ndarray
    offsets: np.ndarray

    def expand(self, words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For words ``(n,)``, return ``(owner, rows)``: each input row and the index of its word."""
        starts = self.offsets[words]
        lengths = self.offsets[words + 1] - starts
        owner = np.repeat(np.arange(len(words), dtype=np.int64), lengths)
        within = np.arange(len(owner)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        return owner, self.rows[starts[owner] + within]


def window_pairs(sentence: np.ndarray, window: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``(center, context)`` positions within ``window`` of each other in the same sentence.

    Dynamic window (word2vec.c, gensim): each center draws ``b`` uniformly in ``0 .. window-1``
    and sees ``window - b`` words on each side, so near words are weighted more. Pairs are in
    corpus order: by center, then by context position.

    Args:
        sentence: ``(T,)`` sentence index of each token (tokens of a sentence are contiguous).

    Returns:
        two ``(P,)`` int64 arrays of token positions.
    """
    size = len(sentence)
    reach = window - rng.integers(0, window, size=size)
    centers, contexts = [], []
    for offset in range(1, window + 1):
        left = np.arange(size - offset)
        right = left + offset
        same = sentence[left] == sentence[right]
        forward = same & (reach[left] >= offset)  # center left, context right
        backward = same & (reach[right] >= offset)  # center right, context left
        centers += [left[forward], right[backward]]
        contexts += [right[forward], left[backward]]
    center, context = np.concatenate(centers), np.concatenate(contexts)
    order = np.argsort(center * (2 * window + 1) + (context - center + window), kind="stable")
    return center[order], context[order]


def skipgram_examples(ids: np.ndarray, sentence: np.ndarray, window: int, rng: np.random.Generator, subwords: Subwords | None = None) -> Examples:
    """Skip-gram examples of a chunk of (sub-sampled) word ids.

    Without ``subwords`` (word2vec.c, gensim): one example per (center, context) pair, input =
    the context word's vector, target = the center word.

    With ``subwords`` (fastText): one example per center word, input = the center's word and
    n-gram rows, targets = the words of its window (fastText's orientation). Grouping a center's
    targets computes and updates its tens of input rows once per window instead of once per
    pair, which is most of fastText's work; fastText itself updates them after each pair.
    """
    center, context = window_pairs(sentence, window, rng)
    if subwords is None:
        return Examples(np.arange(len(center), dtype=np.int64), ids[context].astype(np.int32), ids[center].astype(np.int32))
    if not len(center):
        return Examples(np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int64), 0)
    first = np.r_[True, center[1:] != center[:-1]]
    target_example = np.cumsum(first) - 1
    owner, rows = subwords.expand(ids[center[first]])
    return Examples(owner, rows.astype(np.int32), ids[context].astype(np.int32), target_example.astype(np.int64), int(first.sum()))


def cbow_examples(ids: np.ndarray, sentence: np.ndarray, window: int, rng: np.random.Generator, subwords: Subwords | None = None) -> Examples:
    """CBOW examples: the mean of the window's context words (their rows, with ``subwords``)
    predicts the center word; centers with an empty window (one-word sentences) are skipped."""
    center, context = window_pairs(sentence, window, rng)
    starts = np.flatnonzero(np.r_[True, center[1:] != center[:-1]]) if len(center) else np.zeros(0, np.int64)
    example = np.cumsum(np.r_[False, center[1:] != center[:-1]]) if len(center) else np.zeros(0, np.int64)
    targets = ids[center[starts]].astype(np.int32)
    if subwords is None:
        return Examples(example.astype(np.int64), ids[context].astype(np.int32), targets)
    owner, rows = subwords.expand(ids[context])
    return Examples(example[owner].astype(np.int64), rows.astype(np.int32), targets)


@dataclasses.dataclass(frozen=True)
class WindowExamples:
    """``make(ids, sentence, rng) -> Examples`` for the training loop: :func:`skipgram_examples`
    or :func:`cbow_examples` with a window (and subwords); word2vec and fastText both build
    their example makers with it.

    Attributes:
        grouping: ``"skipgram"`` (pairs; fastText: a center with its window) or ``"cbow"`` (a
            window's context rows and its center: CBOW, and skip-gram's window batches).
        window: largest context distance (dynamic window).
        subwords: each word's input rows (fastText), or None.
    """

    grouping: str
    window: int
    subwords: Subwords | None = None

    def __call__(self, ids: np.ndarray, sentence: np.ndarray, rng: np.random.Generator) -> Examples:
        build = skipgram_examples if self.grouping == "skipgram" else cbow_examples
        return build(ids, sentence, self.window, rng, self.subwords)
