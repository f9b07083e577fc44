"""Pre-training data: a tokenized corpus on disk and deterministic batches drawn from it.

:func:`tokenize_corpus` streams the corpus once through the tokenizer and writes the token ids to
flat binary files (``train.bin``, ``heldout.bin``; uint16 or uint32) with the start offset of
each line (document or paragraph) beside them. :class:`PretrainingBatches` reads the windows each
step needs with ``os.pread``, so memory stays flat however large the corpus is.

Batch ``step`` is a pure function of ``(seed, step)``: a run resumed from a checkpoint at step k
sees exactly the batches an uninterrupted run sees from step k on.

Instances follow RoBERTa's FULL-SENTENCES packing (Liu et al. 2019): a window of contiguous text
from a random offset, across paragraph boundaries. With next-sentence prediction, the window is
split at a random point into A and B; B is replaced, with probability ``random_next_rate``, by text
from a random offset in another line (document). With sentence-order prediction (ALBERT, Lan et
al. 2020), A and B are always the consecutive text of the window, packed as ``B, A`` with
probability ``swap_rate``. With both rates (StructBERT's sentence structural objective, Wang et al.
2020), one draw decides: B from another line (``random_next_rate``), else swapped (``swap_rate``),
else in order. Like NSP's true continuations, they may cross a line (paragraph)
boundary: ALBERT takes them from one document, and the shipped corpus's lines are paragraphs in
article order (98% of its line ends continue the same article), while windows kept within one
line left 48% of every sequence as padding.

With an objective that :attr:`~ptmkit.contract.Objective.needs_parallel_pairs` (XLM's translation
LM), the corpus is a parallel file (:func:`corpus_texts`): its pairs are tokenized as two lines
each, source then target, and an instance is one pair, packed as the segment pair ``source,
target`` (``parallel_pairs``).
"""

from __future__ import annotations

import array
import dataclasses
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.contract import InputSpec, ModelFamily, Objective, SpecialTokens
from ptmkit.errors import DataError
from ptmkit.io import atomic_path, atomic_write_json

ENCODE_CHUNK = 1000  # lines per tokenizer.encode_batch call


@dataclasses.dataclass
class TokenizedSplit:
    """One split of a tokenized corpus: ``{name}.bin`` token ids and ``{name}.offsets.npy``."""

    path: Path
    dtype: np.dtype
    offsets: np.ndarray  # (num_lines + 1,) int64 token offset of each line's start, then the end

    @property
    def num_tokens(self) -> int:
        return int(self.offsets[-1])

    def read(self, fd: int, start: int, count: int) -> np.ndarray:
        """Token ids ``[start, start + count)`` as int32, read with ``os.pread``."""
        size = self.dtype.itemsize
        data = os.pread(fd, count * size, start * size)
        return np.frombuffer(data, dtype=self.dtype).astype(np.int32)

    def line_of(self, position: int) -> int:
        return int(np.searchsorted(self.offsets, position, side="right") - 1)


def _heldout_share(heldout_lines: int, num_lines: int) -> int:
    """``heldout_lines``, or a tenth of the corpus (at least one line, warned) when it would hold
    out more than half: 200 held-out lines of a 50-line corpus left one line to train on."""
    if 2 * heldout_lines <= num_lines:
        return heldout_lines
    share = max(1, num_lines // 10) if num_lines >= 2 else 0
    warnings.warn(
        f"train.heldout_lines = {heldout_lines:,} would hold out more than half of the corpus's {num_lines:,} lines; "
        f"holding out the last {share:,} instead (--set train.heldout_lines=N to choose)",
        stacklevel=3,
    )
    return share


def corpus_texts(path: str | Path, parallel_pairs: bool = False) -> Iterable[str]:
    """The texts of a corpus (:func:`ptmkit.data.readers.read_corpus`), or with ``parallel_pairs``
    those of a parallel file (:func:`ptmkit.data.parallel.read_parallel`): each pair's source, then
    its target, so that pair ``i`` is lines ``2i`` and ``2i + 1``.

    Raises:
        DataError: an unreadable corpus or parallel file.
    """
    if not parallel_pairs:
        from ptmkit.data.readers import read_corpus

        return read_corpus(path)
    from ptmkit.data.parallel import read_parallel

    pairs = read_parallel(path)
    return [text for pair in zip(pairs.sources, pairs.targets, strict=True) for text in pair]


def tokenize_corpus(
    texts: Iterable[str], tokenizer: Any, out_dir: Path, num_lines: int, heldout_lines: int, line_group: int = 1
) -> dict[str, Any]:
    """Tokenize ``texts`` (without special tokens) into ``out_dir/{train,heldout}.bin``.

    The last ``heldout_lines`` of the ``num_lines`` lines go to the held-out split, rounded down
    to a multiple of ``line_group`` (2 for the lines of sentence pairs, which a split never
    cuts). Files are
    written atomically and a ``tokens.json`` summary last, so a half-tokenized corpus is never
    taken for a whole one.

    Returns:
        the summary: dtype, lines and tokens per split.

    Raises:
        DataError: the corpus produced no token.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab = tokenizer.get_vocab_size()
    dtype = np.dtype(np.uint16 if vocab <= np.iinfo(np.uint16).max else np.uint32)
    heldout_lines = _heldout_share(heldout_lines, num_lines) // line_group * line_group
    first_heldout = num_lines - heldout_lines
    # Line offsets as 8-byte machine integers: a Python list of ints would cost ~36 bytes a line.
    counts = {"train": array.array("q", [0]), "heldout": array.array("q", [0])}
    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)  # no character offsets: ~25% faster
    with atomic_path(out_dir / "train.bin") as train_tmp, atomic_path(out_dir / "heldout.bin") as heldout_tmp:
        with open(train_tmp, "wb") as train_out, open(heldout_tmp, "wb") as heldout_out:
            line_index = 0
            chunk: list[str] = []

            def flush() -> None:
                nonlocal line_index
                for encoding in encode(chunk, add_special_tokens=False):
                    split = "heldout" if line_index >= first_heldout else "train"
                    ids = np.asarray(encoding.ids, dtype=dtype)
                    (heldout_out if split == "heldout" else train_out).write(ids.tobytes())
                    counts[split].append(counts[split][-1] + len(ids))
                    line_index += 1
                chunk.clear()

            for text in texts:
                chunk.append(text)
                if len(chunk) >= ENCODE_CHUNK:
                    flush()
            if chunk:
                flush()
    for split, offsets in counts.items():
        np.save(out_dir / f"{split}.offsets.npy", np.frombuffer(offsets, dtype=np.int64))
    summary: dict[str, Any] = {
        "dtype": dtype.name,
        "train": {"lines": len(counts["train"]) - 1, "tokens": counts["train"][-1]},
        "heldout": {"lines": len(counts["heldout"]) - 1, "tokens": counts["heldout"][-1]},
    }
    if summary["train"]["tokens"] == 0:
        raise DataError(f"the corpus has no token left after tokenization ({num_lines} lines read)")
    atomic_write_json(out_dir / "tokens.json", summary)
    return summary


def load_token_file(directory: Path, split: str) -> TokenizedSplit:
    """Open a split written by :func:`tokenize_corpus`."""
    import json

    summary = json.loads((directory / "tokens.json").read_text())
    offsets = np.load(directory / f"{split}.offsets.npy", mmap_mode="r")  # not in memory for huge corpora
    return TokenizedSplit(directory / f"{split}.bin", np.dtype(summary["dtype"]), offsets)


class InstanceSampler:
    """Packs random windows of a :class:`TokenizedSplit` into padded ``(batch, sequence)`` arrays.

    Args:
        tokens: the split to sample from.
        family: packs segments with the family's special tokens.
        specials: the tokenizer's special token ids.
        sequence_length: tokens per instance, specials included.
        segment_pairs: build ``A, B`` pairs with an ``is_random_next`` flag (next-sentence
            prediction) instead of single windows.
        random_next_rate: probability that B comes from another line.
        swap_rate: probability that a pair of consecutive segments is packed in reversed order
            ``B, A`` (flag ``is_swapped``; sentence-order prediction).
        fixed_windows: draw instances from a fixed set, as BERT's ``create_pretraining_data.py``
            made them once (static masking): the corpus tiled into windows of the text budget,
            each tile's segment pairs drawn from a generator seeded by the tile's index, so an
            instance recurs whole, about once per pass over the corpus.
        word_starts: ``(vocabulary_size,)`` bool, True for tokens that begin a word
            (:func:`ptmkit.data.tokenization.word_start_table`); batches then carry
            ``word_start``.
        parallel_pairs: the split's lines are sentence pairs (line ``2i`` a source, ``2i + 1``
            its target, :func:`corpus_texts`): an instance is one pair, packed as the segment
            pair ``source, target``, the longer side cut first until it fits (BERT's
            ``truncate_seq_pair``); a ``start`` is a pair index.
    """

    def __init__(
        self,
        tokens: TokenizedSplit,
        family: ModelFamily,
        specials: SpecialTokens,
        sequence_length: int,
        segment_pairs: bool,
        random_next_rate: float = 0.5,
        swap_rate: float = 0.0,
        word_starts: np.ndarray | None = None,
        fixed_windows: bool = False,
        parallel_pairs: bool = False,
    ) -> None:
        self.tokens = tokens
        self.family = family
        self.specials = specials
        self.sequence_length = sequence_length
        self.segment_pairs = segment_pairs
        self.random_next_rate = random_next_rate
        self.swap_rate = swap_rate
        self.word_starts = word_starts
        self.fixed_windows = fixed_windows
        self.parallel_pairs = parallel_pairs
        self.num_pairs = (len(tokens.offsets) - 1) // 2 if parallel_pairs else 0
        self.budget = sequence_length - family.num_special_tokens(segment_pairs or parallel_pairs)
        if self.budget < (2 if segment_pairs else 1):
            raise DataError(f"sequence_length {sequence_length} leaves no room for text after the special tokens")
        self._fd = os.open(tokens.path, os.O_RDONLY)

    def close(self) -> None:
        os.close(self._fd)

    def _window(self, start: int, count: int) -> list[int]:
        count = max(0, min(count, self.tokens.num_tokens - start))
        return self.tokens.read(self._fd, start, count).tolist()

    def starts(self, count: int) -> list[int]:
        """The starts of at most ``count`` instances tiling the split from its beginning (held-out
        evaluation): token offsets one text budget apart, or pair indices."""
        if self.parallel_pairs:
            return list(range(min(count, self.num_pairs)))
        return list(range(0, self.tokens.num_tokens, self.budget))[:count]

    def pair(self, index: int) -> tuple[list[int], list[int]]:
        """Pair ``index`` packed: ``(token_ids, segment_ids)``, its sides cut to the budget."""
        lines = self.tokens.offsets
        source = self._window(int(lines[2 * index]), int(lines[2 * index + 1] - lines[2 * index]))
        target = self._window(int(lines[2 * index + 1]), int(lines[2 * index + 2] - lines[2 * index + 1]))
        while len(source) + len(target) > self.budget:
            (source if len(source) > len(target) else target).pop()
        return self.family.pack(source, target, self.sequence_length, self.specials)

    def instance(self, rng: np.random.Generator, start: int | None = None) -> tuple[list[int], list[int], int, int]:
        """One packed instance: ``(token_ids, segment_ids, is_random_next, is_swapped)``."""
        if self.parallel_pairs:
            token_ids, segment_ids = self.pair(int(rng.integers(0, self.num_pairs)) if start is None else start)
            return token_ids, segment_ids, 0, 0
        total = self.tokens.num_tokens
        if start is None:
            start = int(rng.integers(0, max(1, total - self.budget)))
        if not self.segment_pairs:
            token_ids, segment_ids = self.family.pack(self._window(start, self.budget), None, self.sequence_length, self.specials)
            return token_ids, segment_ids, 0, 0
        if self.swap_rate > 0:  # a full window near the corpus's end too: both segments hold text
            start = min(start, max(0, total - self.budget))
            first_length = int(rng.integers(1, self.budget))
            first, second = self._window(start, first_length), self._window(start + first_length, self.budget - first_length)
            draw = rng.random()  # one draw: random next (if any), else swapped, else in order
            if draw < self.random_next_rate:
                other = self._other_line_start(rng, start, first_length)
                if other is not None:
                    second = self._window(other, self.budget - first_length) or second
                    token_ids, segment_ids = self.family.pack(first, second, self.sequence_length, self.specials)
                    return token_ids, segment_ids, 1, 0
            elif draw < self.random_next_rate + self.swap_rate and second:
                token_ids, segment_ids = self.family.pack(second, first, self.sequence_length, self.specials)
                return token_ids, segment_ids, 0, 1
            token_ids, segment_ids = self.family.pack(first, second, self.sequence_length, self.specials)
            return token_ids, segment_ids, 0, 0
        first_length = int(rng.integers(1, self.budget))
        first = self._window(start, first_length)
        is_random = int(rng.random() < self.random_next_rate)
        second_start = start + first_length
        if is_random:
            other = self._other_line_start(rng, start, first_length)
            if other is None:
                is_random = 0
            else:
                second_start = other
        second = self._window(second_start, self.budget - first_length)
        if not second:  # the window ran off the end of the corpus: take text from the start
            second = self._window(0, self.budget - first_length)
        token_ids, segment_ids = self.family.pack(first, second, self.sequence_length, self.specials)
        return token_ids, segment_ids, is_random, 0

    def _other_line_start(self, rng: np.random.Generator, start: int, first_length: int) -> int | None:
        """A random offset in another line than ``start``'s (10 tries; None for a corpus of one line)."""
        line = self.tokens.line_of(start)
        for _ in range(10):
            candidate = int(rng.integers(0, max(1, self.tokens.num_tokens - (self.budget - first_length))))
            if self.tokens.line_of(candidate) != line:
                return candidate
        return None

    def batch(self, rng: np.random.Generator, batch_size: int, starts: list[int] | None = None) -> dict[str, np.ndarray]:
        """A padded batch: ``token_ids``, ``segment_ids``, ``padding_mask`` ``(batch_size,
        sequence_length)`` int32, ``is_random_next`` and ``is_swapped`` ``(batch_size,)`` int32,
        and ``word_start`` ``(batch_size, sequence_length)`` int32 when the sampler has
        ``word_starts`` (1 on tokens that begin a word, specials and padding included)."""
        length = self.sequence_length
        token_ids = np.full((batch_size, length), self.specials.padding_id, np.int32)
        segment_ids = np.zeros((batch_size, length), np.int32)
        padding_mask = np.zeros((batch_size, length), np.int32)
        is_random_next = np.zeros((batch_size,), np.int32)
        is_swapped = np.zeros((batch_size,), np.int32)
        tiles = max(1, (self.tokens.num_tokens - self.budget) // self.budget + 1)
        for row in range(batch_size):
            if starts is None and self.fixed_windows and not self.parallel_pairs:  # a pair is a fixed instance already
                tile = int(rng.integers(0, tiles))
                ids, segments, is_random, swapped = self.instance(np.random.default_rng(tile), tile * self.budget)
            else:
                ids, segments, is_random, swapped = self.instance(rng, None if starts is None else starts[row])
            token_ids[row, : len(ids)] = ids
            segment_ids[row, : len(ids)] = segments
            padding_mask[row, : len(ids)] = 1
            is_random_next[row] = is_random
            is_swapped[row] = swapped
        batch = {
            "token_ids": token_ids,
            "segment_ids": segment_ids,
            "padding_mask": padding_mask,
            "is_random_next": is_random_next,
            "is_swapped": is_swapped,
        }
        if self.word_starts is not None:
            batch["word_start"] = self.word_starts[token_ids].astype(np.int32)
        return batch


def sampler_options(objectives: Mapping[str, tuple[Objective, Any]], word_starts: np.ndarray | None = None) -> dict[str, Any]:
    """The :class:`InstanceSampler` keyword arguments the selected ``objectives`` ask for:
    ``segment_pairs`` when one :attr:`~ptmkit.contract.Objective.needs_segment_pairs`, with its
    config's ``random_next_rate`` and ``swap_rate`` (0 when it has none), and ``word_starts``
    when one :meth:`~ptmkit.contract.Objective.needs_word_starts`; ``fixed_windows`` when one's
    config has ``masking = "static"`` (BERT's instances, made once and masked once per copy);
    ``parallel_pairs`` when one :attr:`~ptmkit.contract.Objective.needs_parallel_pairs`."""
    pair_configs = [config for objective, config in objectives.values() if objective.needs_segment_pairs]
    words = any(objective.needs_word_starts(config) for objective, config in objectives.values())
    return {
        "segment_pairs": bool(pair_configs),
        "random_next_rate": sum(float(getattr(c, "random_next_rate", 0.0)) for c in pair_configs),
        "swap_rate": sum(float(getattr(c, "swap_rate", 0.0)) for c in pair_configs),
        "word_starts": word_starts if words else None,
        "fixed_windows": any(getattr(config, "masking", "dynamic") == "static" for _, config in objectives.values()),
        "parallel_pairs": any(objective.needs_parallel_pairs for objective, _ in objectives.values()),
    }


def make_step(
    sampler: InstanceSampler,
    objectives: Mapping[str, tuple[Objective, Any]],
    rng: np.random.Generator,
    batch_size: int,
    vocabulary_size: int,
    inputs: Sequence[InputSpec],
    starts: list[int] | None = None,
    characters: np.ndarray | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Build one training step's ``(inputs, targets, sample_weights)`` for all objectives.

    The objectives see the packed batch (:meth:`InstanceSampler.batch`); what they return under a
    batch key (masked LM's corrupted ``token_ids``) replaces it, and the family's declared
    ``inputs`` are then derived from the batch (:func:`ptmkit.data.tokenization.derive_inputs`,
    ``characters`` the ``char_ids`` table when an input needs it); their other inputs
    (``mask_positions``) are added as they are.
    """
    from ptmkit.data.tokenization import derive_inputs

    batch = sampler.batch(rng, batch_size, starts)
    fields = dict(batch)
    extra_inputs: dict[str, np.ndarray] = {}
    targets: dict[str, np.ndarray] = {}
    weights: dict[str, np.ndarray] = {}
    for objective, config in objectives.values():
        extra, y, w = objective.prepare(batch, rng, config, sampler.specials, vocabulary_size)
        for key, value in extra.items():
            (fields if key in batch else extra_inputs)[key] = value
        targets.update(y)
        weights.update(w)
    model_inputs = derive_inputs(inputs, fields["token_ids"], fields["segment_ids"], fields["padding_mask"], characters)
    return {**model_inputs, **extra_inputs}, targets, {name: relative_weights(w) for name, w in weights.items()}


def relative_weights(weights: np.ndarray) -> np.ndarray:
    """``weights * weights.size / weights.sum()`` (all zeros stay zeros), same shape and dtype.

    Keras' default loss reduction divides the weighted sum by every slot of the batch, padding
    slots of a ``(batch, max_predictions)`` list included; with weights of mean 1 it becomes
    ``sum(w * nll) / sum(w)``, the mean over real predictions that BERT's
    ``get_masked_lm_output`` reports (``numerator / denominator``). Doing it here rather than
    with ``reduction="mean_with_sample_weight"`` keeps Keras' faster default path (5-10% more
    tokens/s in pre-training, ``benchmarks/results/quickstart.md``).
    """
    total = float(weights.sum())
    if total <= 0.0:
        return weights
    return (weights * (weights.size / total)).astype(weights.dtype, copy=False)


def step_rng(seed: int, step: int, stream: int = 0) -> np.random.Generator:
    """The generator for training step ``step`` (``stream`` 1 is evaluation)."""
    return np.random.default_rng([seed, stream, step])
