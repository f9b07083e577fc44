"""The training loop of word-prediction models (word2vec, fastText): epochs over the encoded
corpus, sub-sampling, examples built in NumPy on a producer thread, a linearly decaying learning
rate, and the sparse SGD step of :mod:`ptmkit.wordvectors.word_prediction`.

The corpus is read from its token file one chunk of whole sentences at a time, so memory does not
grow with the corpus. The producer thread (NumPy: sub-sampling, windows, noise words) overlaps
with the step (XLA, which releases the GIL); one producer and one consumer keep a run
deterministic for a seed.
"""

from __future__ import annotations

import dataclasses
import functools
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ptmkit.rundir import EPOCH_CHECKPOINT_STATE, EPOCH_CHECKPOINTS
from ptmkit.wordvectors.vocabulary import EncodedCorpus, Vocabulary, keep_probabilities
from ptmkit.wordvectors.word_prediction import (
    Examples,
    OutputLayer,
    WordPredictionStep,
    make_batch,
    make_window_batch,
    slot_groups,
)

ExampleMaker = Callable[[np.ndarray, np.ndarray, np.random.Generator], Examples]
#: The run-directory folder of :class:`EpochCheckpoints` (word2vec and fastText runs).
CHECKPOINT_DIR = EPOCH_CHECKPOINTS


def prepare_corpus(corpus: Path, run_dir: Path, min_count: int, max_vocab: int, lowercase: bool, console: Any, note: str = "") -> tuple[Vocabulary, EncodedCorpus]:
    """Count the vocabulary of ``corpus`` (streamed), report it on ``console`` and encode the corpus
    as word ids into ``run_dir/tokens`` (the caller removes that directory when training ends).

    Raises:
        DataError: an empty corpus, blank lines only, or no word surviving ``min_count``.
    """
    from ptmkit.data.readers import read_corpus
    from ptmkit.wordvectors.vocabulary import build_vocabulary, encode_corpus

    vocabulary = build_vocabulary(corpus, read_corpus(corpus), min_count, max_vocab, lowercase)
    console.print(
        f"vocabulary: {len(vocabulary):,} words with count >= {min_count} of {vocabulary.unique_words:,} unique; "
        f"{vocabulary.tokens_seen:,} tokens in {vocabulary.lines:,} lines{note}"
    )
    return vocabulary, encode_corpus(read_corpus(corpus), vocabulary, run_dir / "tokens", lowercase)


@dataclasses.dataclass
class SGDSchedule:
    """Epochs and the learning rate, decaying linearly from ``alpha`` to ``min_alpha`` over all
    epochs by the fraction of corpus words processed (word2vec.c, gensim).

    Attributes:
        epochs: passes over the corpus.
        alpha: initial learning rate.
        min_alpha: final learning rate.
        sample: sub-sampling threshold ``t`` (0: off).
        batch_examples: examples per step.
        pad_width: bag and item widths are rounded up to multiples of this (fewer XLA programs).
        chunk_tokens: tokens per corpus chunk (examples are built chunk by chunk).
        seed: seeds initialisation, windows, sub-sampling and noise words.
        jit_compile: XLA-compile the step.
        hot_limit: a row updated more often in one batch gets ``hot_limit / n`` of each update
            (:func:`ptmkit.wordvectors.word_prediction.make_batch`); 0 turns this off.
        windows: the examples are windows whose context rows are separate inputs sharing the
            window's output items (:func:`ptmkit.wordvectors.word_prediction.make_window_batch`);
            ``batch_examples`` counts windows.
        window: the context window of window batches: their steps hold slot groups of widths
            2, 4, .. ``2 x window`` (:func:`ptmkit.wordvectors.word_prediction.slot_groups`); 0:
            one group as wide as a call's widest window.
        shared_negatives: examples with several targets (fastText's skip-gram windows) draw
            their noise words once, shared by their targets (:func:`make_batch`).
        updates_per_call: batches of ``batch_examples`` stacked into one call of the step,
            which updates with them one after the other (an XLA loop; see
            :class:`ptmkit.wordvectors.word_prediction.WordPredictionStep`).
    """

    epochs: int = 5
    alpha: float = 0.025
    min_alpha: float = 0.0001
    sample: float = 1e-3
    batch_examples: int = 4096
    pad_width: int = 4
    chunk_tokens: int = 65536
    seed: int = 1
    jit_compile: bool = True
    hot_limit: float = 64.0
    windows: bool = False
    window: int = 0
    shared_negatives: bool = False
    updates_per_call: int = 16

    def lr(self, progress: float) -> float:
        return max(self.min_alpha, self.alpha - (self.alpha - self.min_alpha) * progress)


PAIRS_PER_CALL = 32768


def auto_updates_per_call(batch_examples: int, pairs_per_example: float = 1.0) -> int:
    """SGD steps a call of the compiled step for about :data:`PAIRS_PER_CALL` word pairs a call
    (a window holds up to ``2 x window`` pairs; a dynamic window about 60% of that)."""
    return max(1, round(PAIRS_PER_CALL / (0.6 * pairs_per_example if pairs_per_example > 1 else 1.0) / batch_examples))


Call = tuple[dict[str, np.ndarray], np.ndarray, int, int, int]


def _calls(tokens: EncodedCorpus, counts: np.ndarray, make: ExampleMaker, output: OutputLayer, schedule: SGDSchedule, start_epoch: int = 0) -> Iterator[Call]:
    """Yield the step calls of epochs ``start_epoch ..`` of the run: ``(batches (K, P, ...),
    learning rates (K,), epoch, raw_words_done, real updates)`` with ``K = updates_per_call``
    batches of ``P = batch_examples`` examples (window batches: as many windows as the slot
    groups of ``K`` steps hold, :func:`make_window_batch`). Each epoch draws from its own generator (seeded
    with ``(seed, epoch)``) and ends with its own call, padded with empty batches (learning rate
    0), so that a run resumed at an epoch boundary repeats the uninterrupted run exactly."""
    keep = keep_probabilities(counts, schedule.sample)
    per_epoch = max(len(tokens.ids), 1)
    total = per_epoch * schedule.epochs
    buffer: list[Examples] = []
    progress: list[np.ndarray] = []
    buffered = 0
    raw_per_token = tokens.raw_tokens / per_epoch
    done = per_epoch * start_epoch
    size, updates = schedule.batch_examples, max(1, schedule.updates_per_call)
    if schedule.windows and schedule.window:
        group = updates * sum(per_step for _, per_step in slot_groups(schedule.window, size))
    else:
        group = size * updates

    def batches(examples: Examples, where: np.ndarray, start: int) -> tuple[dict[str, np.ndarray], np.ndarray, int, int]:
        """A call from the examples at ``start``: ``(arrays, learning rates, examples taken, steps)``."""
        lrs = np.zeros(updates, np.float32)
        stop = min(start + group, len(examples))
        if schedule.windows:
            made = make_window_batch(examples.slice(start, stop), output, rng, size, schedule.pad_width, schedule.hot_limit, updates, schedule.window or None)
            # Each slot group's windows are spread evenly over the steps.
            firsts = start + np.arange(made.steps) * made.windows // max(made.steps, 1)
            lrs[: made.steps] = [schedule.lr(float(where[i])) for i in firsts]
            return made.arrays, lrs, made.windows, made.steps
        arrays = make_batch(examples.slice(start, stop), output, rng, size, schedule.pad_width, schedule.hot_limit, schedule.shared_negatives, updates)
        firsts = np.arange(start, stop, size)
        lrs[: len(firsts)] = [schedule.lr(float(where[i])) for i in firsts]
        return arrays, lrs, stop - start, len(firsts)

    def emit(final: bool, epoch: int) -> Iterator[Call]:
        nonlocal buffer, progress, buffered
        if not buffer:
            return
        examples = Examples.concatenate(buffer) if len(buffer) > 1 else buffer[0]
        where = np.concatenate(progress)
        start = 0
        while len(examples) - start >= group or (final and start < len(examples)):
            arrays, lrs, taken, steps = batches(examples, where, start)
            start += taken
            yield arrays, lrs, epoch, int(where[start - 1] * total * raw_per_token), steps
        buffer = [examples.slice(start, len(examples))] if start < len(examples) else []
        progress = [where[start:]] if start < len(examples) else []
        buffered = len(examples) - start

    for epoch in range(start_epoch, schedule.epochs):
        rng = epoch_rng(schedule.seed, epoch)
        for ids, sentence in tokens.chunks(schedule.chunk_tokens):
            kept = rng.random(len(ids)) < keep[ids]
            examples = make(ids[kept], sentence[kept], rng)
            lo, hi = done / total, (done + len(ids)) / total
            done += len(ids)
            if len(examples):
                buffer.append(examples)
                progress.append(np.linspace(lo, hi, len(examples), endpoint=False))
                buffered += len(examples)
            if buffered >= group:
                yield from emit(final=False, epoch=epoch)
        yield from emit(final=True, epoch=epoch)


T = TypeVar("T")


def _produced(calls: Iterator[T]) -> Generator[T, None, None]:
    """``calls``, built on a thread (NumPy) while the caller runs the step (XLA, which releases
    the GIL)."""
    items: queue.Queue[Any] = queue.Queue(maxsize=6)
    failure: list[BaseException] = []
    stop = threading.Event()

    def put(item: Any) -> bool:
        """Queue ``item`` unless the trainer stopped (then the queue may stay full forever)."""
        while not stop.is_set():
            try:
                items.put(item, timeout=0.5)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in calls:
                if not put(item):
                    return
        except BaseException as exc:  # re-raised in the training thread
            failure.append(exc)
        finally:
            put(None)

    producer = threading.Thread(target=produce, name="ptmkit-examples", daemon=True)
    producer.start()
    try:
        while (item := items.get()) is not None:
            yield item
    finally:
        stop.set()
        producer.join()
    if failure:
        raise failure[0]


@dataclasses.dataclass(frozen=True)
class EpochCheckpoints:
    """Checkpoints of a run at epoch ends (word2vec, fastText, GloVe): what ``ptmkit train
    --resume`` continues from. An epoch's calls end with the epoch (:func:`_calls`) and each
    epoch's random draws depend only on ``(seed, epoch)``, so a resumed run equals the
    uninterrupted one (test).

    Attributes:
        directory: holds ``state-E.npz`` (the trained matrices after ``E`` epochs)
            and ``state.json`` (which state file, epochs done, seconds trained, the run's
            fingerprint), each written atomically, the JSON last and older states removed after
            it, so that a crash while saving leaves the previous checkpoint usable; the family
            removes the directory when the run ends.
        every_seconds: save at an epoch's end once this many seconds have passed since the
            run (or the last save) started; 0: after every epoch.
        resume: continue from the state in ``directory`` (a RunDirError when there is none).
    """

    directory: Path
    every_seconds: float = 60.0
    resume: bool = False

    @classmethod
    def of_run(cls, run_dir: Path, every_seconds: float = 60.0, resume: bool = False) -> EpochCheckpoints:
        """The checkpoints of the run in ``run_dir`` (its :data:`CHECKPOINT_DIR` folder)."""
        return cls(Path(run_dir) / CHECKPOINT_DIR, every_seconds, resume)

    @property
    def exists(self) -> bool:
        """Whether a complete state was saved (``state.json`` is written last)."""
        return (self.directory / EPOCH_CHECKPOINT_STATE).exists()

    def save(self, epochs_done: int, arrays: dict[str, np.ndarray], seconds: float, fingerprint: dict[str, Any]) -> None:
        """Write the named ``arrays`` (the trained matrices; GloVe's AdaGrad state too) after
        ``epochs_done`` epochs and ``seconds`` of training."""
        from ptmkit.io import atomic_save, atomic_write_json

        self.directory.mkdir(parents=True, exist_ok=True)
        name = f"state-{epochs_done}.npz"

        def write(path: Path) -> None:
            with open(path, "wb") as handle:
                named: dict[str, Any] = {**arrays, "epochs_done": np.int64(epochs_done)}
                np.savez(handle, **named)

        atomic_save(self.directory / name, write)
        atomic_write_json(self.directory / EPOCH_CHECKPOINT_STATE, {"file": name, "epochs_done": epochs_done, "train_seconds": round(seconds, 2), "fingerprint": fingerprint})
        for old in self.directory.glob("state-*.npz"):
            if old.name != name:
                old.unlink(missing_ok=True)

    def load(self, fingerprint: dict[str, Any], shapes: dict[str, tuple[int, ...]], dtypes: dict[str, Any] | None = None) -> tuple[int, dict[str, np.ndarray], float]:
        """``(epochs_done, arrays, seconds trained)`` of the saved state: the arrays named in
        ``shapes``, each checked against its shape and dtype (``dtypes``; float32 unless named).

        Raises:
            RunDirError: no complete state, an unreadable one, arrays missing or of the wrong
                shape or dtype, or one of another run (the corpus, vocabulary, sizes or schedule
                differ from ``fingerprint``).
        """
        import json
        import zipfile

        from ptmkit.errors import RunDirError

        meta_file = self.directory / EPOCH_CHECKPOINT_STATE
        if not meta_file.exists():
            raise RunDirError(f"{self.directory}: no epoch checkpoint to resume from (the run stopped before saving one); delete the run directory and start again")
        state_file = meta_file
        try:
            meta = json.loads(meta_file.read_text(encoding="utf-8"))
            state_file = self.directory / str(meta["file"])
            with np.load(state_file) as state:
                arrays = {name: state[name] for name in shapes}
                epochs_done = int(state["epochs_done"])
        except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as error:
            raise RunDirError(f"{state_file}: unreadable checkpoint ({type(error).__name__}: {error}); delete the run directory and start again") from None
        # Another run's checkpoint first: its matrices differ too, and that is not the cause.
        saved = meta.get("fingerprint", {})
        changed = sorted(key for key in set(saved) | set(fingerprint) if saved.get(key) != fingerprint.get(key))
        if changed:
            raise RunDirError(f"{meta_file}: the checkpoint is of another run ({', '.join(changed)} differ: was the corpus or the config changed?); use another --out")
        for name, shape in shapes.items():
            dtype = np.dtype((dtypes or {}).get(name, np.float32))
            if arrays[name].shape != tuple(shape) or arrays[name].dtype != dtype:
                raise RunDirError(
                    f"{state_file}: its {name} matrix is {arrays[name].dtype} {arrays[name].shape}, this run needs {dtype} {tuple(shape)}; delete the run directory and start again"
                )
        if epochs_done != meta.get("epochs_done"):
            raise RunDirError(f"{state_file}: holds epoch {epochs_done} but {meta_file} says {meta.get('epochs_done')}; delete the run directory and start again")
        return epochs_done, arrays, float(meta.get("train_seconds", 0.0))

    def due(self, last_save: float) -> bool:
        """Whether an epoch ending now should be saved (``every_seconds`` since ``last_save``,
        a ``time.perf_counter()``)."""
        return time.perf_counter() - last_save >= self.every_seconds


def epoch_rng(seed: int, epoch: int) -> np.random.Generator:
    """Epoch ``epoch``'s random generator, seeded with ``(seed, epoch)``: a resumed run draws
    what the uninterrupted run drew in that epoch."""
    return np.random.default_rng([seed, epoch])


class ResumableEpochs:
    """The epoch loop that the word2vec, fastText, GloVe and NNLM trainers share: resume from an
    epoch checkpoint, each epoch's random draws from ``(seed, epoch)``, save at epoch ends every
    ``checkpoint_seconds``, and the training seconds without the saving.

    A resumed run equals the uninterrupted one bit for bit when everything random in epoch ``E``
    is drawn from :meth:`rng` ``(E)`` and the saved ``state`` is all that changes between epochs
    (test: ``tests/test_wordvector_resume.py``).

    Args:
        epochs: the run's epochs.
        seed: the run's seed.
        checkpoints: where to save (and, with ``checkpoints.resume``, resume from); None: never.
        fingerprint: what must not change between a checkpoint and its resumption (the corpus,
            vocabulary, sizes, settings; JSON-able); called at most once, when a checkpoint is
            read or written (it may hash the corpus).
        report: called with the ``resuming after epoch ...`` line.

    Use::

        epochs = ResumableEpochs(config.epochs, config.seed, checkpoints, fingerprint, print)
        state = epochs.resume({"params": shape})  # None unless resuming; assign it to the model
        epochs.start()
        for epoch in epochs.run(lambda: {"params": params.numpy()}):
            order = epochs.rng(epoch).permutation(n)  # the epoch's draws
            ...  # train the epoch; the state is saved after it when due (never after the last)
        metrics = {"train_seconds": round(epochs.seconds(), 2), **epochs.stats()}

    A trainer whose epochs arrive as a stream calls :meth:`end_epoch` itself instead of :meth:`run`.
    """

    def __init__(
        self,
        epochs: int,
        seed: int,
        checkpoints: EpochCheckpoints | None,
        fingerprint: Callable[[], dict[str, Any]],
        report: Callable[[str], Any] | None = None,
    ) -> None:
        import json

        self.epochs, self.seed, self.checkpoints, self.report = epochs, seed, checkpoints, report
        # A JSON round trip: tuples become lists, as in the saved ``state.json`` they are compared with.
        self.fingerprint = functools.cache(lambda: json.loads(json.dumps(fingerprint())))
        self.start_epoch, self.seconds_before = 0, 0.0
        self.saving = 0.0
        self.started = self._last_save = time.perf_counter()

    def resume(self, shapes: dict[str, tuple[int, ...]], dtypes: dict[str, Any] | None = None) -> dict[str, np.ndarray] | None:
        """The saved arrays named in ``shapes`` when resuming (and sets :attr:`start_epoch`);
        None for a fresh run.

        Raises:
            RunDirError: no usable checkpoint of this run (:meth:`EpochCheckpoints.load`).
        """
        if self.checkpoints is None or not self.checkpoints.resume:
            return None
        self.start_epoch, state, self.seconds_before = self.checkpoints.load(self.fingerprint(), shapes, dtypes)
        if self.report is not None:
            self.report(f"resuming after epoch {self.start_epoch}/{self.epochs} from {self.checkpoints.directory}")
        return state

    def rng(self, epoch: int) -> np.random.Generator:
        """Epoch ``epoch``'s random generator, seeded with ``(seed, epoch)``."""
        return epoch_rng(self.seed, epoch)

    def start(self) -> None:
        """Start the training clock (and the time since the last save)."""
        self.started = self._last_save = time.perf_counter()
        self.saving = 0.0

    def run(self, state: Callable[[], dict[str, np.ndarray]]) -> Iterator[int]:
        """The epochs left, ``start_epoch .. epochs - 1``; after each, :meth:`end_epoch`."""
        for epoch in range(self.start_epoch, self.epochs):
            yield epoch
            self.end_epoch(epoch + 1, state)

    def end_epoch(self, epochs_done: int, state: Callable[[], dict[str, np.ndarray]]) -> None:
        """Save ``state()`` (named arrays) after ``epochs_done`` epochs when a save is due
        (``checkpoint_seconds`` since the last one); never after the last epoch."""
        if self.checkpoints is None or epochs_done >= self.epochs or not self.checkpoints.due(self._last_save):
            return
        begin = time.perf_counter()
        self.checkpoints.save(epochs_done, state(), self.seconds_before + begin - self.started - self.saving, self.fingerprint())
        self._last_save = time.perf_counter()
        self.saving += self._last_save - begin

    def seconds(self) -> float:
        """Seconds trained in this process since :meth:`start`, saving excluded."""
        return time.perf_counter() - self.started - self.saving

    def stats(self, seconds: float | None = None) -> dict[str, Any]:
        """``checkpoint_seconds`` (with checkpoints) and, when resumed, ``resumed_after_epoch``
        and ``train_seconds_all_sessions`` (``seconds``: this process's, default :meth:`seconds`)."""
        seconds = self.seconds() if seconds is None else seconds
        stats: dict[str, Any] = {}
        if self.start_epoch:
            stats["resumed_after_epoch"] = self.start_epoch
            stats["train_seconds_all_sessions"] = round(self.seconds_before + seconds, 2)
        if self.checkpoints is not None:
            stats["checkpoint_seconds"] = round(self.saving, 2)
        return stats


def vocabulary_fingerprint(counts: np.ndarray) -> dict[str, Any]:
    """The vocabulary's part of a checkpoint fingerprint: its size and a hash of its counts
    (min_count and the words' frequencies)."""
    import hashlib

    return {"vocabulary": len(counts), "counts_sha1": hashlib.sha1(np.ascontiguousarray(counts, np.int64).tobytes()).hexdigest()}


def tokens_sha1(tokens: EncodedCorpus) -> str:
    """A hash of an encoded corpus: its word ids and line offsets (the same words in another
    order differ), read 16 MB at a time (the token file may be memory-mapped)."""
    import hashlib

    corpus = hashlib.sha1()
    for array, dtype in ((tokens.ids, np.int32), (tokens.offsets, np.int64)):
        for start in range(0, len(array), 1 << 22):
            corpus.update(np.ascontiguousarray(array[start : start + (1 << 22)], dtype).tobytes())
    return corpus.hexdigest()


def run_fingerprint(tokens: EncodedCorpus, counts: np.ndarray, input_matrix: np.ndarray, output: OutputLayer, schedule: SGDSchedule) -> dict[str, Any]:
    """What must not change between a checkpoint and its resumption: the vocabulary (size and a
    hash of the counts: min_count and the words' frequencies), the encoded corpus (a hash of its
    word ids and sentence offsets: the same counts in another order differ), the matrix shapes and
    the schedule."""
    import json

    return json.loads(json.dumps({
        **vocabulary_fingerprint(counts),
        "tokens_sha1": tokens_sha1(tokens),
        "input_shape": list(input_matrix.shape),
        "output_rows": output.rows,
        "schedule": dataclasses.asdict(schedule),
    }))


def train_word_prediction(
    tokens: EncodedCorpus,
    counts: np.ndarray,
    make: ExampleMaker,
    output: OutputLayer,
    input_matrix: np.ndarray,
    schedule: SGDSchedule,
    report: Callable[[str], Any] | None = None,
    checkpoints: EpochCheckpoints | None = None,
    source: str = "corpus",
) -> tuple[WordPredictionStep, dict[str, Any]]:
    """Train input and output vectors on ``tokens``.

    Args:
        tokens: the encoded corpus.
        source: the corpus's name in error messages (its path).
        counts: ``(V,)`` word counts (sub-sampling).
        make: builds a chunk's examples from ``(ids, sentence, rng)`` (skip-gram or CBOW).
        output: negative sampling and/or hierarchical softmax.
        input_matrix: ``(rows, dim)`` float32 initial input vectors.
        schedule: epochs, learning rate, batch sizes, seed.
        report: called with one progress line per epoch.
        checkpoints: save the matrices at epoch ends (and, with ``resume``, start from them).

    Returns:
        ``(step, stats)``: the step holds the trained matrices; ``stats`` has ``train_seconds``
        (this process's training loop, checkpoint writing excluded), ``words_per_second`` (raw
        corpus words over those seconds, as gensim counts them), ``raw_words``, ``steps`` and
        ``final_loss`` (mean item log loss of the last epoch); a resumed run adds
        ``resumed_after_epoch`` and ``train_seconds_all_sessions``, and ``checkpoint_seconds``
        says how long saving took.

    Raises:
        RunDirError: ``checkpoints.resume`` without a usable checkpoint of this run.
        DataError: no example was made (sub-sampling dropped every word of a tiny corpus).
    """
    _one_thread_per_step()
    # Hashing the corpus is a pass over it: done only when a checkpoint is read or written.
    loop = ResumableEpochs(schedule.epochs, schedule.seed, checkpoints, functools.partial(run_fingerprint, tokens, counts, input_matrix, output, schedule), report)
    step = _resumed_step(loop, input_matrix, output, schedule)
    start_epoch = loop.start_epoch
    # The producer thread makes each call's arrays and their tensors.
    calls = ((step.feeds(batch, lrs), epoch, words, updates) for batch, lrs, epoch, words, updates in _calls(tokens, counts, make, output, schedule, start_epoch))
    produced = _produced(calls)
    loop.start()
    steps, losses, last_epoch = _run_calls(step, produced, loop, tokens.raw_tokens * start_epoch, report)
    seconds = loop.seconds()
    if not steps:
        raise _no_example_error(source, tokens, schedule, start_epoch)
    raw_words = tokens.raw_tokens * (schedule.epochs - start_epoch)
    if report is not None:
        report(_line(last_epoch, schedule.epochs, losses, raw_words, seconds))
    stats: dict[str, Any] = {
        "train_seconds": round(seconds, 2),
        "words_per_second": round(raw_words / max(seconds, 1e-9), 1),
        "raw_words": raw_words,
        "steps": steps,
        "final_loss": round(float(np.mean(losses)), 4) if losses else None,
        **loop.stats(seconds),
    }
    return step, stats


def _resumed_step(loop: ResumableEpochs, input_matrix: np.ndarray, output: OutputLayer, schedule: SGDSchedule) -> WordPredictionStep:
    """The step on ``input_matrix`` and a zero output matrix, or on the checkpoint's matrices
    when ``loop`` resumes one (:meth:`ResumableEpochs.resume`, which sets its ``start_epoch``)."""
    output_matrix = None
    state = loop.resume({"input": input_matrix.shape, "output": (output.rows, input_matrix.shape[1])})
    if state is not None:
        input_matrix, output_matrix = state["input"], state["output"]
    return WordPredictionStep(input_matrix, output.rows, schedule.jit_compile, grouped=schedule.windows, output_matrix=output_matrix)


def _run_calls(
    step: WordPredictionStep, produced: Generator[tuple[Any, int, int, int], None, None], loop: ResumableEpochs, first_words: int, report: Callable[[str], Any] | None
) -> tuple[int, list[float], int]:
    """Run the ``produced`` calls ``(feeds, epoch, words, updates)``; when an epoch ends, report
    its line and let ``loop`` save the matrices (:meth:`ResumableEpochs.end_epoch`).

    Returns:
        ``(updates made, the last epoch's losses, the last epoch)``.
    """
    steps = 0
    losses: list[float] = []
    current_epoch = loop.start_epoch
    try:
        for feeds, epoch, words, updates in produced:
            if epoch != current_epoch:  # every call of the epochs before ``epoch`` has run
                if report is not None:
                    report(_line(current_epoch, loop.epochs, losses, words - first_words, loop.seconds()))
                losses = []
                loop.end_epoch(epoch, lambda: {"input": step.input_vectors(), "output": step.output_vectors()})
            current_epoch = epoch
            losses.append(step.run(feeds))
            steps += updates
    finally:
        produced.close()
    return steps, losses, current_epoch


def _no_example_error(source: str, tokens: EncodedCorpus, schedule: SGDSchedule, start_epoch: int) -> Exception:
    """The :class:`~ptmkit.errors.DataError` of a run that made no example."""
    from ptmkit.errors import DataError

    return DataError(
        f"{source}: no training example in {schedule.epochs - start_epoch} epoch(s): sub-sampling (model.sample = {schedule.sample:g}) and the window left no pair of words "
        f"in {len(tokens.ids):,} tokens; on a corpus this small set --set model.sample=0"
    )


def _one_thread_per_step() -> None:
    """Run TensorFlow's ops on the calling thread (intra- and inter-op pools of one thread).

    The step is one XLA program whose loops run on one core anyway; TensorFlow's pools added
    a third of its CPU time (0.87 s of CPU an epoch for 0.64 s of wall time, skip-gram, quiet
    machine), taken from the producer thread on the other core. Only possible before
    TensorFlow starts its runtime; later (several trainings in one process) this does nothing.
    """
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:  # the runtime is already initialised
        pass


def _line(epoch: int, epochs: int, losses: list[float], words: int, seconds: float) -> str:
    loss = f"{np.mean(losses):.4f}" if losses else "-"
    return f"epoch {epoch + 1}/{epochs}: loss {loss}, {words / max(seconds, 1e-9):,.0f} words/s"
