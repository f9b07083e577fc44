"""The CPU training path of word2vec and fastText: compiled loops (numba) updating shared matrices from one
thread per corpus shard, without locks (Hogwild; Recht et al. 2011), as word2vec.c and gensim do.

References:

* Mikolov et al. 2013, "Efficient Estimation of Word Representations in Vector Space" and
  "Distributed Representations of Words and Phrases and their Compositionality"; their
  implementation, word2vec.c (``TrainModelThread``), whose loops the per-pair kernels transcribe:
  sub-sampling, the dynamic window, negative sampling and hierarchical softmax, the random
  numbers of its linear congruential generator (``next_random * 25214903917 + 11``) in the same
  order.
* Ji et al. 2016, "Parallelizing Word2Vec in Shared and Distributed Memory" (Intel's pWord2Vec,
  *HogBatch*): skip-gram's windows with their output rows shared. A window's context words all
  predict its center word, so they share its negative samples (drawn once per window) and its
  Huffman path; the window's update is then three small matrix products,
  ``F = C Oᵀ`` (contexts x outputs), ``C += G O`` and ``O += Gᵀ C`` with
  ``G = (label - sigmoid(F)) * lr``, each output row read and written once per window instead of
  once per pair. :data:`HOGBATCH` selects it (``model.batching = windows``; the default for
  skip-gram on this path); ``pairs`` is word2vec.c's per-pair loop.

Differences from word2vec.c, all shared with gensim: sub-sampling and the window read the
generator's bits from 16 up (``next_random >> 16``, as gensim; word2vec.c takes the lowest bits,
``next_random & 0xFFFF`` and ``next_random % window``, which repeat with period 2^16: skip-gram with
hierarchical softmax lost some 0.04 of WordSim-353 rho with them), the sigmoid is computed exactly
(word2vec.c and gensim read a 1,000-entry table), no word is reserved for ``</s>`` (word2vec.c redraws noise
word 0), sentences are not cut at 1,000 words, and the learning rate decays with each thread's own
progress through its shard (word2vec.c: the words all threads have done). Negative sampling
clamps ``sigmoid`` to 0 / 1 beyond ``|f| > 6``; hierarchical softmax skips those nodes.

Determinism: each thread draws from its own generator seeded with ``(seed, epoch, shard)``, so a
run on one thread is reproducible bit for bit and resumes at an epoch boundary exactly; on
several threads, the updates interleave as the threads run (like gensim's workers) and a run is
equal to another only in distribution.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from numba import njit

from ptmkit.wordvectors.vocabulary import EncodedCorpus, keep_probabilities
from ptmkit.wordvectors.word_prediction import OutputLayer, Subwords

MAX_EXP = 6.0
#: Windows whose loss is measured: every ``LOSS_EVERY``-th center word (the loss is a log per
#: item; measured on all it cost a tenth of the time).
LOSS_EVERY = 8

PAIRS, HOGBATCH = 0, 1


@dataclasses.dataclass(frozen=True)
class KernelSchedule:
    """What the kernel trains, and how.

    Attributes:
        cbow: CBOW (the mean of the window predicts the center word) instead of skip-gram.
        window: largest context distance (dynamic window: each center draws ``1 .. window``).
        epochs: passes over the corpus.
        alpha: initial learning rate, decaying linearly to ``min_alpha`` by the words processed.
        min_alpha: final learning rate.
        sample: sub-sampling threshold ``t`` (0: off).
        seed: the random numbers of thread ``s`` in epoch ``e`` are seeded with ``(seed, e, s)``.
        threads: corpus shards trained at once, one thread each (Hogwild).
        mode: skip-gram's update: :attr:`PAIRS` (word2vec.c; fastText: the mean recomputed
            after every pair) or :attr:`HOGBATCH` (Ji et al. 2016: a window at a time); CBOW
            ignores it.
    """

    #: ``mode``: word2vec.c's per-pair updates.
    PAIRS: ClassVar[int] = PAIRS
    #: ``mode``: a window at a time, its output rows shared (HogBatch).
    HOGBATCH: ClassVar[int] = HOGBATCH

    cbow: bool = False
    window: int = 5
    epochs: int = 5
    alpha: float = 0.025
    min_alpha: float = 0.0001
    sample: float = 1e-3
    seed: int = 1
    threads: int = 1
    mode: int = HOGBATCH

    def lr(self, progress: float) -> float:
        """The learning rate after ``progress`` (0 .. 1) of all epochs' words."""
        return max(self.min_alpha, self.alpha - (self.alpha - self.min_alpha) * progress)


def thread_seed(seed: int, epoch: int, shard: int) -> np.uint64:
    """The first state of shard ``shard``'s generator in epoch ``epoch`` (word2vec.c seeds
    thread ``id`` with ``id``)."""
    state = np.random.SeedSequence([seed, epoch, shard]).generate_state(1, np.uint64)[0]
    return np.uint64(state)


@njit(cache=True, nogil=True, inline="always")
def _lcg(state: np.uint64) -> np.uint64:
    """word2vec.c's ``next_random = next_random * 25214903917 + 11`` (modulo 2^64)."""
    return state * np.uint64(25214903917) + np.uint64(11)


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def _dot(a: np.ndarray, b: np.ndarray) -> float:
    total = np.float32(0.0)
    for d in range(a.shape[0]):
        total += a[d] * b[d]
    return total


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def _gradient(f: float, label: float, lr: float, clip: bool) -> float:
    """``(label - sigmoid(f)) * lr``; beyond ``|f| > 6`` negative sampling clamps the sigmoid
    (word2vec.c) and hierarchical softmax (``clip``) skips the node (returns 0)."""
    if clip:
        if f >= MAX_EXP or f <= -MAX_EXP:
            return 0.0
    elif f > MAX_EXP:
        return (label - 1.0) * lr
    elif f < -MAX_EXP:
        return label * lr
    return (label - 1.0 / (1.0 + math.exp(-f))) * lr


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def _loss(f: float, label: float) -> float:
    """The item's log loss, ``-log sigmoid(±f)``."""
    z = f if label > 0.5 else -f
    return math.log1p(math.exp(-z)) if z > -30.0 else -z


@njit(cache=True, nogil=True, fastmath=True)
def _train_shard(syn0, out, ids, offsets, shard, keep, layer, settings, rates, state, loss):  # fmt: skip
    """One epoch over sentences ``shard = (first, stop)`` (one thread's shard).

    Args:
        syn0: ``(V, dim)`` float32 input vectors, updated in place.
        out: ``(rows, dim)`` float32 output vectors: noise-word rows ``0 .. V-1`` (with negative
            sampling), then inner Huffman nodes from ``hs_base``.
        ids: ``(tokens,)`` int32 word ids; ``offsets``: ``(sentences + 1,)`` int64.
        keep: ``(V,)`` float64 sub-sampling keep probabilities (all 1: off).
        layer: ``(table, codes, points, path_offsets, hs_base, negative)``: the noise table
            (``(size,)`` int32, size >= 1 even without negative sampling), the Huffman codes
            (``path_offsets`` empty: no hierarchical softmax), the first inner-node row, the
            noise words per prediction.
        settings: ``(cbow, mode, window)``.
        rates: ``(alpha, min_alpha, progress_lo, progress_hi)``: the learning rate decays from
            ``alpha`` to ``min_alpha`` over the run (0 .. 1); the shard spans ``progress_lo ..
            progress_hi`` of it.
        state: the generator's first state (uint64).
        loss: ``(2,)`` float64, receives the summed item log loss and the item count of every
            :data:`LOSS_EVERY`-th window (center word with context words), the first included.

    Returns:
        the generator's last state.
    """
    cbow, mode, window = settings
    path_offsets, negative = layer[3], layer[5]
    most_items = negative + 1 + (int(np.max(path_offsets[1:] - path_offsets[:-1])) if path_offsets.shape[0] > 1 else 0)
    dim, span = syn0.shape[1], max(2 * window, 1)
    items = (np.empty(most_items, np.int64), np.empty(most_items, np.float32), np.empty(most_items, np.bool_))
    work = (
        np.empty((span, dim), np.float32),
        np.empty((most_items, dim), np.float32),
        np.empty((span, most_items), np.float32),
    )
    vectors = (np.empty(dim, np.float32), np.empty(dim, np.float32))
    contexts = np.empty(span, np.int64)
    sentence = np.empty(
        max(1, np.max(offsets[shard[0] + 1 : shard[1] + 1] - offsets[shard[0] : shard[1]]))
        if shard[1] > shard[0]
        else 1,
        np.int32,
    )
    shard_tokens = max(offsets[shard[1]] - offsets[shard[0]], 1)
    seen, centers = 0, 0
    sample = keep.shape[0] > 0 and np.min(keep) < 1.0
    for s in range(shard[0], shard[1]):
        start, stop = offsets[s], offsets[s + 1]
        lr = _rate(rates, seen / shard_tokens)
        n, state = _subsample(ids, start, stop, keep, sample, sentence, state)
        for pos in range(n):
            if pos % 10000 == 9999:  # a long line: the rate decays within it too
                lr = _rate(rates, (seen + (stop - start) * pos / n) / shard_tokens)
            word = sentence[pos]
            state = _lcg(state)
            m = _window(sentence, n, pos, window, np.int64((state >> np.uint64(16)) % np.uint64(window)), contexts)
            if m == 0:
                continue
            measure = centers % LOSS_EVERY == 0  # the first window always: a run that trained measured some loss
            centers += 1
            if cbow:
                k, state = _items(word, layer, items, 0, state)
                _cbow_update(syn0, out, contexts, m, items, k, vectors, lr, measure, loss)
            elif mode == PAIRS:
                for j in range(m):
                    k, state = _items(word, layer, items, 0, state)
                    _pair_update(syn0, out, contexts[j], items, k, vectors[1], lr, measure, loss)
            else:  # HogBatch: the window's output items once, shared by its m context words
                k, state = _items(word, layer, items, 0, state)
                _window_update(syn0, out, contexts, m, items, k, work, lr, measure, loss)
        seen += stop - start
    return state


@njit(cache=True, nogil=True)
def _subsample(ids, start, stop, keep, sample, sentence, state):  # fmt: skip
    """Copy the words of ``ids[start:stop]`` that sub-sampling keeps into ``sentence``
    (word2vec.c: one draw per word, dropped when ``keep < r / 65536`` with ``r`` 16 bits of
    ``next_random``, bits 16-31 as gensim reads them; no draw when sub-sampling is off); returns
    ``(words kept, state)``."""
    n = 0
    for t in range(start, stop):
        word = ids[t]
        if sample:
            state = _lcg(state)
            if keep[word] < ((state >> np.uint64(16)) & np.uint64(0xFFFF)) / 65536.0:
                continue
        sentence[n] = word
        n += 1
    return n, state


@njit(cache=True, nogil=True)
def _window(sentence, n, pos, window, b, contexts):  # fmt: skip
    """The context words of position ``pos`` with word2vec.c's dynamic window (``b`` in ``0 ..
    window - 1`` drawn: ``window - b`` words each side) into ``contexts``; returns their number."""
    m = 0
    for a in range(b, 2 * window + 1 - b):
        c = pos - window + a
        if a != window and 0 <= c < n:
            contexts[m] = sentence[c]
            m += 1
    return m


@njit(cache=True, nogil=True)
def _items(word, layer, items, k, state):  # fmt: skip
    """The output rows that predict ``word``, into ``items = (rows, labels, clip)`` from ``k``:
    its Huffman path (row ``hs_base + point``, label ``1 - code``, skipped beyond ``|f| >= 6``),
    then itself (label 1) and ``negative`` noise words ``table[(next_random >> 16) % size]``
    (label 0; a draw equal to ``word`` is dropped), as word2vec.c visits them. Returns
    ``(k, state)``."""
    table, codes, points, path_offsets, hs_base, negative = layer
    rows, labels, clip = items
    if path_offsets.shape[0] > 0:
        for p in range(path_offsets[word], path_offsets[word + 1]):
            rows[k], labels[k], clip[k] = hs_base + points[p], 1.0 - codes[p], True
            k += 1
    if negative > 0:
        rows[k], labels[k], clip[k] = word, 1.0, False
        k += 1
        for _ in range(negative):
            state = _lcg(state)
            target = table[(state >> np.uint64(16)) % np.uint64(table.shape[0])]
            if target != word:
                rows[k], labels[k], clip[k] = target, 0.0, False
                k += 1
    return k, state


@njit(cache=True, nogil=True)
def _rate(rates, done):  # fmt: skip
    """The learning rate at ``done`` (0 .. 1) of the shard, decaying linearly over the run."""
    alpha, min_alpha, lo, hi = rates
    return max(min_alpha, alpha - (alpha - min_alpha) * (lo + (hi - lo) * done))


@njit(cache=True, nogil=True, fastmath=True)
def _predict(h, out, items, k, neu1e, lr, measure, loss):  # fmt: skip
    """word2vec.c's inner loop for one input vector ``h``: each output row in turn,
    ``g = (label - sigmoid(h . row)) * lr``, ``neu1e += g row``, ``row += g h``."""
    rows, labels, clip = items
    neu1e[:] = 0.0
    for i in range(k):
        row = out[rows[i]]
        f = _dot(h, row)
        g = np.float32(_gradient(f, labels[i], lr, clip[i]))
        if g == 0.0 and clip[i]:
            continue
        if measure:
            loss[0] += _loss(f, labels[i])
            loss[1] += 1.0
        for d in range(h.shape[0]):
            neu1e[d] += g * row[d]
        for d in range(h.shape[0]):
            row[d] += g * h[d]


@njit(cache=True, nogil=True, fastmath=True)
def _pair_update(syn0, out, last, items, k, neu1e, lr, measure, loss):  # fmt: skip
    """word2vec.c's skip-gram update of one pair: context word ``last``'s input vector predicts
    the center word (its ``items``), then gets the summed error."""
    l1 = syn0[last]
    _predict(l1, out, items, k, neu1e, lr, measure, loss)
    for d in range(l1.shape[0]):
        l1[d] += neu1e[d]


@njit(cache=True, nogil=True, fastmath=True)
def _cbow_update(syn0, out, contexts, m, items, k, vectors, lr, measure, loss):  # fmt: skip
    """word2vec.c's CBOW update of one window: the mean of the ``m`` context vectors predicts
    the center word; every context vector then gets the whole error (not divided by ``m``)."""
    neu1, neu1e = vectors
    neu1[:] = 0.0
    for j in range(m):
        row = syn0[contexts[j]]
        for d in range(neu1.shape[0]):
            neu1[d] += row[d]
    scale = np.float32(1.0 / m)
    for d in range(neu1.shape[0]):
        neu1[d] *= scale
    _predict(neu1, out, items, k, neu1e, lr, measure, loss)
    for j in range(m):
        row = syn0[contexts[j]]
        for d in range(neu1.shape[0]):
            row[d] += neu1e[d]


@njit(cache=True, nogil=True, fastmath=True)
def _window_update(syn0, out, contexts, m, items, k, work, lr, measure, loss):  # fmt: skip
    """HogBatch (Ji et al. 2016): the ``m`` context rows ``C`` and ``k`` output rows ``O`` are
    copied out, ``G = (label - sigmoid(C Oᵀ)) * lr``, then ``C += G O`` and ``O += Gᵀ C`` are
    added back (each from the copies: the window's update is one step from one point)."""
    rows, labels, clip = items
    inputs, outputs, grads = work
    dim = syn0.shape[1]
    for j in range(m):
        inputs[j, :] = syn0[contexts[j]]
    for i in range(k):
        outputs[i, :] = out[rows[i]]
    for j in range(m):
        for i in range(k):
            f = _dot(inputs[j], outputs[i])
            g = np.float32(_gradient(f, labels[i], lr, clip[i]))
            grads[j, i] = g
            if measure and (g != 0.0 or not clip[i]):
                loss[0] += _loss(f, labels[i])
                loss[1] += 1.0
    for j in range(m):
        row = syn0[contexts[j]]
        for i in range(k):
            g, o = grads[j, i], outputs[i]
            for d in range(dim):
                row[d] += g * o[d]
    for i in range(k):
        row = out[rows[i]]
        for j in range(m):
            g, c = grads[j, i], inputs[j]
            for d in range(dim):
                row[d] += g * c[d]


@njit(cache=True, nogil=True, fastmath=True)
def _train_shard_subwords(syn0, out, ids, offsets, shard, keep, layer, settings, rates, subwords, state, loss):  # fmt: skip
    """:func:`_train_shard` for words read from several input rows (fastText, Bojanowski et al.
    2017): word ``w``'s input is the mean of rows ``subwords[0][subwords[1][w]:subwords[1][w + 1]]``
    (its own row and its character n-grams'), and each of those rows gets the whole error (not
    divided by their number, as in fastText's ``Model::update``).

    Skip-gram: a center word's rows predict each context word (the orientation of fastText);
    :data:`PAIRS` recomputes the mean and updates the rows after every pair, as fastText does;
    :data:`HOGBATCH` takes the mean once per window and adds the window's summed error once (the
    rows' update from one point, as Ji et al. 2016's windows). CBOW: the mean of every row of the
    context words predicts the center word, as fastText's CBOW.
    """
    cbow, mode, window = settings
    path_offsets, negative = layer[3], layer[5]
    rows, row_offsets = subwords
    most_items = negative + 1 + (int(np.max(path_offsets[1:] - path_offsets[:-1])) if path_offsets.shape[0] > 1 else 0)
    dim, span = syn0.shape[1], max(2 * window, 1)
    items = (np.empty(most_items, np.int64), np.empty(most_items, np.float32), np.empty(most_items, np.bool_))
    h, neu1e, total = np.empty(dim, np.float32), np.empty(dim, np.float32), np.empty(dim, np.float32)
    contexts = np.empty(span, np.int64)
    sentence = np.empty(
        max(1, np.max(offsets[shard[0] + 1 : shard[1] + 1] - offsets[shard[0] : shard[1]]))
        if shard[1] > shard[0]
        else 1,
        np.int32,
    )
    shard_tokens = max(offsets[shard[1]] - offsets[shard[0]], 1)
    seen, centers = 0, 0
    sample = keep.shape[0] > 0 and np.min(keep) < 1.0
    for s in range(shard[0], shard[1]):
        start, stop = offsets[s], offsets[s + 1]
        lr = _rate(rates, seen / shard_tokens)
        n, state = _subsample(ids, start, stop, keep, sample, sentence, state)
        for pos in range(n):
            if pos % 10000 == 9999:
                lr = _rate(rates, (seen + (stop - start) * pos / n) / shard_tokens)
            word = sentence[pos]
            state = _lcg(state)
            m = _window(sentence, n, pos, window, np.int64((state >> np.uint64(16)) % np.uint64(window)), contexts)
            if m == 0:
                continue
            measure = centers % LOSS_EVERY == 0  # the first window always: a run that trained measured some loss
            centers += 1
            if cbow:
                _mean_rows(syn0, rows, row_offsets, contexts, m, h)
                k, state = _items(word, layer, items, 0, state)
                _predict(h, out, items, k, neu1e, lr, measure, loss)
                _add_rows(syn0, rows, row_offsets, contexts, m, neu1e)
                continue
            contexts[m] = word  # the center's rows: one "context" of one word
            total[:] = 0.0
            for j in range(m):
                if mode == PAIRS or j == 0:
                    _mean_rows(syn0, rows, row_offsets, contexts[m:], 1, h)
                k, state = _items(contexts[j], layer, items, 0, state)
                _predict(h, out, items, k, neu1e, lr, measure, loss)
                if mode == PAIRS:
                    _add_rows(syn0, rows, row_offsets, contexts[m:], 1, neu1e)
                else:
                    total += neu1e
            if mode != PAIRS:
                _add_rows(syn0, rows, row_offsets, contexts[m:], 1, total)
        seen += stop - start
    return state


@njit(cache=True, nogil=True, fastmath=True)
def _mean_rows(syn0, rows, row_offsets, words, m, h):  # fmt: skip
    """``h`` = the mean of every input row of ``words[:m]``."""
    h[:] = 0.0
    count = 0
    for j in range(m):
        for r in range(row_offsets[words[j]], row_offsets[words[j] + 1]):
            row = syn0[rows[r]]
            for d in range(h.shape[0]):
                h[d] += row[d]
            count += 1
    scale = np.float32(1.0 / max(count, 1))
    for d in range(h.shape[0]):
        h[d] *= scale


@njit(cache=True, nogil=True, fastmath=True)
def _add_rows(syn0, rows, row_offsets, words, m, delta):  # fmt: skip
    """Add ``delta`` to every input row of ``words[:m]``."""
    for j in range(m):
        for r in range(row_offsets[words[j]], row_offsets[words[j] + 1]):
            row = syn0[rows[r]]
            for d in range(delta.shape[0]):
                row[d] += delta[d]


def shard_bounds(offsets: np.ndarray, shards: int) -> list[tuple[int, int]]:
    """Split sentences ``0 .. len(offsets) - 2`` into ``shards`` runs of about equal tokens:
    ``[(first, stop), ...]`` (a shard may be empty on a corpus of fewer sentences)."""
    sentences = len(offsets) - 1
    total = int(offsets[-1] - offsets[0])
    cuts = [0]
    for s in range(1, shards):
        cut = (
            int(np.searchsorted(offsets, offsets[0] + total * s / shards, side="right")) - 1
        )  # the sentence holding that token
        cuts.append(min(max(cut, cuts[-1]), sentences))
    cuts.append(sentences)
    return list(zip(cuts[:-1], cuts[1:], strict=True))


@dataclasses.dataclass
class KernelModel:
    """The matrices the kernel trains, and what it reads.

    Attributes:
        syn0: ``(V, dim)`` float32 input vectors (C-contiguous; trained in place).
        out: ``(output.rows, dim)`` float32 output vectors (in place).
        output: the output layer (noise table, Huffman codes).
        keep: ``(V,)`` float64 sub-sampling keep probabilities.
        subwords: each word's input rows (fastText: its own and its n-grams'), or None: word
            ``w`` reads row ``w``.
    """

    syn0: np.ndarray
    out: np.ndarray
    output: OutputLayer
    keep: np.ndarray
    subwords: Subwords | None = None

    @classmethod
    def create(
        cls,
        input_matrix: np.ndarray,
        output: OutputLayer,
        counts: np.ndarray,
        sample: float,
        output_matrix: np.ndarray | None = None,
        subwords: Subwords | None = None,
    ) -> KernelModel:
        syn0 = np.array(input_matrix, np.float32, order="C", copy=True)
        dim = syn0.shape[1]
        out = (
            np.zeros((output.rows, dim), np.float32)
            if output_matrix is None
            else np.array(output_matrix, np.float32, order="C", copy=True)
        )
        if subwords is not None:
            subwords = Subwords(
                np.ascontiguousarray(subwords.rows, np.int32), np.ascontiguousarray(subwords.offsets, np.int64)
            )
        return cls(syn0, out, output, np.ascontiguousarray(keep_probabilities(counts, sample), np.float64), subwords)

    def arrays(self) -> tuple[Any, ...]:
        """The table and Huffman arguments of :func:`_train_shard`."""
        output = self.output
        table = output.noise if output.negative and output.noise is not None else np.zeros(1, np.int32)
        if output.huffman is not None:
            codes, points, path_offsets = output.huffman.codes, output.huffman.points, output.huffman.offsets
        else:
            codes, points, path_offsets = np.zeros(0, np.uint8), np.zeros(0, np.int32), np.zeros(0, np.int64)
        hs_base = output.vocabulary_size if output.negative else 0
        return (
            np.ascontiguousarray(table, np.int32),
            np.ascontiguousarray(codes, np.uint8),
            np.ascontiguousarray(points, np.int32),
            np.ascontiguousarray(path_offsets, np.int64),
            int(hs_base),
        )


def train_epoch(model: KernelModel, tokens: EncodedCorpus, schedule: KernelSchedule, epoch: int) -> tuple[float, float]:
    """Train epoch ``epoch`` (0-based) on ``schedule.threads`` threads, one shard each.

    Returns:
        ``(summed item log loss, items measured)`` of the measured windows (:data:`LOSS_EVERY`).
    """
    ids = np.ascontiguousarray(tokens.ids, np.int32)
    offsets = np.ascontiguousarray(tokens.offsets, np.int64)
    table, codes, points, path_offsets, hs_base = model.arrays()
    shards = shard_bounds(offsets, max(1, schedule.threads))
    losses = np.zeros((len(shards), 2), np.float64)
    failures: list[BaseException] = []
    lo, hi = epoch / schedule.epochs, (epoch + 1) / schedule.epochs

    def run(shard: int) -> None:
        first, stop = shards[shard]
        if first >= stop:
            return
        try:
            layer = (table, codes, points, path_offsets, hs_base, model.output.negative)
            settings = (bool(schedule.cbow), int(schedule.mode), int(schedule.window))
            rates = (float(schedule.alpha), float(schedule.min_alpha), lo, hi)
            seed = thread_seed(schedule.seed, epoch, shard)
            if model.subwords is None:
                _train_shard(
                    model.syn0,
                    model.out,
                    ids,
                    offsets,
                    (first, stop),
                    model.keep,
                    layer,
                    settings,
                    rates,
                    seed,
                    losses[shard],
                )
            else:
                subwords = (model.subwords.rows, model.subwords.offsets)
                _train_shard_subwords(
                    model.syn0,
                    model.out,
                    ids,
                    offsets,
                    (first, stop),
                    model.keep,
                    layer,
                    settings,
                    rates,
                    subwords,
                    seed,
                    losses[shard],
                )
        except BaseException as error:  # re-raised on the calling thread
            failures.append(error)

    if len(shards) == 1:
        run(0)
    else:
        threads = [
            threading.Thread(target=run, args=(s,), name=f"ptmkit-w2v-{s}", daemon=True) for s in range(len(shards))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if failures:
        raise failures[0]
    return float(losses[:, 0].sum()), float(losses[:, 1].sum())


def kernel_fingerprint(
    tokens: EncodedCorpus, counts: np.ndarray, input_matrix: np.ndarray, output: OutputLayer, schedule: KernelSchedule
) -> dict[str, Any]:
    """What a checkpoint of the kernel must match to be resumed: the vocabulary, the encoded
    corpus, the matrix shapes, the output layer and the schedule (the threads may change)."""
    from ptmkit.wordvectors.training import tokens_sha1, vocabulary_fingerprint

    settings = {key: value for key, value in dataclasses.asdict(schedule).items() if key != "threads"}
    return {
        **vocabulary_fingerprint(counts),
        "tokens_sha1": tokens_sha1(tokens),
        "input_shape": list(input_matrix.shape),
        "output_rows": output.rows,
        "negative": output.negative,
        "hs": output.huffman is not None,
        "kernel": settings,
    }


def train_kernel(
    tokens: EncodedCorpus,
    counts: np.ndarray,
    output: OutputLayer,
    input_matrix: np.ndarray,
    schedule: KernelSchedule,
    report: Callable[[str], Any] | None = None,
    checkpoints: Any = None,
    source: str = "corpus",
    subwords: Subwords | None = None,
) -> tuple[KernelModel, dict[str, Any]]:
    """Train input and output vectors on ``tokens`` with the compiled kernel (word2vec; with
    ``subwords``, fastText's skip-gram and CBOW with negative sampling).

    Args:
        tokens: the encoded corpus.
        counts: ``(V,)`` word counts (sub-sampling).
        output: negative sampling and/or hierarchical softmax.
        input_matrix: ``(V, dim)`` float32 initial input vectors (output vectors start at 0);
            with ``subwords``, ``(rows, dim)``.
        schedule: architecture, window, epochs, learning rate, threads.
        report: called with one progress line per epoch.
        checkpoints: an :class:`ptmkit.wordvectors.training.EpochCheckpoints` (save the
            matrices ``input`` and ``output`` at epoch ends; with ``resume``, start from them).
        source: the corpus's name in error messages.
        subwords: each word's input rows (its own and its character n-grams'), or None.

    Returns:
        ``(model, stats)``: the model holds the trained matrices; ``stats`` as
        :func:`ptmkit.wordvectors.training.train_word_prediction` gives them (``steps``: the
        corpus passes' token count, ``final_loss``: the mean item log loss of the last epoch's
        measured windows).

    Raises:
        RunDirError: ``checkpoints.resume`` without a usable checkpoint of this run.
        DataError: no training pair (a corpus of one-word sentences, or sub-sampling dropped
            every word).
    """
    from ptmkit.wordvectors.training import ResumableEpochs

    loop = ResumableEpochs(
        schedule.epochs,
        schedule.seed,
        checkpoints,
        lambda: kernel_fingerprint(tokens, counts, input_matrix, output, schedule),
        report,
    )
    state = loop.resume({"input": input_matrix.shape, "output": (output.rows, input_matrix.shape[1])}) or {
        "input": input_matrix,
        "output": None,
    }
    model = KernelModel.create(state["input"], output, counts, schedule.sample, state["output"], subwords)
    loop.start()
    loss, items = 0.0, 0.0
    for epoch in loop.run(lambda: {"input": model.syn0.copy(), "output": model.out.copy()}):
        began = time.perf_counter()
        loss, items = train_epoch(model, tokens, schedule, epoch)
        if report is not None:
            rate = tokens.raw_tokens / max(time.perf_counter() - began, 1e-9)
            shown = f"{loss / items:.4f}" if items else "-"
            report(f"epoch {epoch + 1}/{schedule.epochs}: loss {shown}, {rate:,.0f} words/s")
    seconds = loop.seconds()
    epochs_run = schedule.epochs - loop.start_epoch
    if epochs_run and not items:
        raise _no_pairs_error(source, tokens, schedule, epochs_run)
    raw_words = tokens.raw_tokens * epochs_run
    stats: dict[str, Any] = {
        "train_seconds": round(seconds, 2),
        "words_per_second": round(raw_words / max(seconds, 1e-9), 1),
        "raw_words": raw_words,
        "steps": int(len(tokens.ids)) * epochs_run,
        "final_loss": round(loss / items, 4) if items else None,
        "threads": schedule.threads,
        **loop.stats(seconds),
    }
    return model, stats


def _no_pairs_error(source: str, tokens: EncodedCorpus, schedule: KernelSchedule, epochs_run: int) -> Exception:
    """The :class:`~ptmkit.errors.DataError` of a run that trained no pair of words."""
    from ptmkit.errors import DataError

    return DataError(
        f"{source}: no training example in {epochs_run} epoch(s): sub-sampling (model.sample = {schedule.sample:g}) and the window left no pair of words "
        f"in {len(tokens.ids):,} tokens; on a corpus this small set --set model.sample=0"
    )


def cpu_threads(threads: int) -> int:
    """``threads``, or with 0 the CPU cores this process may use."""
    import os

    if threads > 0:
        return threads
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def resolve_backend(backend: str) -> str:
    """The training path of ``model.backend``: ``cpu-kernel`` or ``keras`` as given; ``auto``:
    ``keras`` when TensorFlow sees a GPU (the batched XLA step suits it), else ``cpu-kernel``."""
    if backend != "auto":
        return backend
    import tensorflow as tf

    return "keras" if tf.config.list_physical_devices("GPU") else "cpu-kernel"
