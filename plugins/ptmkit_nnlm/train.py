"""NNLM training: vocabulary (of the training lines) with ``<unk>``, ``<s>`` (context padding)
and ``</s>`` (end of line, predicted like a word), n-grams streamed from the encoded corpus in
shuffled blocks, Keras ``fit`` with sparse cross-entropy, epoch checkpoints for ``--resume``, and
held-out perplexity on the last ``heldout_lines`` non-blank lines.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import time
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
    Vocabulary,
    build_vocabulary,
    encode_corpus,
    read_corpus,
    save_matrix,
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


def _dataset(tokens: EncodedCorpus, first: int, last: int, config: NNLMConfig, start_id: int, epoch_seed: int, epoch: int = 0) -> Any:
    import keras

    count = last - first
    batch = config.batch_size

    class NGrams(keras.utils.PyDataset):
        def __init__(self) -> None:
            super().__init__(workers=1, use_multiprocessing=False)
            self.epoch = epoch  # a resumed run's first epoch draws that epoch's order
            self._order()

        def _order(self) -> None:
            # Blocks of BLOCK consecutive positions in a random order, each shuffled inside.
            rng = np.random.default_rng((epoch_seed, self.epoch))
            self.rng = rng
            self.blocks = rng.permutation(-(-count // BLOCK))
            sizes = np.minimum(BLOCK, count - self.blocks * BLOCK)
            self.starts = np.concatenate([[0], np.cumsum(sizes)])
            self.cache: dict[int, np.ndarray] = {}

        def __len__(self) -> int:
            return -(-count // batch)

        def __getitem__(self, index: int) -> Any:
            positions = self._positions(index * batch, min((index + 1) * batch, count))
            return ngrams(tokens, positions, config.context, start_id)

        def _positions(self, lo: int, hi: int) -> np.ndarray:
            out = []
            while lo < hi:
                logical = int(np.searchsorted(self.starts, lo, side="right")) - 1
                if logical not in self.cache:
                    self.cache = {}  # batches walk the blocks in order: one block cached at a time
                    start = first + int(self.blocks[logical]) * BLOCK
                    self.cache[logical] = self.rng.permutation(np.arange(start, min(start + BLOCK, last)))
                members = self.cache[logical]
                within = lo - int(self.starts[logical])
                take = min(hi - lo, len(members) - within)
                out.append(members[within : within + take])
                lo += take
            return np.concatenate(out)

        def on_epoch_end(self) -> None:
            self.epoch += 1
            self._order()

    return NGrams()


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
    from ptmkit.api import atomic_save, quiet_tensorflow, seed_everything

    quiet_tensorflow()
    import keras

    from ptmkit.api import AdamW

    seed_everything(config.seed)
    # The held-out lines are the last ``heldout_lines`` non-blank lines; the vocabulary is counted
    # on the training lines only, so a word seen only in held-out text is <unk> there.
    lines = sum(1 for text in read_corpus(corpus) if text.split())
    if lines and config.heldout_lines and 2 * config.heldout_lines > lines:
        suggestion = f"e.g. --set model.heldout_lines={lines // 10}" if lines >= 10 else "--set model.heldout_lines=0 trains on every line, without a perplexity"
        raise DataError(
            f"{corpus}: {lines:,} line{'' if lines == 1 else 's'}, and model.heldout_lines = {config.heldout_lines:,} would hold out more than half of them; "
            f"lower it ({suggestion}) or give a longer corpus"
        )
    heldout = min(config.heldout_lines, max(lines - 1, 0))
    counted = build_vocabulary(corpus, _first_lines(read_corpus(corpus), lines - heldout), config.min_count, config.max_vocab, config.lowercase)
    words = counted.words + list(SPECIALS)
    end_id, unk_id, start_id = (len(counted.words) + i for i in range(3))
    counts = np.concatenate([counted.counts, [counted.lines, counted.tokens_seen - counted.kept_tokens, 0]]).astype(np.int64)
    vocabulary = Vocabulary(words, counts, counted.tokens_seen, counted.unique_words, counted.lines)
    tokens = encode_corpus(read_corpus(corpus), vocabulary, run_dir / "tokens", config.lowercase, unknown=unk_id, end=end_id)
    split = int(tokens.offsets[len(tokens.offsets) - 1 - heldout])
    heldout_unknown = int(np.count_nonzero(np.asarray(tokens.ids[split:]) == unk_id))
    console.print(
        f"vocabulary: {len(words):,} entries ({len(counted):,} words with count >= {config.min_count} in the training lines, {', '.join(SPECIALS)}); "
        f"{split:,} training and {len(tokens.ids) - split:,} held-out targets ({heldout_unknown:,} of them <unk>)"
    )
    model = build_nnlm(len(words), config.context, config.vector_size, config.hidden, config.direct)
    model.compile(
        # ptmkit's AdamW without decay is Adam that sums the repeated rows of C in a batch first
        optimizer=AdamW(learning_rate=config.learning_rate, weight_decay=0.0, epsilon=1e-7),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    from ptmkit.api import EpochCheckpoints, tokens_sha1

    checkpoints = EpochCheckpoints.of_run(run_dir, config.checkpoint_seconds, resume)
    model.optimizer.build(model.trainable_variables)
    variables = {f"weight_{i}": v for i, v in enumerate(model.weights)} | {f"optimizer_{i}": v for i, v in enumerate(model.optimizer.variables)}
    settings = {k: v for k, v in dataclasses.asdict(config).items() if k != "checkpoint_seconds"}
    fingerprint = {"vocabulary": len(words), "tokens_sha1": tokens_sha1(tokens), "config": settings}
    start_epoch, seconds_before = 0, 0.0
    if resume:
        shapes = {name: tuple(v.shape) for name, v in variables.items()}
        dtypes = {name: np.dtype(v.dtype) for name, v in variables.items()}
        start_epoch, state, seconds_before = checkpoints.load(json.loads(json.dumps(fingerprint)), shapes, dtypes)
        for name, variable in variables.items():
            variable.assign(state[name])
        console.print(f"resuming after epoch {start_epoch}/{config.epochs} from {checkpoints.directory}")

    started = time.perf_counter()

    class SaveAtEpochEnd(keras.callbacks.Callback):
        """Epoch checkpoints, every ``checkpoint_seconds`` (not after the last epoch)."""

        last_save, saving = started, 0.0

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            console.print(f"epoch {epoch + 1}/{config.epochs}: loss {logs['loss']:.4f} (training perplexity {math.exp(logs['loss']):.1f})")
            if epoch + 1 < config.epochs and checkpoints.due(self.last_save):
                begin = time.perf_counter()
                state = {name: np.asarray(v.numpy()) for name, v in variables.items()}
                checkpoints.save(epoch + 1, state, seconds_before + begin - started - self.saving, fingerprint)
                self.last_save = time.perf_counter()
                self.saving += self.last_save - begin

    saver = SaveAtEpochEnd()
    data = _dataset(tokens, 0, split, config, start_id, config.seed, start_epoch)
    history = model.fit(data, epochs=config.epochs, initial_epoch=start_epoch, shuffle=False, verbose=0, callbacks=[saver])
    seconds = time.perf_counter() - started - saver.saving
    metrics: dict[str, Any] = {
        "vocabulary_size": len(words),
        "tokens": counted.tokens_seen,
        "training_targets": split,
        "final_train_loss": round(float(history.history["loss"][-1]), 4),
        "parameters": int(model.count_params()),
        "train_seconds": round(seconds, 2),
        "checkpoint_seconds": round(saver.saving, 2),
    }
    if start_epoch:
        metrics["resumed_after_epoch"] = start_epoch
        metrics["train_seconds_all_sessions"] = round(seconds_before + seconds, 2)
    if split < len(tokens.ids):
        positions = np.arange(split, len(tokens.ids))
        x, y = ngrams(tokens, positions, config.context, start_id)
        result = model.evaluate(x, y, batch_size=1024, verbose=0, return_dict=True)
        metrics.update({
            "heldout_lines": heldout,
            "heldout_targets": len(positions),
            "heldout_unknown_targets": heldout_unknown,
            "heldout_cross_entropy": round(float(result["loss"]), 4),
            "heldout_perplexity": round(math.exp(float(result["loss"])), 2),
            "heldout_accuracy": round(float(result["accuracy"]), 4),
        })
        console.print(f"held-out perplexity {metrics['heldout_perplexity']} on {len(positions):,} targets of the last {heldout} lines")
    vocabulary.save(run_dir / VOCABULARY_FILE)
    save_matrix(run_dir / VECTORS_FILE, model.get_layer("C").get_weights()[0])
    atomic_save(run_dir / "nnlm.weights.h5", lambda tmp: model.save_weights(str(tmp)))
    shutil.rmtree(run_dir / "tokens", ignore_errors=True)
    shutil.rmtree(checkpoints.directory, ignore_errors=True)
    return metrics
