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

from ptmkit.data.vocabulary import HuffmanCodes

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
        noise: the noise table (:func:`ptmkit.data.vocabulary.noise_table`) when ``negative > 0``.
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
    count, size = len(examples), batch_examples * (updates or 1)
    bag_lengths = np.bincount(examples.bag_example, minlength=count)
    # Bags in steps of half the pad width up to 16 rows: a word2vec CBOW window (2 x window
    # context words, 10 by default) is not padded to 12.
    bag_width = _width(bag_lengths, max(1, pad_width // 2), steps=8)
    bag_row, bag_weight = _dense(examples.bag_example, examples.bag_row.astype(np.int32), size, bag_width)
    rows, labels, weights, hs = [], [], [], []
    owner = examples.owners()
    targets = examples.target.astype(np.int64)
    if output.negative and shared_negatives and examples.target_example is not None:
        assert output.noise is not None
        k = output.negative
        negatives = output.noise[rng.integers(0, len(output.noise), size=(count, k))].astype(np.int64)
        # A noise word counts once for each target of its example that it differs from.
        same = np.zeros((count, k), np.float64)
        np.add.at(same, owner, (negatives[owner] == targets[:, None]).astype(np.float64))
        per_example = np.bincount(owner, minlength=count).astype(np.float64)[:, None]
        item_owner = np.concatenate([owner, np.repeat(np.arange(count, dtype=np.int64), k)])
        order = np.argsort(item_owner, kind="stable")
        item_owner = item_owner[order]
        values = np.concatenate([targets, negatives.ravel()])[order]
        label = np.concatenate([np.ones(len(targets), np.float32), np.zeros(count * k, np.float32)])[order]
        weight = np.concatenate([np.ones(len(targets), np.float32), (per_example - same).ravel().astype(np.float32)])[order]
        width = _width(np.bincount(item_owner, minlength=count), pad_width)
        row, mask = _dense(item_owner, values.astype(np.int32), size, width)
        rows.append(row)
        labels.append(_dense(item_owner, label, size, width)[0])
        weights.append(_dense(item_owner, weight, size, width)[0] * mask)
        hs.append(np.zeros((size, width), np.float32))
    elif output.negative:
        assert output.noise is not None
        k = output.negative
        negatives = output.noise[rng.integers(0, len(output.noise), size=(len(targets), k))]
        pairs = np.concatenate([targets[:, None], negatives], axis=1)
        label = np.zeros(pairs.shape, np.float32)
        label[:, 0] = 1.0
        weight = np.ones(pairs.shape, np.float32)
        weight[:, 1:] = negatives != targets[:, None]
        item_owner = np.repeat(owner, k + 1)
        width = _width(np.bincount(item_owner, minlength=count), pad_width)
        row, mask = _dense(item_owner, pairs.ravel().astype(np.int32), size, width)
        rows.append(row)
        labels.append(_dense(item_owner, label.ravel(), size, width)[0])
        weights.append(_dense(item_owner, weight.ravel(), size, width)[0] * mask)
        hs.append(np.zeros((size, width), np.float32))
    if output.huffman is not None:
        huffman = output.huffman
        starts = huffman.offsets[targets]
        lengths = huffman.offsets[targets + 1] - starts
        target_index = np.repeat(np.arange(len(targets), dtype=np.int64), lengths)
        position = starts[target_index] + (np.arange(len(target_index)) - np.repeat(np.cumsum(lengths) - lengths, lengths))
        item_owner = owner[target_index]
        shift = output.vocabulary_size if output.negative else 0
        width = _width(np.bincount(item_owner, minlength=count), pad_width, steps=8)
        point, mask = _dense(item_owner, huffman.points[position] + np.int32(shift), size, width)
        code, _ = _dense(item_owner, huffman.codes[position].astype(np.float32), size, width)
        rows.append(point)
        labels.append((1.0 - code) * mask)
        weights.append(mask)
        hs.append(np.ones((size, width), np.float32))
    item_row = np.concatenate(rows, axis=1).astype(np.int32)
    item_weight = np.concatenate(weights, axis=1)
    groups = updates or 1
    return _split({
        "bag_row": bag_row,
        "bag_weight": bag_weight,
        "bag_scale": _hot_scale(bag_row, bag_weight, hot_limit, groups=groups),
        "item_row": item_row,
        "item_label": np.concatenate(labels, axis=1),
        "item_weight": item_weight,
        "item_hs": np.concatenate(hs, axis=1),
        "item_scale": _hot_scale(item_row, item_weight, hot_limit, item_weight if shared_negatives else None, groups=groups),
    }, updates)


def _split(batch: dict[str, np.ndarray], updates: int | None) -> dict[str, np.ndarray]:
    """``(K P, L)`` arrays as ``(K, P, L)`` when ``updates = K`` (a reshape, no copy)."""
    if updates is None:
        return batch
    return {name: value.reshape(updates, -1, value.shape[1]) for name, value in batch.items()}


def make_window_batch(
    examples: Examples, output: OutputLayer, rng: np.random.Generator, batch_examples: int, pad_width: int = 4, hot_limit: float = 0.0, updates: int | None = None
) -> dict[str, np.ndarray]:
    """The arrays of one window-grouped step (:class:`WordPredictionStep` with ``grouped=True``)
    for at most ``batch_examples`` windows (or ``updates`` batches of them, shaped ``(K, W,
    ...)`` as :func:`make_batch` does).

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

    Returns:
        ``slot_row`` ``(W, S)`` int32, ``slot_weight`` and ``slot_scale`` ``(W, S)`` float32;
        ``item_row`` ``(W, I)`` int32, ``item_label``, ``item_weight``, ``item_hs`` and
        ``item_scale`` ``(W, I)`` float32. ``W = batch_examples``; ``S`` is the longest window
        rounded up to even, ``I = 1 + k`` plus the longest path (rounded up to ``pad_width``).
        Hot rows (``hot_limit``) count pair updates: a shared output row of a window counts
        once per slot.
    """
    if examples.target_example is not None:
        raise ValueError("window batches need one target per example")
    count, size = len(examples), batch_examples * (updates or 1)
    lengths = np.bincount(examples.bag_example, minlength=count)
    slots = max(2, -(-int(lengths.max() if len(lengths) else 1) // 2) * 2)
    slot_row, slot_weight = _dense(examples.bag_example, examples.bag_row.astype(np.int32), size, slots)
    targets = np.zeros(size, np.int64)
    targets[:count] = examples.target
    real = np.zeros(size, bool)
    real[:count] = True
    rows, labels, weights, hs = [], [], [], []
    if output.negative:
        assert output.noise is not None
        k = output.negative
        negatives = output.noise[rng.integers(0, len(output.noise), size=(size, k))].astype(np.int64)
        rows.append(np.concatenate([targets[:, None], negatives], axis=1))
        label = np.zeros((size, 1 + k), np.float32)
        label[:, 0] = 1.0
        labels.append(label)
        weights.append(np.concatenate([real[:, None], (negatives != targets[:, None]) & real[:, None]], axis=1).astype(np.float32))
        hs.append(np.zeros((size, 1 + k), np.float32))
    if output.huffman is not None:
        huffman = output.huffman
        starts = huffman.offsets[examples.target]
        path = huffman.offsets[examples.target + 1] - starts
        owner = np.repeat(np.arange(count, dtype=np.int64), path)
        position = starts[owner] + (np.arange(len(owner)) - np.repeat(np.cumsum(path) - path, path))
        width = _width(path, pad_width, steps=8)
        shift = output.vocabulary_size if output.negative else 0
        point, mask = _dense(owner, huffman.points[position].astype(np.int64) + shift, size, width)
        code, _ = _dense(owner, huffman.codes[position].astype(np.float32), size, width)
        rows.append(point)
        labels.append((1.0 - code) * mask)
        weights.append(mask)
        hs.append(np.ones((size, width), np.float32))
    item_row = np.concatenate(rows, axis=1).astype(np.int32)
    item_weight = np.concatenate(weights, axis=1)
    pairs = slot_weight.sum(axis=1, keepdims=True)
    groups = updates or 1
    return _split({
        "slot_row": slot_row,
        "slot_weight": slot_weight,
        "slot_scale": _hot_scale(slot_row, slot_weight, hot_limit, groups=groups),
        "item_row": item_row,
        "item_label": np.concatenate(labels, axis=1),
        "item_weight": item_weight,
        "item_hs": np.concatenate(hs, axis=1),
        "item_scale": _hot_scale(item_row, item_weight * (pairs > 0), hot_limit, pairs, groups=groups),
    }, updates)


def _hot_scale(rows: np.ndarray, weight: np.ndarray, hot_limit: float, updates: np.ndarray | None = None, groups: int = 1) -> np.ndarray:
    """``hot_limit / n`` for rows updated ``n > hot_limit`` times in the batch, else 1.

    ``n`` counts real occurrences (``weight > 0``), each counting ``updates`` (default 1: one
    pair update per occurrence; a shared output row of a window counts one per pair). With
    ``groups = K``, ``rows`` ``(K P, L)`` holds ``K`` batches of ``P`` examples, counted apart.
    """
    if not hot_limit:
        return np.ones(rows.shape, np.float32)
    if groups > 1:  # count (batch, row) pairs: the row ids of batch k shifted by k * (max + 1)
        top = int(rows.max()) + 1
        group = (np.arange(rows.shape[0], dtype=np.int64) // (rows.shape[0] // groups))[:, None]
        rows = rows.astype(np.int64) + group * top
    real = weight > 0
    flat = rows[real]
    if not len(flat):
        return np.ones(rows.shape, np.float32)
    counted = None if updates is None else np.broadcast_to(updates, rows.shape)[real].astype(np.float64)
    top = int(flat.max()) + 1
    if top <= max(1 << 20, 8 * len(flat)):  # a small row range: one bincount, no sort
        n = np.bincount(flat, weights=counted, minlength=top)
        if n.max() <= hot_limit:
            return np.ones(rows.shape, np.float32)
        factor = np.minimum(1.0, hot_limit / np.maximum(n, 1.0)).astype(np.float32)  # per row
        scale = factor[np.minimum(rows, top - 1)]
    else:  # fastText's millions of bucket rows: sort only the rows this batch touches
        unique, inverse = np.unique(flat, return_inverse=True)
        n_unique = np.bincount(inverse, weights=counted, minlength=len(unique))
        scale = np.ones(rows.shape, np.float32)
        scale[real] = np.minimum(1.0, hot_limit / n_unique)[inverse]
    scale[~real] = 1.0
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
        grouped: take window batches (:func:`make_window_batch`: each window's input slots share
            its output items) instead of :func:`make_batch`'s examples.
        output_matrix: initial output vectors ``(output_rows, dim)`` float32 (a resumed run's);
            default zeros.

    Calling it with a batch from :func:`make_batch` (or :func:`make_window_batch`) and a
    learning rate updates both matrices and returns the batch's mean log loss over items (a
    float). Calling it with ``K`` batches (arrays ``(K, P, L)``: :func:`make_batch` with
    ``updates=K``) and ``K`` learning rates makes ``K`` updates one after the other in one XLA call (a
    loop in the compiled program): the same as ``K`` calls (test), without the ~0.5 ms each call
    costs in dispatch, and with a batch small enough that its gathered rows stay in the core's
    cache (1,024 skip-gram pairs: 2.4 MB of output rows; 4,096 pairs in one update were 0.9 us a
    pair, 8 x 1,024 in one call 0.5 us).
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
            slot_row, slot_weight = batch["slot_row"], batch["slot_weight"]
            x = tf.gather(w_in, slot_row)  # (W, S, d)
            item_row = batch["item_row"]
            u = tf.gather(w_out, item_row)  # (W, I, d)
            f = tf.einsum("wsd,wid->wsi", x, u)
            label, hs = batch["item_label"][:, None, :], batch["item_hs"][:, None, :]
            weight = slot_weight[:, :, None] * batch["item_weight"][:, None, :] * (1.0 - hs * tf.cast(tf.abs(f) >= MAX_EXP, tf.float32))
            g = (label - tf.sigmoid(f)) * lr * weight
            dx = tf.einsum("wsi,wid->wsd", g, u) * batch["slot_scale"][:, :, None]
            du = tf.einsum("wsi,wsd->wid", g, x) * batch["item_scale"][:, :, None]
            w_out.scatter_add(tf.IndexedSlices(tf.reshape(du, (-1, dim)), tf.reshape(item_row, (-1,))))
            w_in.scatter_add(tf.IndexedSlices(tf.reshape(dx, (-1, dim)), tf.reshape(slot_row, (-1,))))
            sign = 2.0 * label - 1.0
            return tf.reduce_sum(weight * tf.math.softplus(-sign * f)), tf.reduce_sum(weight)

        update = window_step if grouped else step

        def updates(batches: dict[str, Any], lrs: Any) -> Any:
            # K updates in sequence: autograph turns the loop into an XLA while loop, each
            # iteration reading the variables the previous one scattered into.
            loss, weight = tf.constant(0.0), tf.constant(0.0)
            for k in tf.range(tf.shape(lrs)[0]):
                item_loss, item_weight = update({name: value[k] for name, value in batches.items()}, lrs[k])
                loss += item_loss
                weight += item_weight
            return loss / tf.maximum(weight, 1.0)

        self.grouped = grouped
        self._step = tf.function(updates, jit_compile=jit_compile, reduce_retracing=True)
        self._tf = tf

    def __call__(self, batch: dict[str, np.ndarray], lr: float | np.ndarray) -> float:
        tf = self._tf
        lrs = np.atleast_1d(np.asarray(lr, np.float32))
        if np.ndim(next(iter(batch.values()))) == 2:  # one batch
            batch = {name: value[None] for name, value in batch.items()}
        if len(lrs) != len(next(iter(batch.values()))):
            raise ValueError(f"{len(lrs)} learning rates for {len(next(iter(batch.values())))} stacked batches")
        return float(self._step({k: tf.constant(v) for k, v in batch.items()}, tf.constant(lrs)))

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
