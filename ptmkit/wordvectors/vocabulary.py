"""Word-level vocabulary for static word vectors: streamed counting, ``min_count`` / ``max_vocab``,
sub-sampling of frequent words, the noise distribution of negative sampling, Huffman codes for
hierarchical softmax, and the corpus encoded once to a flat token file.

Tokens are whitespace-separated words (word2vec's and GloVe's tokenization); blank lines are
skipped by the corpus readers and never become empty sentences. Nothing here holds the corpus in
memory: counting keeps one counter entry per distinct word, and encoding writes ids to disk in
blocks.

References: Mikolov et al. 2013, "Distributed Representations of Words and Phrases and their
Compositionality" (sub-sampling, unigram^0.75 noise), and word2vec.c (``CreateBinaryTree``,
``InitUnigramTable``); gensim 4.4 ``Word2Vec.prepare_vocab`` for the vocabulary order.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from ptmkit.errors import DataError
from ptmkit.io import atomic_path, atomic_write_json

NOISE_TABLE_SIZE = 10_000_000  # word2vec.c uses 1e8; 1e7 resolves probabilities down to 1e-7


@dataclasses.dataclass
class Vocabulary:
    """Words kept for training, most frequent first (ties: first occurrence first; gensim leaves
    ties in ``numpy.argsort`` order).

    Attributes:
        words: list of str, index = word id.
        counts: ``(V,)`` int64 corpus counts.
        tokens_seen: int. Tokens in the corpus, kept or not.
        unique_words: int. Distinct words before ``min_count`` / ``max_vocab``.
        lines: int. Non-blank corpus lines.
    """

    words: list[str]
    counts: np.ndarray
    tokens_seen: int
    unique_words: int
    lines: int

    def __post_init__(self) -> None:
        self.index = {word: i for i, word in enumerate(self.words)}

    def __len__(self) -> int:
        return len(self.words)

    @property
    def kept_tokens(self) -> int:
        """Corpus tokens whose word is in the vocabulary."""
        return int(self.counts.sum())

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``word<TAB>count`` lines (index = line number - 1) atomically."""
        with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as handle:
            for word, count in zip(self.words, self.counts.tolist(), strict=True):
                handle.write(f"{word}\t{count}\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Vocabulary:
        """Read a file written by :meth:`save`.

        Raises:
            DataError: a line that is not ``word<TAB>count`` (file and line named).
        """
        words, counts = [], []
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                word, sep, count = line.rstrip("\n").rpartition("\t")
                if not sep or not count.isdigit():
                    raise DataError(f"{path}:{number}: expected 'word<TAB>count'")
                words.append(word)
                counts.append(int(count))
        array = np.asarray(counts, np.int64)
        return cls(words, array, int(array.sum()), len(words), 0)


def count_words(texts: Iterable[str], lowercase: bool = False) -> tuple[Counter[str], int, int]:
    """Count whitespace-separated words over a stream of lines.

    Returns:
        ``(counter, tokens, lines)``. Memory grows with the number of distinct words only.
    """
    counter: Counter[str] = Counter()
    tokens = lines = 0
    for text in texts:
        words = (text.lower() if lowercase else text).split()
        if words:
            lines += 1
            tokens += len(words)
            counter.update(words)
    return counter, tokens, lines


def build_vocabulary(
    corpus: str | os.PathLike[str], texts: Iterable[str], min_count: int, max_vocab: int = 0, lowercase: bool = False
) -> Vocabulary:
    """Count the corpus and keep words occurring at least ``min_count`` times, at most ``max_vocab``
    of them (0: no limit; the most frequent are kept).

    Args:
        corpus: the corpus path, for messages.
        texts: its lines (e.g. :func:`ptmkit.data.readers.read_corpus`).

    Raises:
        DataError: nothing to train on (an empty corpus, blank lines only, or ``min_count``
            leaving no word); one line with tokens seen, unique words, survivors and a suggestion.
    """
    counted: dict[str, int] = {"records": 0}

    def tracked() -> Iterator[str]:
        for text in texts:
            counted["records"] += 1
            yield text

    try:
        counter, tokens, lines = count_words(tracked(), lowercase)
    except DataError as exc:
        if counted["records"]:
            raise
        found = re.search(r"no text to read \((.*)\);", str(exc))  # the reader says what it saw: "it is empty", "3 line(s), all blank"
        seen = found.group(1) if found else str(exc)
        raise DataError(
            f"{corpus}: no words to train on ({seen}): 0 tokens seen, 0 unique words, 0 with count >= min_count={min_count}; "
            "give a text file with one sentence or paragraph per line"
        ) from None
    ordered = sorted(counter.items(), key=lambda item: -item[1])  # stable: ties keep first occurrence
    kept = [(w, c) for w, c in ordered if c >= min_count]
    if max_vocab:
        kept = kept[:max_vocab]
    if len(kept) < 2:
        top = ordered[0][1] if ordered else 0
        hint = (
            f"lower model.min_count (the most frequent word occurs {top} times), e.g. --set model.min_count=1"
            if tokens
            else "give a corpus with words in it"
        )
        raise DataError(
            f"{corpus}: too few words to train on: {tokens:,} tokens seen in {lines:,} lines, {len(counter):,} unique words, "
            f"{len(kept)} with count >= min_count={min_count} (at least 2 needed); {hint}"
        )
    words = [w for w, _ in kept]
    return Vocabulary(words, np.asarray([c for _, c in kept], np.int64), tokens, len(counter), lines)


def keep_probabilities(counts: np.ndarray, sample: float) -> np.ndarray:
    """Probability of keeping each occurrence of a word under sub-sampling with threshold ``sample``.

    word2vec.c's formula (also gensim's): ``(sqrt(c / (t N)) + 1) (t N) / c``, capped at 1, with
    ``c`` the word's count and ``N`` the kept tokens. ``sample = 0`` keeps everything.

    Returns:
        ``(V,)`` float64 in ``(0, 1]``.
    """
    if sample <= 0:
        return np.ones(len(counts))
    threshold = sample * counts.sum()
    probabilities = (np.sqrt(counts / threshold) + 1.0) * threshold / counts
    return np.minimum(probabilities, 1.0)


def noise_table(counts: np.ndarray, exponent: float = 0.75, size: int = NOISE_TABLE_SIZE) -> np.ndarray:
    """word2vec's unigram table: word ids in proportion to ``count ** exponent``.

    Drawing uniform positions of the table samples the noise distribution of negative sampling.

    Returns:
        ``(size,)`` int32, sorted by word id.
    """
    weights = counts.astype(np.float64) ** exponent
    cumulative = np.cumsum(weights) / weights.sum()
    table = np.searchsorted(cumulative, (np.arange(size) + 0.5) / size, side="right")
    return np.minimum(table, len(counts) - 1).astype(np.int32)


@dataclasses.dataclass
class HuffmanCodes:
    """Binary Huffman codes of the vocabulary for hierarchical softmax (word2vec.c's tree).

    Attributes:
        codes: ``(total,)`` uint8 concatenated codes (the bit of each inner node on the path).
        points: ``(total,)`` int32 concatenated inner-node ids (``0 .. V-2``), root first.
        offsets: ``(V + 1,)`` int64; word ``w``'s path is ``offsets[w]:offsets[w + 1]``.
    """

    codes: np.ndarray
    points: np.ndarray
    offsets: np.ndarray

    def lengths(self) -> np.ndarray:
        """``(V,)`` code lengths."""
        return np.diff(self.offsets)


def huffman_codes(counts: np.ndarray) -> HuffmanCodes:
    """Build the Huffman tree of ``counts`` (``V >= 2``), as word2vec.c's ``CreateBinaryTree``.

    Frequent words get short codes; ``sum(counts * lengths)`` is minimal (any Huffman tree of
    the same counts has the same weighted path length).
    """
    size = len(counts)
    heap = [(int(c), i) for i, c in enumerate(counts.tolist())]
    heapq.heapify(heap)
    parent = np.zeros(2 * size - 1, np.int64)
    binary = np.zeros(2 * size - 1, np.uint8)
    for node in range(size, 2 * size - 1):
        (c1, n1), (c2, n2) = heapq.heappop(heap), heapq.heappop(heap)
        parent[n1], parent[n2] = node, node
        binary[n2] = 1
        heapq.heappush(heap, (c1 + c2, node))
    root = 2 * size - 2
    codes: list[int] = []
    points: list[int] = []
    offsets = [0]
    for word in range(size):
        bits: list[int] = []
        nodes: list[int] = []
        node = word
        while node != root:
            bits.append(int(binary[node]))
            node = int(parent[node])
            nodes.append(node - size)
        codes.extend(reversed(bits))
        points.extend(reversed(nodes))
        offsets.append(len(codes))
    return HuffmanCodes(np.asarray(codes, np.uint8), np.asarray(points, np.int32), np.asarray(offsets, np.int64))


@dataclasses.dataclass
class EncodedCorpus:
    """The corpus as word ids: ``ids`` ``(tokens,)`` int32 (out-of-vocabulary words dropped) and
    ``offsets`` ``(sentences + 1,)`` int64 where sentence ``s`` is ``ids[offsets[s]:offsets[s+1]]``.

    Lines are sentences, never cut (a 25,000-word line is one sentence); lines left with no
    in-vocabulary word are dropped.
    """

    ids: np.ndarray
    offsets: np.ndarray
    raw_tokens: int

    def chunks(self, max_tokens: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield ``(ids, sentence_of_each_token)`` for runs of whole sentences of about
        ``max_tokens`` tokens (a longer sentence comes alone)."""
        starts = self.offsets
        first = 0
        while first < len(starts) - 1:
            limit = starts[first] + max_tokens
            last = int(np.searchsorted(starts, limit, side="right")) - 1
            last = max(last, first + 1)
            last = min(last, len(starts) - 1)
            lo, hi = int(starts[first]), int(starts[last])
            ids = np.asarray(self.ids[lo:hi])
            lengths = np.diff(starts[first : last + 1])
            yield ids, np.repeat(np.arange(first, last, dtype=np.int64), lengths)
            first = last


def encode_corpus(
    texts: Iterable[str], vocabulary: Vocabulary, directory: str | os.PathLike[str], lowercase: bool = False, block: int = 1 << 20, unknown: int | None = None, end: int | None = None
) -> EncodedCorpus:
    """Write the corpus as word ids to ``directory/ids.int32`` and ``offsets.int64``, in blocks.

    Args:
        unknown: the id out-of-vocabulary words become (a language model's ``<unk>``); None drops them.
        end: an id appended to every line (a language model's ``</s>``); None appends nothing.

    Returns:
        the :class:`EncodedCorpus` (memory-mapped).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    index = vocabulary.index
    offsets = [0]
    total = raw = 0
    with atomic_path(directory / "ids.int32") as tmp, open(tmp, "wb") as out:
        buffer: list[int] = []
        for text in texts:
            words = (text.lower() if lowercase else text).split()
            raw += len(words)
            if unknown is None:
                ids = [i for i in map(index.get, words) if i is not None]
            else:
                ids = [index.get(w, unknown) for w in words]
            if not ids:
                continue
            if end is not None:
                ids.append(end)
            buffer.extend(ids)
            total += len(ids)
            offsets.append(total)
            if len(buffer) >= block:
                out.write(np.asarray(buffer, np.int32).tobytes())
                buffer = []
        out.write(np.asarray(buffer, np.int32).tobytes())
    with atomic_path(directory / "offsets.int64") as tmp:
        np.asarray(offsets, np.int64).tofile(tmp)
    atomic_write_json(directory / "tokens.json", {"tokens": total, "sentences": len(offsets) - 1, "raw_tokens": raw})
    return load_token_file(directory)


def load_token_file(directory: str | os.PathLike[str]) -> EncodedCorpus:
    """Memory-map a token file written by :func:`encode_corpus`."""
    directory = Path(directory)
    meta = json.loads((directory / "tokens.json").read_text())
    ids = np.memmap(directory / "ids.int32", np.int32, "r") if meta["tokens"] else np.zeros(0, np.int32)
    offsets = np.fromfile(directory / "offsets.int64", np.int64)
    return EncodedCorpus(ids, offsets, int(meta["raw_tokens"]))
