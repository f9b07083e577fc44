"""fastText training and the run files of a fastText model (trained here or imported from a
Facebook ``.bin``).

A fastText run holds ``vocabulary.tsv``, ``vectors.npy`` (``(nwords + bucket, dim)`` float32: word
rows, then n-gram bucket rows) and ``subwords.json`` (``minn``, ``maxn``, ``bucket``, ``dim``,
``nwords``): the hashing parameters are stored with the matrix and checked against it on load.
"""

from __future__ import annotations

import json
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
    RunDirError,
    SGDSchedule,
    Subwords,
    Vocabulary,
    WindowExamples,
    atomic_write_json,
    auto_updates_per_call,
    cpu_threads,
    load_matrix,
    noise_table,
    prepare_corpus,
    resolve_backend,
    save_matrix,
    train_kernel,
    train_word_prediction,
)
from ptmkit_fasttext.config import FastTextConfig
from ptmkit_fasttext.subwords import SubwordVectors, vocabulary_subwords

SUBWORDS_FILE = "subwords.json"


def save_run(run_dir: Path, vocabulary: Vocabulary, matrix: np.ndarray, minn: int, maxn: int, bucket: int, **extra: Any) -> None:
    """Write a fastText run's files (the matrix first, the parameters that describe it last)."""
    vocabulary.save(run_dir / VOCABULARY_FILE)
    save_matrix(run_dir / VECTORS_FILE, matrix)
    atomic_write_json(run_dir / SUBWORDS_FILE, {"minn": minn, "maxn": maxn, "bucket": bucket, "dim": int(matrix.shape[1]), "nwords": len(vocabulary), **extra})


def load_run(run_dir: Path) -> SubwordVectors:
    """The vectors of a fastText run.

    Raises:
        RunDirError: missing files, or hashing parameters that do not fit the matrix.
    """
    params_file = run_dir / SUBWORDS_FILE
    if not params_file.exists():
        raise RunDirError(f"{params_file}: missing (is this a finished fastText run?)")
    params = json.loads(params_file.read_text())
    vocabulary = Vocabulary.load(run_dir / VOCABULARY_FILE)
    matrix = load_matrix(run_dir / VECTORS_FILE)
    if len(vocabulary) != params["nwords"] or matrix.shape != (params["nwords"] + params["bucket"], params["dim"]):
        raise RunDirError(
            f"{params_file}: nwords {params['nwords']:,} + bucket {params['bucket']:,} x dim {params['dim']} does not fit "
            f"{run_dir / VECTORS_FILE} {matrix.shape} and {len(vocabulary):,} words; refusing to re-hash"
        )
    return SubwordVectors(vocabulary.words, matrix, vocabulary.counts, params["minn"], params["maxn"], params["bucket"])


def train_fasttext(corpus: Path, run_dir: Path, config: FastTextConfig, console: Console, resume: bool = False) -> dict[str, Any]:
    """Train fastText's skip-gram or CBOW with negative sampling on ``corpus``.

    Raises:
        DataError: an empty corpus, blank lines only, or no word surviving ``min_count``.
    """
    from ptmkit.api import quiet_tensorflow

    quiet_tensorflow()
    vocabulary, tokens = prepare_corpus(
        corpus, run_dir, config.min_count, config.max_vocab, config.lowercase, console, note=f"; {config.bucket:,} n-gram buckets"
    )
    tokens_dir = run_dir / "tokens"
    size = len(vocabulary)
    bucket = config.bucket if config.maxn else 0
    subwords = vocabulary_subwords(vocabulary.words, config.minn, config.maxn, bucket)
    rng = np.random.default_rng(config.seed)
    # fastText: input rows uniform in [-1/dim, 1/dim], output rows zero.
    initial = rng.random((size + bucket, config.vector_size), dtype=np.float32)
    initial *= 2.0 / config.vector_size
    initial -= 1.0 / config.vector_size
    output = OutputLayer(size, config.negative, noise_table(vocabulary.counts, config.ns_exponent))
    schedule = SGDSchedule(
        epochs=config.epochs,
        alpha=config.alpha,
        min_alpha=config.min_alpha,
        sample=config.sample,
        batch_examples=config.batch_size,
        updates_per_call=config.updates_per_call or auto_updates_per_call(config.batch_size, pairs_per_example=2 * config.window),
        seed=config.seed,
        jit_compile=config.jit_compile,
        hot_limit=config.hot_row_limit,
        shared_negatives=config.shared_negatives,
    )
    # Train only the rows the vocabulary's words read (their own and their n-grams' buckets),
    # renumbered into a compact matrix: the same updates, but 190K rows of 80 MB instead of 2M
    # rows of 800 MB to gather from, so that rows share pages and cache lines.
    used, compact = np.unique(subwords.rows, return_inverse=True)
    rows = Subwords(compact.astype(np.int32), subwords.offsets)
    checkpoints = EpochCheckpoints.of_run(run_dir, config.checkpoint_seconds, resume)
    if resolve_backend(config.backend) == "cpu-kernel":
        kernel = KernelSchedule(
            cbow=config.architecture == "cbow",
            window=config.window,
            epochs=config.epochs,
            alpha=config.alpha,
            min_alpha=config.min_alpha,
            sample=config.sample,
            seed=config.seed,
            threads=cpu_threads(config.threads),
            mode=KernelSchedule.HOGBATCH,
        )
        model, stats = train_kernel(tokens, vocabulary.counts, output, initial[used], kernel, console.print, checkpoints, str(corpus), subwords=rows)
        initial[used] = model.syn0
        stats = {"backend": "cpu-kernel", **stats}
    else:
        make = WindowExamples(config.architecture, config.window, rows)
        step, stats = train_word_prediction(tokens, vocabulary.counts, make, output, initial[used], schedule, report=console.print, checkpoints=checkpoints, source=str(corpus))
        initial[used] = step.input_vectors()
        stats = {"backend": "keras", **stats}
    save_run(run_dir, vocabulary, initial, config.minn, config.maxn, bucket)
    shutil.rmtree(tokens_dir, ignore_errors=True)
    shutil.rmtree(checkpoints.directory, ignore_errors=True)
    return {
        "vocabulary_size": size,
        "unique_words": vocabulary.unique_words,
        "tokens": vocabulary.tokens_seen,
        "lines": vocabulary.lines,
        "vector_size": config.vector_size,
        "bucket": bucket,
        "subword_rows_per_word": round(len(subwords.rows) / size, 2),
        **stats,
    }
