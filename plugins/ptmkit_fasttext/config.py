"""fastText hyper-parameters (the ``[model]`` section of a run config)."""

from __future__ import annotations

import dataclasses

from ptmkit.api import ConfigError, check_choice, check_non_negative, check_positive

ARCHITECTURES = ("skipgram", "cbow")


@dataclasses.dataclass
class FastTextConfig:
    """fastText's unsupervised models (Bojanowski et al. 2017), with gensim 4.4's ``FastText``
    defaults for the learning rate and sub-sampling (``alpha = 0.025``, ``sample = 1e-3``) and
    fastText's for the rest.

    Attributes:
        architecture: ``skipgram`` (a word's subwords predict its neighbours) or ``cbow`` (the
            mean of the window's subwords predicts the word).
        vector_size: dimensions.
        window: largest context distance (dynamic window, as word2vec).
        min_count: words occurring fewer times are dropped.
        max_vocab: keep at most this many words (0: no limit).
        minn: shortest character n-gram (``<`` and ``>`` mark the word's ends).
        maxn: longest character n-gram (0: no n-grams, word2vec with fastText's init).
        bucket: hash buckets for n-grams (rows after the word rows).
        sample: sub-sampling threshold (word2vec's formula, as gensim's FastText).
        negative: noise words per example.
        ns_exponent: exponent of the noise distribution.
        batch_size: examples per SGD step; a skip-gram example is a center word (its n-gram
            rows) with all the words of its window, a CBOW example a window. 128 by default:
            a step's gathered bags (about 24 rows a center) stay in cache; 2,048 centers a step
            took twice as long on the same work.
        updates_per_call: SGD steps per call of the compiled step (0: about 32,000 pairs a
            call; see :class:`ptmkit_word2vec.Word2VecConfig`).
        shared_negatives: skip-gram draws the ``negative`` noise words once per window, shared
            by its targets (Ji et al. 2016): the same update as drawing them per pair when each
            pair happens to draw the window's, with ``T + k`` output rows a window instead of
            ``T (1 + k)``; off: each pair draws its own (fastText).
        epochs: passes over the corpus.
        alpha: initial learning rate, decaying linearly to ``min_alpha`` over all epochs.
        min_alpha: final learning rate.
        hot_row_limit: a row updated ``n`` times in one batch, ``n`` above this, gets this
            ``/ n`` of each update, so that frequent words and n-grams cannot diverge (0: off).
        lowercase: lower-case the corpus before counting and training.
        seed: initial vectors, windows, sub-sampling and noise words.
        jit_compile: XLA-compile the SGD step of the ``keras`` backend (much faster on CPU).
        backend: the training path. ``cpu-kernel``: compiled loops (numba) on ``threads``
            threads updating shared matrices without locks, as fastText does
            (:mod:`ptmkit.wordvectors.kernel`); skip-gram takes the mean of a center word's rows
            once per window and adds the window's error to them once (Ji et al. 2016's windows;
            each context word draws its own noise words). ``keras``: the mini-batch SGD step
            (``batch_size``, ``updates_per_call``, ``shared_negatives``, ``hot_row_limit`` and
            ``jit_compile`` apply to it alone). ``auto``: ``keras`` when TensorFlow sees a GPU,
            else ``cpu-kernel``.
        threads: threads of the ``cpu-kernel`` backend, one corpus shard each (0: the CPU
            cores this process may use); one thread is reproducible bit for bit.
        checkpoint_seconds: save the vectors at the end of an epoch once this many seconds of
            training have passed since the last save (0: after every epoch), in the run's
            ``checkpoint/``; ``ptmkit train ... --resume`` continues an interrupted run from there.
    """

    architecture: str = "skipgram"
    vector_size: int = 100
    window: int = 5
    min_count: int = 5
    max_vocab: int = 0
    minn: int = 3
    maxn: int = 6
    bucket: int = 2_000_000
    sample: float = 1e-3
    negative: int = 5
    ns_exponent: float = 0.75
    epochs: int = 5
    alpha: float = 0.025
    min_alpha: float = 0.0001
    batch_size: int = 128
    updates_per_call: int = 0
    shared_negatives: bool = True
    hot_row_limit: float = 64.0
    lowercase: bool = False
    seed: int = 1
    jit_compile: bool = True
    backend: str = "auto"
    threads: int = 0
    checkpoint_seconds: float = 60.0

    def validate(self) -> None:
        check_choice(self, "model", "architecture", ARCHITECTURES)
        check_choice(self, "model", "backend", ("auto", "cpu-kernel", "keras"))
        check_positive(self, "model", "vector_size", "window", "min_count", "epochs", "batch_size", "negative")
        check_non_negative(self, "model", "max_vocab", "minn", "maxn", "bucket", "sample", "alpha", "min_alpha", "hot_row_limit", "updates_per_call", "threads", "checkpoint_seconds")
        if self.maxn and (self.minn < 1 or self.minn > self.maxn):
            raise ConfigError(f"config keys 'model.minn' = {self.minn} and 'model.maxn' = {self.maxn}: need 1 <= minn <= maxn (or maxn = 0)")
        if self.maxn and not self.bucket:
            raise ConfigError("config key 'model.bucket' = 0 leaves n-grams nowhere to go; set maxn = 0 too, or bucket > 0")
