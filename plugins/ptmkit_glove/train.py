"""GloVe training: weighted least squares on log co-occurrences with AdaGrad, as
stanfordnlp/GloVe ``glove.c``.

Loss over the non-zero ``X_ij``: ``sum f(X_ij) (w_i . w~_j + b_i + b~_j - log X_ij)^2`` with
``f(x) = min(1, (x / x_max) ** alpha)``. Each record's gradient is scaled by ``eta`` and divided by
the square root of the accumulated squared (scaled) gradients, which start at 1 (``glove.c``'s
``gradsq``); parameters start uniform in ``[-0.5, 0.5) / vector_size``. The saved vectors are
``W + W~`` (``glove.c -model 2``, the default). Records are shuffled each epoch and updated in
batches (gather, scatter-add; XLA), all records of a batch from the same parameters.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from ptmkit.api import VECTORS_FILE, VOCABULARY_FILE, build_vocabulary, encode_corpus, read_corpus, save_matrix
from ptmkit_glove.config import GloVeConfig
from ptmkit_glove.cooccur import count_cooccurrences


class AdaGradStep:
    """One batch of GloVe's AdaGrad updates on Keras variables.

    Args:
        vocabulary_size: V.
        vector_size: dimensions.
        rng: initialises ``W``, ``W~`` and the biases (``glove.c``: uniform ``[-0.5, 0.5) / d``).
        x_max, alpha: the weighting function.
        learning_rate: ``eta``.
        jit_compile: XLA.

    Calling it with ``rows``, ``cols`` ``(B,)`` int32, ``values`` ``(B,)`` float32 and a weight
    mask ``(B,)`` float32 updates the parameters and returns the batch's summed cost ``0.5 f(x) diff^2``.
    """

    def __init__(self, vocabulary_size: int, vector_size: int, rng: np.random.Generator, x_max: float, alpha: float, learning_rate: float, jit_compile: bool = True) -> None:
        import keras
        import tensorflow as tf

        def uniform(shape: tuple[int, ...]) -> np.ndarray:
            return ((rng.random(shape) - 0.5) / vector_size).astype(np.float32)

        # Words and contexts stacked: rows 0..V-1 are W, V..2V-1 are W~; the bias is column d.
        self.params = keras.Variable(np.concatenate([uniform((2 * vocabulary_size, vector_size)), uniform((2 * vocabulary_size, 1))], axis=1), name="glove_parameters")
        self.gradsq = keras.Variable(np.ones((2 * vocabulary_size, vector_size + 1), np.float32), name="glove_gradsq")
        self.vocabulary_size, self.vector_size = vocabulary_size, vector_size
        params, gradsq = self.params.value, self.gradsq.value
        offset = vocabulary_size

        def step(rows: Any, cols: Any, values: Any, mask: Any) -> Any:
            i, j = rows, cols + offset
            wi, wj = tf.gather(params, i), tf.gather(params, j)
            diff = tf.reduce_sum(wi[:, :-1] * wj[:, :-1], axis=1) + wi[:, -1] + wj[:, -1] - tf.math.log(values)
            weight = tf.minimum(1.0, tf.pow(values / x_max, alpha)) * mask
            fdiff = weight * diff
            cost = tf.reduce_sum(0.5 * fdiff * diff)
            fdiff = fdiff * learning_rate
            ones = tf.ones_like(fdiff)[:, None]
            grad_i = fdiff[:, None] * tf.concat([wj[:, :-1], ones], axis=1)
            grad_j = fdiff[:, None] * tf.concat([wi[:, :-1], ones], axis=1)
            update_i = grad_i / tf.sqrt(tf.gather(gradsq, i))
            update_j = grad_j / tf.sqrt(tf.gather(gradsq, j))
            params.scatter_sub(tf.IndexedSlices(update_i, i))
            params.scatter_sub(tf.IndexedSlices(update_j, j))
            gradsq.scatter_add(tf.IndexedSlices(grad_i * grad_i, i))
            gradsq.scatter_add(tf.IndexedSlices(grad_j * grad_j, j))
            return cost

        self._step = tf.function(step, jit_compile=jit_compile, reduce_retracing=True)
        self._tf = tf

    def __call__(self, rows: np.ndarray, cols: np.ndarray, values: np.ndarray, mask: np.ndarray) -> float:
        tf = self._tf
        return float(self._step(tf.constant(rows), tf.constant(cols), tf.constant(values), tf.constant(mask)))

    def word_vectors(self) -> np.ndarray:
        """``W + W~``, ``(V, vector_size)`` float32."""
        params = np.asarray(self.params.numpy())
        size = self.vocabulary_size
        return params[:size, :-1] + params[size:, :-1]


def train_glove(corpus: Path, run_dir: Path, config: GloVeConfig, console: Console, resume: bool = False) -> dict[str, Any]:
    """Count co-occurrences and fit GloVe; write ``vocabulary.tsv`` and ``vectors.npy`` (``W + W~``).

    With ``config.checkpoint_seconds`` the parameters and AdaGrad's squared-gradient sums are
    saved at epoch ends (:class:`ptmkit.wordvectors.training.EpochCheckpoints`); ``resume``
    continues from them and ends with the uninterrupted run's vectors (each epoch's shuffle
    is drawn from ``(seed, epoch)``).

    Raises:
        DataError: an empty corpus, blank lines only, or no word surviving ``min_count``.
        RunDirError: ``resume`` without a usable checkpoint of this run.
    """
    from ptmkit.api import EpochCheckpoints, ResumableEpochs, quiet_tensorflow

    quiet_tensorflow()
    vocabulary = build_vocabulary(corpus, read_corpus(corpus), config.min_count, config.max_vocab, config.lowercase)
    tokens_dir = run_dir / "tokens"
    tokens = encode_corpus(read_corpus(corpus), vocabulary, tokens_dir, config.lowercase)
    started = time.perf_counter()
    x = count_cooccurrences(tokens, len(vocabulary), config.window, config.chunk_tokens)
    count_seconds = time.perf_counter() - started
    console.print(
        f"vocabulary: {len(vocabulary):,} words of {vocabulary.unique_words:,} unique; {len(x):,} non-zero co-occurrences "
        f"(of {len(vocabulary) ** 2:,} cells) counted in {count_seconds:.1f}s"
    )
    step = AdaGradStep(len(vocabulary), config.vector_size, np.random.default_rng(config.seed), config.x_max, config.alpha, config.learning_rate, config.jit_compile)
    checkpoints = EpochCheckpoints.of_run(run_dir, config.checkpoint_seconds, resume)
    shape = tuple(step.params.shape)
    epochs = ResumableEpochs(config.epochs, config.seed, checkpoints, lambda: _fingerprint(vocabulary.counts, x, config), console.print)
    state = epochs.resume({"params": shape, "gradsq": shape})
    if state is not None:
        step.params.assign(state["params"])
        step.gradsq.assign(state["gradsq"])
    batch = config.batch_size
    records = len(x)
    padded = -(-records // batch) * batch
    values = x.values.astype(np.float32)
    cost = 0.0
    epochs.start()
    for epoch in epochs.run(lambda: {"params": np.asarray(step.params.numpy()), "gradsq": np.asarray(step.gradsq.numpy())}):
        order = epochs.rng(epoch).permutation(padded)  # indices >= records are padding (weight 0)
        cost = 0.0
        for start in range(0, padded, batch):
            index = order[start : start + batch]
            real = index < records
            take = np.where(real, index, 0)
            cost += step(x.rows[take], x.cols[take], values[take], real.astype(np.float32))
        console.print(f"epoch {epoch + 1}/{config.epochs}: cost {cost / records:.4f}")
    seconds = epochs.seconds()
    vocabulary.save(run_dir / VOCABULARY_FILE)
    save_matrix(run_dir / VECTORS_FILE, step.word_vectors())
    shutil.rmtree(tokens_dir, ignore_errors=True)
    shutil.rmtree(checkpoints.directory, ignore_errors=True)
    metrics = {
        "vocabulary_size": len(vocabulary),
        "unique_words": vocabulary.unique_words,
        "tokens": vocabulary.tokens_seen,
        "lines": vocabulary.lines,
        "vector_size": config.vector_size,
        "cooccurrence_records": records,
        "count_seconds": round(count_seconds, 2),
        "train_seconds": round(seconds, 2),
        "records_per_second": round(records * (config.epochs - epochs.start_epoch) / max(seconds, 1e-9), 1),
        "final_cost": round(cost / max(records, 1), 6),
        **epochs.stats(seconds),
    }
    return metrics


def _fingerprint(counts: np.ndarray, x: Any, config: GloVeConfig) -> dict[str, Any]:
    """What must not change between a checkpoint and its resumption: the vocabulary counts, the
    co-occurrence records (a hash: the corpus and the window) and the training settings."""
    import hashlib

    records = hashlib.sha1()
    for array in (x.rows, x.cols, x.values):
        records.update(np.ascontiguousarray(array).tobytes())
    settings = dataclasses.asdict(config)
    for name in ("checkpoint_seconds", "jit_compile", "chunk_tokens"):  # may change on resume without changing the result
        settings.pop(name)
    from ptmkit.api import vocabulary_fingerprint

    return {
        **vocabulary_fingerprint(counts),
        "records_sha1": records.hexdigest(),
        "config": settings,
    }
