"""word2vec training: vocabulary, encoded corpus, then skip-gram or CBOW with negative sampling
and/or hierarchical softmax through ptmkit's shared word-prediction objective.

Reference implementation: word2vec.c (Mikolov et al. 2013), as gensim 4.4 reproduces it; the
differences are listed in :mod:`ptmkit.objectives.word_prediction` (mini-batch instead of Hogwild
updates).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from ptmkit.data.vocabulary import huffman_codes, noise_table
from ptmkit.objectives.word_prediction import OutputLayer, cbow_examples, skipgram_examples
from ptmkit.training.wordvectors import SGDSchedule, prepare_corpus, train_word_prediction
from ptmkit.wordvectors import VECTORS_FILE, VOCABULARY_FILE, save_matrix
from ptmkit_word2vec.config import Word2VecConfig


def train_word2vec(corpus: Path, run_dir: Path, config: Word2VecConfig, console: Console) -> dict[str, Any]:
    """Train word2vec on ``corpus``; write ``vocabulary.tsv`` and ``vectors.npy`` (``(V,
    vector_size)`` float32, the input vectors, word2vec's ``syn0``) to ``run_dir``.

    Raises:
        DataError: an empty corpus, blank lines only, or no word surviving ``min_count``.
    """
    from ptmkit.training.setup import quiet_tensorflow

    quiet_tensorflow()
    vocabulary, tokens = prepare_corpus(corpus, run_dir, config.min_count, config.max_vocab, config.lowercase, console)
    tokens_dir = run_dir / "tokens"
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
    window = config.window
    windows = uses_window_batches(config)
    # Window batches take CBOW's examples (a center and its context rows), each row its own input.
    examples = cbow_examples if windows or config.architecture == "cbow" else skipgram_examples

    def make(ids: np.ndarray, sentence: np.ndarray, generator: np.random.Generator) -> Any:
        return examples(ids, sentence, window, generator)

    schedule = SGDSchedule(
        epochs=config.epochs,
        alpha=config.alpha,
        min_alpha=config.min_alpha,
        sample=config.sample,
        batch_examples=config.batch_size or _default_batch(config, windows),
        seed=config.seed,
        jit_compile=config.jit_compile,
        hot_limit=config.hot_row_limit,
        windows=windows,
    )
    step, stats = train_word_prediction(tokens, vocabulary.counts, make, output, initial, schedule, report=console.print)
    vocabulary.save(run_dir / VOCABULARY_FILE)
    save_matrix(run_dir / VECTORS_FILE, step.input_vectors())
    shutil.rmtree(tokens_dir, ignore_errors=True)
    return {
        "vocabulary_size": size,
        "unique_words": vocabulary.unique_words,
        "tokens": vocabulary.tokens_seen,
        "lines": vocabulary.lines,
        "vector_size": config.vector_size,
        **stats,
    }


def uses_window_batches(config: Word2VecConfig) -> bool:
    """Skip-gram with ``batching = windows``, or ``auto`` with hierarchical softmax alone (the
    same gradient as pairs, fewer rows gathered)."""
    if config.architecture != "skipgram":
        return False
    return config.batching == "windows" or (config.batching == "auto" and config.hs and not config.negative)


def _default_batch(config: Word2VecConfig, windows: bool) -> int:
    """Examples per step when ``batch_size`` is 0. Skip-gram: 4,096 pairs, or 1,024 with
    hierarchical softmax (its top inner nodes are on every path); windows: 768 (about 4,300
    pairs), or 192 with hierarchical softmax (about 1,100). CBOW: 1,024 windows, whose ~6,000
    context rows load the input rows like skip-gram's 4,096 pairs: at 4,096 windows the hot-row
    limit cut a third of the context-word updates (frequent words) and WordSim-353 fell to chance.
    """
    if windows:
        return 192 if config.hs else 768
    return 1024 if config.hs or config.architecture == "cbow" else 4096
