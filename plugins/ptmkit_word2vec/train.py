"""word2vec training: vocabulary, encoded corpus, then skip-gram or CBOW with negative sampling
and/or hierarchical softmax through ptmkit's shared word-prediction objective.

Reference implementation: word2vec.c (Mikolov et al. 2013), as gensim 4.4 reproduces it. Two
paths (``model.backend``): the compiled CPU kernel (:mod:`ptmkit.wordvectors.kernel`: Hogwild
threads, word2vec.c's per-pair updates or Ji et al. 2016's HogBatch windows), and the Keras/XLA
mini-batch step (differences listed in :mod:`ptmkit.wordvectors.word_prediction`).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from ptmkit.api import (
    VECTORS_FILE,
    VOCABULARY_FILE,
    EpochCheckpoints,
    KernelSchedule,
    OutputLayer,
    SGDSchedule,
    WindowExamples,
    auto_updates_per_call,
    cpu_threads,
    huffman_codes,
    noise_table,
    prepare_corpus,
    resolve_backend,
    save_matrix,
    train_kernel,
    train_word_prediction,
)
from ptmkit_word2vec.config import Word2VecConfig


def train_word2vec(corpus: Path, run_dir: Path, config: Word2VecConfig, console: Console, resume: bool = False) -> dict[str, Any]:
    """Train word2vec on ``corpus``; write ``vocabulary.tsv`` and ``vectors.npy`` (``(V,
    vector_size)`` float32, the input vectors, word2vec's ``syn0``) to ``run_dir``.

    Raises:
        DataError: an empty corpus, blank lines only, or no word surviving ``min_count``.
    """
    from ptmkit.api import quiet_tensorflow

    quiet_tensorflow()
    vocabulary, tokens = prepare_corpus(corpus, run_dir, config.min_count, config.max_vocab, config.lowercase, console)
    size = len(vocabulary)
    rng = np.random.default_rng(config.seed)
    # word2vec.c: uniform in [-0.5, 0.5) / vector_size; output vectors start at zero.
    initial = ((rng.random((size, config.vector_size), dtype=np.float32) - 0.5) / config.vector_size).astype(np.float32)
    output = OutputLayer(
        size,
        config.negative,
        noise_table(vocabulary.counts, config.ns_exponent) if config.negative else None,
        huffman_codes(vocabulary.counts) if config.hs else None,
    )
    checkpoints = EpochCheckpoints.of_run(run_dir, config.checkpoint_seconds, resume)
    if resolve_backend(config.backend) == "cpu-kernel":
        model, stats = train_kernel(tokens, vocabulary.counts, output, initial, kernel_schedule(config), report=console.print, checkpoints=checkpoints, source=str(corpus))
        return _finish(run_dir, vocabulary, model.syn0, checkpoints, config, {"backend": "cpu-kernel", **stats})
    windows = uses_window_batches(config)
    # Window batches take CBOW's examples (a center and its context rows), each row its own input.
    make = WindowExamples("cbow" if windows or config.architecture == "cbow" else "skipgram", config.window)

    batch = config.batch_size or _default_batch(config, windows)
    schedule = SGDSchedule(
        epochs=config.epochs,
        alpha=config.alpha,
        min_alpha=config.min_alpha,
        sample=config.sample,
        batch_examples=batch,
        updates_per_call=config.updates_per_call or auto_updates_per_call(batch, 2 * config.window if windows or config.architecture == "cbow" else 1),
        seed=config.seed,
        jit_compile=config.jit_compile,
        hot_limit=config.hot_row_limit,
        windows=windows,
        window=config.window if windows else 0,
    )
    step, stats = train_word_prediction(tokens, vocabulary.counts, make, output, initial, schedule, report=console.print, checkpoints=checkpoints, source=str(corpus))
    return _finish(run_dir, vocabulary, step.input_vectors(), checkpoints, config, {"backend": "keras", **stats})


def _finish(run_dir: Path, vocabulary: Any, vectors: np.ndarray, checkpoints: EpochCheckpoints, config: Word2VecConfig, stats: dict[str, Any]) -> dict[str, Any]:
    """Write the run's vocabulary and vectors, remove its tokens and checkpoints; its metrics."""
    vocabulary.save(run_dir / VOCABULARY_FILE)
    save_matrix(run_dir / VECTORS_FILE, vectors)
    shutil.rmtree(run_dir / "tokens", ignore_errors=True)
    shutil.rmtree(checkpoints.directory, ignore_errors=True)
    return {
        "vocabulary_size": len(vocabulary),
        "unique_words": vocabulary.unique_words,
        "tokens": vocabulary.tokens_seen,
        "lines": vocabulary.lines,
        "vector_size": config.vector_size,
        **stats,
    }


def kernel_schedule(config: Word2VecConfig) -> KernelSchedule:
    """The CPU kernel's schedule of ``config``: skip-gram updates a window at a time (HogBatch)
    unless ``batching = pairs`` (word2vec.c's per-pair loop)."""
    return KernelSchedule(
        cbow=config.architecture == "cbow",
        window=config.window,
        epochs=config.epochs,
        alpha=config.alpha,
        min_alpha=config.min_alpha,
        sample=config.sample,
        seed=config.seed,
        threads=cpu_threads(config.threads),
        mode=KernelSchedule.PAIRS if config.batching == "pairs" else KernelSchedule.HOGBATCH,
    )


def uses_window_batches(config: Word2VecConfig) -> bool:
    """Skip-gram with ``batching = windows``, or ``auto`` with hierarchical softmax alone (the
    same gradient as pairs, fewer rows gathered)."""
    if config.architecture != "skipgram":
        return False
    return config.batching == "windows" or (config.batching == "auto" and config.hs and not config.negative)


def _default_batch(config: Word2VecConfig, windows: bool) -> int:
    """Examples per step when ``batch_size`` is 0: 1,024 skip-gram pairs; 256 CBOW windows
    (~1,500 context rows); windows: 192 (about 1,100 pairs), or 96 with hierarchical softmax.
    Steps this small, many to a call (``updates_per_call``), were faster than one large step a
    call (the rows a step gathers stay in the CPU's cache), and less exposed to hot rows: at
    4,096 CBOW windows a step the hot-row limit cut a third of the context-word updates and
    WordSim-353 fell to chance.
    """
    if windows:
        return 96 if config.hs else 192
    return 256 if config.architecture == "cbow" else 1024
