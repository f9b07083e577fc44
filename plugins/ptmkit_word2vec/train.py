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
    examples = skipgram_examples if config.architecture == "skipgram" else cbow_examples

    def make(ids: np.ndarray, sentence: np.ndarray, generator: np.random.Generator) -> Any:
        return examples(ids, sentence, window, generator)

    schedule = SGDSchedule(
        epochs=config.epochs,
        alpha=config.alpha,
        min_alpha=config.min_alpha,
        sample=config.sample,
        batch_examples=config.batch_size or (1024 if config.hs else 4096),
        seed=config.seed,
        jit_compile=config.jit_compile,
        hot_limit=config.hot_row_limit,
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
