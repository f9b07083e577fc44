"""word2vec hyper-parameters (the ``[model]`` section of a run config)."""

from __future__ import annotations

import dataclasses

from ptmkit.api import ConfigError, check_choice, check_non_negative, check_positive

ARCHITECTURES = ("skipgram", "cbow")
BATCHING = ("auto", "pairs", "windows")
BACKENDS = ("auto", "cpu-kernel", "keras")


@dataclasses.dataclass
class Word2VecConfig:
    """word2vec (Mikolov et al. 2013a, 2013b), with gensim 4.4's defaults where it has one.

    Attributes:
        architecture: ``skipgram`` (a word predicts its neighbours) or ``cbow`` (the mean of the
            neighbours predicts the word; gensim's ``sg=0``).
        vector_size: dimensions of the word vectors.
        window: largest distance between a word and a context word; each position draws its
            own window in ``1 .. window`` (the dynamic window).
        min_count: words occurring fewer times are dropped before training.
        max_vocab: keep at most this many words, the most frequent (0: no limit).
        sample: sub-sampling threshold ``t`` of frequent words (0: off).
        negative: noise words per example for negative sampling (0: off).
        ns_exponent: exponent of the unigram noise distribution.
        hs: hierarchical softmax over a Huffman tree (alone with ``negative = 0``, or both).
        epochs: passes over the corpus.
        alpha: initial learning rate, decaying linearly to ``min_alpha`` over all epochs.
        min_alpha: final learning rate.
        batch_size: examples (word pairs for skip-gram, windows for CBOW and for skip-gram
            with ``batching = windows``) per SGD step, all updated from the same parameters; 0
            picks 1,024 skip-gram pairs, 256 CBOW windows, 192 skip-gram windows (96 with
            hierarchical softmax). Larger batches move frequent vectors many steps at once:
            skip-gram's WordSim-353 falls from 0.20 at 4,096 to 0.16 at 16,384.
        updates_per_call: SGD steps per call of the compiled step (an XLA loop runs them one
            after the other, each from the parameters the previous one wrote); 0 picks about
            32,000 pairs a call. Small steps in long calls keep each step's rows in the CPU's
            cache and pay the call's fixed cost (~0.5 ms) once.
        batching: how skip-gram examples are batched. ``pairs``: one example per (center,
            context) pair, each with its own ``negative`` noise words. ``windows``: one example
            per center word, its context words predicting it side by side and sharing its
            output rows (its Huffman path; the center and ``negative`` noise words drawn once
            per window, as in Ji et al. 2016), each output row gathered and updated once per
            window; with hierarchical softmax alone this is the same gradient as ``pairs``.
            ``batch_size`` then counts windows. ``auto``: on the ``keras`` backend ``windows``
            for hierarchical softmax without negatives, else ``pairs``; on the ``cpu-kernel``
            backend ``windows``. CBOW always has one example per window.
        hot_row_limit: a vector updated ``n`` times in one batch, ``n`` above this, gets this
            ``/ n`` of each update, so that frequent words cannot diverge (0: off).
        lowercase: lower-case the corpus before counting and training.
        seed: initial vectors, windows, sub-sampling and noise words.
        jit_compile: XLA-compile the SGD step of the ``keras`` backend (much faster on CPU).
        backend: the training path. ``cpu-kernel``: compiled loops (numba) on ``threads``
            threads updating shared matrices without locks, as word2vec.c and gensim do
            (:mod:`ptmkit.wordvectors.kernel`); skip-gram with ``batching`` = ``windows`` or
            ``auto`` updates a window at a time with its output rows shared (HogBatch, Ji et al.
            2016), ``pairs`` one pair at a time (word2vec.c). ``keras``: the mini-batch SGD step
            (XLA on CPU or GPU; ``batch_size``, ``updates_per_call``, ``hot_row_limit`` and
            ``jit_compile`` apply to it alone). ``auto``: ``keras`` when TensorFlow sees a
            GPU, else ``cpu-kernel``.
        threads: threads of the ``cpu-kernel`` backend, one corpus shard each (0: the CPU
            cores this process may use). One thread is reproducible bit for bit; several
            interleave their updates as they run (equal in distribution, like gensim's
            ``workers``).
        checkpoint_seconds: save the vectors at the end of an epoch once this many seconds of
            training have passed since the last save (0: after every epoch), in the run's
            ``checkpoint/``; ``ptmkit train ... --resume`` continues an interrupted run from there.
    """

    architecture: str = "skipgram"
    vector_size: int = 100
    window: int = 5
    min_count: int = 5
    max_vocab: int = 0
    sample: float = 1e-3
    negative: int = 5
    ns_exponent: float = 0.75
    hs: bool = False
    epochs: int = 5
    alpha: float = 0.025
    min_alpha: float = 0.0001
    batch_size: int = 0
    updates_per_call: int = 0
    batching: str = "auto"
    hot_row_limit: float = 64.0
    lowercase: bool = False
    seed: int = 1
    jit_compile: bool = True
    backend: str = "auto"
    threads: int = 0
    checkpoint_seconds: float = 60.0

    def validate(self) -> None:
        check_choice(self, "model", "architecture", ARCHITECTURES)
        check_choice(self, "model", "batching", BATCHING)
        check_choice(self, "model", "backend", BACKENDS)
        check_positive(self, "model", "vector_size", "window", "min_count", "epochs")
        check_non_negative(self, "model", "max_vocab", "negative", "sample", "alpha", "min_alpha", "hot_row_limit", "batch_size", "updates_per_call", "threads", "checkpoint_seconds")
        if not self.negative and not self.hs:
            raise ConfigError("config keys 'model.negative' = 0 and 'model.hs' = false leave no output layer; set one")
        if self.min_alpha > self.alpha:
            raise ConfigError(f"config key 'model.min_alpha' = {self.min_alpha} exceeds 'model.alpha' = {self.alpha}")
