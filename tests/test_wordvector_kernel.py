"""The compiled word2vec kernel (ptmkit.wordvectors.kernel) against a NumPy transcription of
word2vec.c's ``TrainModelThread`` (its per-pair skip-gram and CBOW updates, negative sampling and
hierarchical softmax, sub-sampling, the dynamic window and its random numbers), and of Ji et al.
2016's HogBatch window update: the same matrices to 1e-6 after two epochs on a tiny corpus, one
thread, a fixed seed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ptmkit.wordvectors import kernel
from ptmkit.wordvectors.vocabulary import EncodedCorpus, huffman_codes, keep_probabilities, noise_table
from ptmkit.wordvectors.word_prediction import OutputLayer

MASK = (1 << 64) - 1
MAX_EXP = 6.0


def lcg(state: int) -> int:
    """word2vec.c: ``next_random = next_random * (unsigned long long)25214903917 + 11``."""
    return (state * 25214903917 + 11) & MASK


def gradient(f: float, label: float, lr: float, hs: bool) -> float | None:
    """word2vec.c's ``g``: hierarchical softmax skips ``f`` outside (-6, 6) (None); negative
    sampling clamps the sigmoid there. The sigmoid itself is exact (word2vec.c: ``expTable``)."""
    if hs and (f <= -MAX_EXP or f >= MAX_EXP):
        return None
    if not hs and f > MAX_EXP:
        return (label - 1.0) * lr
    if not hs and f < -MAX_EXP:
        return label * lr
    return (label - 1.0 / (1.0 + math.exp(-f))) * lr


def items(word: int, output: OutputLayer, state: int) -> tuple[list[tuple[int, float, bool]], int]:
    """The output rows ``word`` is predicted with: its Huffman path (``hs_base + point``, label
    ``1 - code``), then itself (label 1) and ``negative`` noise words from the table
    (``table[(next_random >> 16) % table_size]``, a draw equal to ``word`` skipped)."""
    found = []
    if output.huffman is not None:
        base = output.vocabulary_size if output.negative else 0
        h = output.huffman
        for p in range(h.offsets[word], h.offsets[word + 1]):
            found.append((base + int(h.points[p]), 1.0 - float(h.codes[p]), True))
    if output.negative:
        found.append((word, 1.0, False))
        for _ in range(output.negative):
            state = lcg(state)
            target = int(output.noise[(state >> 16) % len(output.noise)])
            if target != word:
                found.append((target, 0.0, False))
    return found, state


def update(h: np.ndarray, out: np.ndarray, found: list[tuple[int, float, bool]], lr: float) -> np.ndarray:
    """word2vec.c's inner loop over one input vector ``h``: each output row in turn,
    ``neu1e += g * row`` then ``row += g * h``; returns ``neu1e``."""
    neu1e = np.zeros_like(h)
    for row, label, hs in found:
        g = gradient(float(np.dot(h, out[row])), label, lr, hs)
        if g is None:
            continue
        g = np.float32(g)
        neu1e += g * out[row]
        out[row] += g * h
    return neu1e


def reference_epoch(syn0, out, tokens, keep, output, schedule, epoch, state):  # noqa: ANN001 - a transcription
    """One thread's epoch, as word2vec.c's ``TrainModelThread`` runs it (HogBatch for skip-gram
    windows when ``schedule.mode`` says so)."""
    total = int(tokens.offsets[-1])
    lo, hi = epoch / schedule.epochs, (epoch + 1) / schedule.epochs
    seen = 0
    for s in range(len(tokens.offsets) - 1):
        start, stop = int(tokens.offsets[s]), int(tokens.offsets[s + 1])
        lr = max(
            schedule.min_alpha, schedule.alpha - (schedule.alpha - schedule.min_alpha) * (lo + (hi - lo) * seen / total)
        )
        seen += stop - start
        sentence = []
        for word in tokens.ids[start:stop]:
            if schedule.sample > 0:
                state = lcg(state)
                if keep[word] < ((state >> 16) & 0xFFFF) / 65536.0:
                    continue
            sentence.append(int(word))
        for pos, word in enumerate(sentence):
            state = lcg(state)
            b = (state >> 16) % schedule.window  # gensim's bits (word2vec.c: next_random % window)
            contexts = [
                sentence[c]
                for a in range(b, 2 * schedule.window + 1 - b)
                if a != schedule.window and 0 <= (c := pos - schedule.window + a) < len(sentence)
            ]
            if not contexts:
                continue
            if schedule.cbow:
                neu1 = np.mean(np.stack([syn0[c] for c in contexts]), axis=0, dtype=np.float32)
                found, state = items(word, output, state)
                neu1e = update(neu1, out, found, lr)
                for c in contexts:
                    syn0[c] += neu1e
            elif schedule.mode == kernel.PAIRS:
                for c in contexts:
                    found, state = items(word, output, state)
                    syn0[c] += update(syn0[c].copy(), out, found, lr)
            else:  # HogBatch: C (m, dim), O (k, dim) from one point; C += G O, O += G^T C
                found, state = items(word, output, state)
                rows = [row for row, _, _ in found]
                inputs, outputs = syn0[contexts].copy(), out[rows].copy()
                grads = np.array(
                    [
                        [
                            gradient(float(np.dot(x, o)), label, lr, hs) or 0.0
                            for o, (_, label, hs) in zip(outputs, found, strict=True)
                        ]
                        for x in inputs
                    ],
                    np.float32,
                )
                for j, c in enumerate(contexts):
                    for i in range(len(rows)):
                        syn0[c] += grads[j, i] * outputs[i]
                for i, row in enumerate(rows):
                    for j in range(len(contexts)):
                        out[row] += grads[j, i] * inputs[j]
    return state


def tiny_corpus(seed: int = 0) -> tuple[EncodedCorpus, np.ndarray]:
    """40 sentences of 3-14 words over 25 Zipf-distributed words (word 0 the most frequent)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 15, size=40)
    ranks = np.arange(1, 26)
    ids = rng.choice(25, size=int(lengths.sum()), p=(1 / ranks) / (1 / ranks).sum()).astype(np.int32)
    counts = np.bincount(ids, minlength=25).astype(np.int64)
    order = np.argsort(-counts, kind="stable")  # ids by frequency, as the vocabulary numbers them
    ids = np.argsort(order)[ids].astype(np.int32)
    return EncodedCorpus(ids, np.r_[0, np.cumsum(lengths)].astype(np.int64), len(ids)), counts[order]


CASES = {
    "skip-gram pairs, negative sampling + hierarchical softmax": dict(
        cbow=False, mode=kernel.PAIRS, negative=3, hs=True
    ),
    "skip-gram pairs, hierarchical softmax": dict(cbow=False, mode=kernel.PAIRS, negative=0, hs=True),
    "CBOW, negative sampling + hierarchical softmax": dict(cbow=True, mode=kernel.PAIRS, negative=3, hs=True),
    "skip-gram HogBatch, negative sampling + hierarchical softmax": dict(
        cbow=False, mode=kernel.HOGBATCH, negative=3, hs=True
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_kernel_equals_a_numpy_transcription_of_word2vec_c(case: str) -> None:
    settings = CASES[case]
    tokens, counts = tiny_corpus()
    vocabulary = len(counts)
    output = OutputLayer(
        vocabulary,
        settings["negative"],
        noise_table(counts, 0.75, 1000) if settings["negative"] else None,
        huffman_codes(counts) if settings["hs"] else None,
    )
    schedule = kernel.KernelSchedule(
        cbow=settings["cbow"],
        window=3,
        epochs=2,
        alpha=0.1,
        min_alpha=0.01,
        sample=0.05,
        seed=7,
        threads=1,
        mode=settings["mode"],
    )
    rng = np.random.default_rng(3)
    syn0 = ((rng.random((vocabulary, 8), dtype=np.float32) - 0.5) / 8).astype(np.float32)
    out = (rng.standard_normal((output.rows, 8)) * 0.1).astype(np.float32)
    keep = keep_probabilities(counts, schedule.sample)
    assert 0.2 < keep.min() < 1.0  # sub-sampling drops some words

    model = kernel.KernelModel.create(syn0, output, counts, schedule.sample, out)
    expected_syn0, expected_out = syn0.copy(), out.copy()
    for epoch in range(schedule.epochs):
        kernel.train_epoch(model, tokens, schedule, epoch)
        reference_epoch(
            expected_syn0,
            expected_out,
            tokens,
            keep,
            output,
            schedule,
            epoch,
            int(kernel.thread_seed(schedule.seed, epoch, 0)),
        )
    assert np.abs(expected_syn0 - syn0).max() > 0.05 and np.abs(expected_out - out).max() > 0.05  # it learned
    np.testing.assert_allclose(model.syn0, expected_syn0, rtol=0, atol=1e-6)
    np.testing.assert_allclose(model.out, expected_out, rtol=0, atol=1e-6)


def test_shards_split_the_sentences_by_tokens() -> None:
    offsets = np.array([0, 10, 20, 30, 100], np.int64)
    assert kernel.shard_bounds(offsets, 1) == [(0, 4)]
    assert kernel.shard_bounds(offsets, 2) == [(0, 3), (3, 4)]  # the long sentence alone
    assert kernel.shard_bounds(np.array([0, 5], np.int64), 2) == [(0, 0), (0, 1)]


def test_two_threads_train_as_well_as_one() -> None:
    """Hogwild on two shards: not the one-thread matrices, but a loss as low."""
    tokens, counts = tiny_corpus(1)
    tokens = EncodedCorpus(
        np.tile(tokens.ids, 20),
        np.r_[0, np.cumsum(np.tile(np.diff(tokens.offsets), 20))].astype(np.int64),
        len(tokens.ids) * 20,
    )
    output = OutputLayer(len(counts), 5, noise_table(counts), None)
    initial = ((np.random.default_rng(0).random((len(counts), 16), dtype=np.float32) - 0.5) / 16).astype(np.float32)
    losses = {}
    for threads in (1, 2):
        schedule = kernel.KernelSchedule(window=3, epochs=3, sample=0, threads=threads)
        model, stats = kernel.train_kernel(tokens, counts, output, initial, schedule)
        losses[threads] = stats["final_loss"]
        assert stats["threads"] == threads and np.isfinite(model.syn0).all()
    assert losses[2] < np.log(2) * 0.9 and abs(losses[2] - losses[1]) < 0.02, losses


def reference_epoch_subwords(syn0, out, tokens, keep, output, schedule, subwords, epoch, state):  # noqa: ANN001 - a transcription
    """One thread's fastText epoch (``Model::update``: the mean of a word's rows predicts,
    every row gets the whole error), skip-gram per pair (:data:`kernel.PAIRS`) or per window
    (:data:`kernel.HOGBATCH`), or CBOW over all the context words' rows."""

    def rows_of(words: list[int]) -> list[int]:
        return [int(r) for w in words for r in subwords.rows[subwords.offsets[w] : subwords.offsets[w + 1]]]

    def mean(rows: list[int]) -> np.ndarray:  # summed in order, then scaled (as fastText's Vector::addRow, mul)
        h = np.zeros(syn0.shape[1], np.float32)
        for r in rows:
            h += syn0[r]
        return h * np.float32(1.0 / len(rows))

    total = int(tokens.offsets[-1])
    lo, hi = epoch / schedule.epochs, (epoch + 1) / schedule.epochs
    seen = 0
    for s in range(len(tokens.offsets) - 1):
        start, stop = int(tokens.offsets[s]), int(tokens.offsets[s + 1])
        lr = max(schedule.min_alpha, schedule.alpha - (schedule.alpha - schedule.min_alpha) * (lo + (hi - lo) * seen / total))
        seen += stop - start
        sentence = []
        for word in tokens.ids[start:stop]:
            state = lcg(state)
            if keep[word] >= ((state >> 16) & 0xFFFF) / 65536.0:
                sentence.append(int(word))
        for pos, word in enumerate(sentence):
            state = lcg(state)
            b = (state >> 16) % schedule.window  # gensim's bits (word2vec.c: next_random % window)
            contexts = [sentence[c] for a in range(b, 2 * schedule.window + 1 - b) if a != schedule.window and 0 <= (c := pos - schedule.window + a) < len(sentence)]
            if not contexts:
                continue
            if schedule.cbow:
                rows = rows_of(contexts)
                found, state = items(word, output, state)
                neu1e = update(mean(rows), out, found, lr)
                for r in rows:
                    syn0[r] += neu1e
                continue
            rows, window_error = rows_of([word]), np.zeros(syn0.shape[1], np.float32)
            h = mean(rows)
            for c in contexts:
                if schedule.mode == kernel.PAIRS:
                    h = mean(rows)
                found, state = items(c, output, state)
                neu1e = update(h, out, found, lr)
                if schedule.mode == kernel.PAIRS:
                    for r in rows:
                        syn0[r] += neu1e
                else:
                    window_error += neu1e
            if schedule.mode != kernel.PAIRS:
                for r in rows:
                    syn0[r] += window_error
    return state


@pytest.mark.parametrize("case", ["skip-gram pairs", "skip-gram windows", "CBOW"])
def test_the_subword_kernel_equals_a_numpy_transcription_of_fasttext(case: str) -> None:
    from ptmkit.wordvectors.word_prediction import Subwords

    tokens, counts = tiny_corpus()
    vocabulary = len(counts)
    rng = np.random.default_rng(5)
    # each word: its own row and 2 of 10 "n-gram" bucket rows
    rows = np.concatenate([[w, *(vocabulary + rng.choice(10, 2, replace=False))] for w in range(vocabulary)]).astype(np.int32)
    subwords = Subwords(rows, np.arange(0, 3 * vocabulary + 1, 3, dtype=np.int64))
    output = OutputLayer(vocabulary, 3, noise_table(counts, 0.75, 1000), None)
    mode = kernel.PAIRS if case == "skip-gram pairs" else kernel.HOGBATCH
    schedule = kernel.KernelSchedule(cbow=case == "CBOW", window=3, epochs=2, alpha=0.1, min_alpha=0.01, sample=0.05, seed=3, threads=1, mode=mode)
    syn0 = ((rng.random((vocabulary + 10, 8), dtype=np.float32) - 0.5) / 8).astype(np.float32)
    out = (rng.standard_normal((output.rows, 8)) * 0.1).astype(np.float32)
    model = kernel.KernelModel.create(syn0, output, counts, schedule.sample, out, subwords)
    expected_syn0, expected_out = syn0.copy(), out.copy()
    keep = keep_probabilities(counts, schedule.sample)
    for epoch in range(schedule.epochs):
        kernel.train_epoch(model, tokens, schedule, epoch)
        seed = int(kernel.thread_seed(schedule.seed, epoch, 0))
        reference_epoch_subwords(expected_syn0, expected_out, tokens, keep, output, schedule, subwords, epoch, seed)
    assert np.abs(expected_syn0 - syn0).max() > 0.05 and np.abs(expected_out - out).max() > 0.05  # it learned
    np.testing.assert_allclose(model.syn0, expected_syn0, rtol=0, atol=1e-6)
    np.testing.assert_allclose(model.out, expected_out, rtol=0, atol=1e-6)
