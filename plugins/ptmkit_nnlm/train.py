"""NNLM training: vocabulary (of the training lines) with ``<unk>``, ``<s>`` (context padding)
and ``</s>`` (end of line, predicted like a word), n-grams streamed from the encoded corpus in
shuffled blocks, Keras ``train_on_batch`` with sparse cross-entropy through the shared epoch loop
(:class:`ptmkit.api.ResumableEpochs`: epoch checkpoints for ``--resume``), and
held-out perplexity on the last ``heldout_lines`` non-blank lines: per target, and per word
beside the add-one unigram model (:func:`_heldout_word_metrics`). With ``patience``, early stopping
on the ``validation_lines`` before them, keeping the best epoch's weights (:class:`_BestEpoch`).
"""

from __future__ import annotations

import dataclasses
import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from ptmkit.api import (
    VECTORS_FILE,
    VOCABULARY_FILE,
    DataError,
    EncodedCorpus,
    EpochCheckpoints,
    ResumableEpochs,
    Vocabulary,
    build_vocabulary,
    encode_corpus,
    read_corpus,
    save_matrix,
    tokens_sha1,
)
from ptmkit_nnlm.config import NNLMConfig
from ptmkit_nnlm.model import build_nnlm

SPECIALS = ("</s>", "<unk>", "<s>")
BLOCK = 65_536  # n-grams shuffled together: memory stays flat as the corpus grows


def ngrams(tokens: EncodedCorpus, positions: np.ndarray, context: int, start_id: int) -> tuple[np.ndarray, np.ndarray]:
    """``(contexts (n, context) int32, targets (n,) int32)`` for token ``positions``; contexts
    reaching before the start of the line are padded with ``<s>``."""
    starts = tokens.offsets[np.searchsorted(tokens.offsets, positions, side="right") - 1]
    back = positions[:, None] - np.arange(context, 0, -1)[None, :]
    ids = np.asarray(tokens.ids)
    contexts = np.where(back >= starts[:, None], ids[np.maximum(back, 0)], start_id).astype(np.int32)
    return contexts, ids[positions].astype(np.int32)


def _batches(tokens: EncodedCorpus, first: int, last: int, config: NNLMConfig, start_id: int, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """One epoch's ``(contexts, targets)`` batches (:func:`ngrams`) of token positions ``first ..
    last - 1``: blocks of ``BLOCK`` consecutive positions in a random order, each shuffled inside,
    all drawn from ``rng`` (the epoch's, :meth:`ResumableEpochs.rng`); memory stays one block."""
    batch = config.batch_size
    pending = np.empty(0, np.int64)
    for block in rng.permutation(-(-(last - first) // BLOCK)):
        start = first + int(block) * BLOCK
        pending = np.concatenate([pending, rng.permutation(np.arange(start, min(start + BLOCK, last)))])
        while len(pending) >= batch:
            yield ngrams(tokens, pending[:batch], config.context, start_id)
            pending = pending[batch:]
    if len(pending):
        yield ngrams(tokens, pending, config.context, start_id)


def _first_lines(texts: Iterator[str], count: int) -> Iterator[str]:
    """``texts`` up to and including the ``count``-th non-blank one."""
    for text in texts:
        if count <= 0:
            return
        if text.split():
            count -= 1
        yield text


def train_nnlm(corpus: Path, run_dir: Path, config: NNLMConfig, console: Console, resume: bool = False) -> dict[str, Any]:
    """Train the NNLM; write ``vocabulary.tsv`` and ``vectors.npy`` (the feature matrix ``C``) and
    ``nnlm.weights.h5``; report held-out perplexity. The vocabulary is counted on the training
    lines (the corpus is read once more to count its lines first).

    With ``config.checkpoint_seconds`` the weights and Adam's state are saved at epoch ends
    (:class:`ptmkit.wordvectors.training.EpochCheckpoints`); ``resume`` continues from them and
    ends with the uninterrupted run's weights (each epoch's order is drawn from ``(seed,
    epoch)``).

    Raises:
        DataError: an empty corpus, blank lines only, no word surviving ``min_count``, or
            ``heldout_lines`` more than half the corpus's lines.
        RunDirError: ``resume`` without a usable checkpoint of this run.
    """
    from ptmkit.api import atomic_save, quiet_tensorflow, save_model_weights, seed_everything

    quiet_tensorflow()
    seed_everything(config.seed)
    lines, heldout, validation = _heldout_lines(corpus, config)
    counted, vocabulary = _vocabulary(corpus, config, lines - heldout - validation)
    end_id, unk_id, start_id = (len(counted.words) + i for i in range(3))
    tokens = encode_corpus(read_corpus(corpus), vocabulary, run_dir / "tokens", config.lowercase, unknown=unk_id, end=end_id)
    split = int(tokens.offsets[len(tokens.offsets) - 1 - heldout])
    train_end = int(tokens.offsets[len(tokens.offsets) - 1 - heldout - validation])
    heldout_unknown = int(np.count_nonzero(np.asarray(tokens.ids[split:]) == unk_id))
    console.print(
        f"vocabulary: {len(vocabulary.words):,} entries ({len(counted):,} words with count >= {config.min_count} in the training lines, {', '.join(SPECIALS)}); "
        f"{train_end:,} training, {f'{split - train_end:,} validation and ' if validation else ''}"
        f"{len(tokens.ids) - split:,} held-out targets ({heldout_unknown:,} of them <unk>)"
    )
    model = _compiled_model(len(vocabulary.words), config)
    checkpoints = EpochCheckpoints.of_run(run_dir, config.checkpoint_seconds, resume)
    best = _BestEpoch(model, *ngrams(tokens, np.arange(train_end, split), config.context, start_id), config.patience) if config.patience and split > train_end else None
    epochs, loss = _train_epochs(model, len(vocabulary.words), tokens, train_end, start_id, config, checkpoints, console, best)
    seconds = epochs.seconds()
    metrics: dict[str, Any] = {
        "vocabulary_size": len(vocabulary.words),
        "tokens": counted.tokens_seen,
        "training_targets": train_end,
        **(best.metrics(validation) if best is not None else {}),
        "final_train_loss": round(loss, 4),
        "parameters": int(model.count_params()),
        "train_seconds": round(seconds, 2),
        **epochs.stats(seconds),
    }
    if split < len(tokens.ids):
        metrics.update(_heldout_metrics(model, tokens, split, start_id, config, heldout, heldout_unknown))
        metrics.update(_heldout_word_metrics(model, tokens, split, start_id, end_id, config, vocabulary.counts))
        console.print(f"held-out perplexity {metrics['heldout_perplexity']} on {metrics['heldout_targets']:,} targets of the last {heldout} lines")
    vocabulary.save(run_dir / VOCABULARY_FILE)
    save_matrix(run_dir / VECTORS_FILE, model.get_layer("C").get_weights()[0])
    atomic_save(run_dir / "nnlm.weights.h5", lambda tmp: save_model_weights(model, tmp))
    shutil.rmtree(run_dir / "tokens", ignore_errors=True)
    shutil.rmtree(checkpoints.directory, ignore_errors=True)
    return metrics


def _heldout_lines(corpus: Path, config: NNLMConfig) -> tuple[int, int, int]:
    """``(non-blank lines, held-out lines, validation lines)``: the held-out lines are the last
    ``heldout_lines`` non-blank lines (fewer when the corpus has fewer than ``heldout_lines + 1``),
    the validation lines the ``validation_lines`` before them.

    Raises:
        DataError: ``heldout_lines`` (with ``validation_lines``) more than half the corpus's
            non-blank lines.
    """
    lines = sum(1 for text in read_corpus(corpus) if text.split())
    kept_out = config.heldout_lines + config.validation_lines
    if lines and kept_out and 2 * kept_out > lines:
        keys = f"model.heldout_lines = {config.heldout_lines:,}" + (f" and model.validation_lines = {config.validation_lines:,}" if config.validation_lines else "")
        suggestion = f"e.g. --set model.heldout_lines={lines // 10}" if lines >= 10 else "--set model.heldout_lines=0 trains on every line, without a perplexity"
        raise DataError(
            f"{corpus}: {lines:,} line{'' if lines == 1 else 's'}, and {keys} would hold out more than half of them; "
            f"lower it ({suggestion}) or give a longer corpus"
        )
    heldout = min(config.heldout_lines, max(lines - 1, 0))
    return lines, heldout, min(config.validation_lines, max(lines - 1 - heldout, 0))


def _vocabulary(corpus: Path, config: NNLMConfig, training_lines: int) -> tuple[Vocabulary, Vocabulary]:
    """``(counted, vocabulary)``: the words of the first ``training_lines`` non-blank lines (so
    that a word seen only in held-out text is ``<unk>`` there), and the model's vocabulary, those
    words then :data:`SPECIALS` (``</s>`` counted once a line, ``<unk>`` once a dropped token)."""
    counted = build_vocabulary(corpus, _first_lines(read_corpus(corpus), training_lines), config.min_count, config.max_vocab, config.lowercase)
    words = counted.words + list(SPECIALS)
    counts = np.concatenate([counted.counts, [counted.lines, counted.tokens_seen - counted.kept_tokens, 0]]).astype(np.int64)
    return counted, Vocabulary(words, counts, counted.tokens_seen, counted.unique_words, counted.lines)


def _compiled_model(vocabulary_size: int, config: NNLMConfig) -> Any:
    """The NNLM (:func:`ptmkit_nnlm.model.build_nnlm`), compiled with sparse cross-entropy on
    logits and Adam, its optimizer's variables built (so that a checkpoint can restore them)."""
    import keras

    from ptmkit.api import AdamW

    model = build_nnlm(vocabulary_size, config.context, config.vector_size, config.hidden, config.direct)
    model.compile(
        # ptmkit's AdamW without decay is Adam that sums the repeated rows of C in a batch first
        optimizer=AdamW(learning_rate=config.learning_rate, weight_decay=0.0, epsilon=1e-7),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    model.optimizer.build(model.trainable_variables)
    return model


def _train_epochs(
    model: Any, vocabulary_size: int, tokens: EncodedCorpus, split: int, start_id: int, config: NNLMConfig, checkpoints: EpochCheckpoints, console: Console,
    best: _BestEpoch | None = None,
) -> tuple[ResumableEpochs, float]:
    """Train on the n-grams of token positions ``0 .. split - 1`` through the shared epoch loop,
    resuming from ``checkpoints`` when they say so (weights and Adam's state, and ``best``'s).
    With ``best``, the validation cross-entropy after every epoch decides when to stop, and the
    model ends with the best epoch's weights.

    Returns:
        ``(epochs, loss)``: the loop (its seconds and stats) and the last epoch's mean loss
        (NaN when no epoch ran).
    """
    variables = {f"weight_{i}": v for i, v in enumerate(model.weights)} | {f"optimizer_{i}": v for i, v in enumerate(model.optimizer.variables)}
    settings = {k: v for k, v in dataclasses.asdict(config).items() if k != "checkpoint_seconds"}
    fingerprint = lambda: {"vocabulary": vocabulary_size, "tokens_sha1": tokens_sha1(tokens), "config": settings}  # noqa: E731
    epochs = ResumableEpochs(config.epochs, config.seed, checkpoints, fingerprint, console.print)
    shapes = {name: (tuple(v.shape), np.dtype(v.dtype)) for name, v in variables.items()} | (best.shapes() if best is not None else {})
    state = epochs.resume({name: shape for name, (shape, _) in shapes.items()}, {name: dtype for name, (_, dtype) in shapes.items()})
    if state is not None:
        for name, variable in variables.items():
            variable.assign(state[name])
        if best is not None:
            best.load(state)
    loss = math.nan
    epochs.start()
    snapshot = lambda: {name: np.asarray(v.numpy()) for name, v in variables.items()} | (best.state() if best is not None else {})  # noqa: E731
    for epoch in epochs.run(snapshot):
        total, seen = 0.0, 0
        for x, y in _batches(tokens, 0, split, config, start_id, epochs.rng(epoch)):
            total += model.train_on_batch(x, y, return_dict=True)["loss"] * len(y)  # the batch's mean loss
            seen += len(y)
        loss = total / max(seen, 1)
        line = f"epoch {epoch + 1}/{config.epochs}: loss {loss:.4f} (training perplexity {math.exp(loss):.1f})"
        stop = best is not None and best.after_epoch(epoch + 1)
        console.print(line + (best.report() if best is not None else ""))
        if stop:
            console.print(f"stopping early: no better validation perplexity in {config.patience} epoch(s); keeping epoch {best.best_epoch}'s weights")
            break
    if best is not None:
        best.restore()
    return epochs, loss


class _BestEpoch:
    """Early stopping on validation n-grams ``(x, y)`` (Bengio et al. 2003, section 4: training
    stopped on validation data): after every epoch the model's cross-entropy on them; the weights
    of the best epoch are kept (in memory, and in the epoch checkpoints, so that a resumed run
    stops where the uninterrupted one does) and restored at the end. Stops after ``patience``
    epochs without an improvement."""

    def __init__(self, model: Any, x: np.ndarray, y: np.ndarray, patience: int) -> None:
        self.model, self.x, self.y, self.patience = model, x, y, patience
        self.weights = [np.array(w) for w in model.get_weights()]
        self.record = np.array([np.inf, 0.0, 0.0, np.nan])  # best cross-entropy, its epoch, epochs since, last cross-entropy

    @property
    def best_epoch(self) -> int:
        return int(self.record[1])

    def shapes(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        return {f"best_weight_{i}": (w.shape, w.dtype) for i, w in enumerate(self.weights)} | {"early_stopping": ((4,), np.dtype(np.float64))}

    def state(self) -> dict[str, np.ndarray]:
        return {f"best_weight_{i}": w for i, w in enumerate(self.weights)} | {"early_stopping": self.record.copy()}

    def load(self, state: dict[str, np.ndarray]) -> None:
        self.weights = [np.array(state[f"best_weight_{i}"]) for i in range(len(self.weights))]
        self.record = np.array(state["early_stopping"], dtype=np.float64)

    def after_epoch(self, epoch: int) -> bool:
        """Measure after ``epoch`` epochs; True when it is time to stop."""
        loss = float(self.model.evaluate(self.x, self.y, batch_size=1024, verbose=0, return_dict=True)["loss"])
        if loss < self.record[0]:
            self.weights = [np.array(w) for w in self.model.get_weights()]
            self.record[:3] = loss, epoch, 0
        else:
            self.record[2] += 1
        self.record[3] = loss
        return self.record[2] >= self.patience

    def report(self) -> str:
        return f", validation perplexity {math.exp(self.record[3]):.1f}" + (" (best)" if self.record[2] == 0 else f" (best {math.exp(self.record[0]):.1f} after epoch {self.best_epoch})")

    def restore(self) -> None:
        if self.best_epoch:
            self.model.set_weights(self.weights)

    def metrics(self, lines: int) -> dict[str, Any]:
        return {
            "validation_lines": lines,
            "validation_targets": len(self.y),
            "validation_cross_entropy": round(float(self.record[0]), 4),
            "validation_perplexity": round(math.exp(float(self.record[0])), 2),
            "best_epoch": self.best_epoch,
            "epochs_trained": self.best_epoch + int(self.record[2]),
        }


def _heldout_metrics(model: Any, tokens: EncodedCorpus, split: int, start_id: int, config: NNLMConfig, heldout: int, unknown: int) -> dict[str, Any]:
    """Cross-entropy (nats), perplexity and accuracy on the n-grams of token positions
    ``split ..``: the last ``heldout`` lines, ``unknown`` of whose targets are ``<unk>``."""
    positions = np.arange(split, len(tokens.ids))
    x, y = ngrams(tokens, positions, config.context, start_id)
    result = model.evaluate(x, y, batch_size=1024, verbose=0, return_dict=True)
    return {
        "heldout_lines": heldout,
        "heldout_targets": len(positions),
        "heldout_unknown_targets": unknown,
        "heldout_cross_entropy": round(float(result["loss"]), 4),
        "heldout_perplexity": round(math.exp(float(result["loss"])), 2),
        "heldout_accuracy": round(float(result["accuracy"]), 4),
    }


def _heldout_word_metrics(model: Any, tokens: EncodedCorpus, split: int, start_id: int, end_id: int, config: NNLMConfig, counts: np.ndarray) -> dict[str, Any]:
    """Per-word perplexity of the held-out lines, as the GPT and ELMo families report it (the
    NNLM's log-likelihood of each line's words, without its ``</s>`` targets, over the number of
    words), beside the add-one unigram model of the training lines' counts (``counts``, one per
    vocabulary entry: ``</s>`` once a line, ``<unk>`` once a dropped word) on the same words.
    A word outside the vocabulary is scored as ``<unk>``, as in the model."""
    positions = np.arange(split, len(tokens.ids))
    targets = np.asarray(tokens.ids[split:], dtype=np.int64)
    log_likelihood = np.empty(len(positions))
    for start in range(0, len(positions), 1024):
        x, _ = ngrams(tokens, positions[start : start + 1024], config.context, start_id)
        logits = np.asarray(model.predict_on_batch(x), dtype=np.float64)
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        log_likelihood[start : start + 1024] = log_probs[np.arange(len(log_probs)), targets[start : start + 1024]]
    words = targets != end_id
    smoothed = np.asarray(counts, dtype=np.float64) + 1.0
    unigram = np.log(smoothed / smoothed.sum())[targets]
    count = max(int(words.sum()), 1)
    return {
        "heldout_words": int(words.sum()),
        "heldout_word_perplexity": round(math.exp(-float(log_likelihood[words].sum()) / count), 3),
        "heldout_unigram_word_perplexity": round(math.exp(-float(unigram[words].sum()) / count), 3),
    }
