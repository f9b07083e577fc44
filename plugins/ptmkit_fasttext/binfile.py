"""Facebook fastText ``.bin`` models, read as facebookresearch/fastText's ``FastText::saveModel``
writes them: ``Args``, ``Dictionary``, then the input matrix (``nwords + bucket`` rows) and the
output matrix. Format versions 11/12 start with the magic number 793712314 and the version; the
older format (fastText before 2017, e.g. gensim's test models) has neither, no prune index and no
quantization flags, as gensim's ``_fasttext_bin`` reads it. Quantized models (``.ftz``) are refused.
"""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ptmkit.api import DataError

MAGIC = 793712314
MODELS = {1: "cbow", 2: "skipgram", 3: "supervised"}
LOSSES = {1: "hs", 2: "ns", 3: "softmax", 4: "ova"}


@dataclasses.dataclass
class FastTextModel:
    """A fastText model: its arguments, vocabulary (words, then labels) and matrices."""

    args: dict[str, float | int | str]
    words: list[str]
    counts: np.ndarray
    labels: list[str]
    ntokens: int
    input: np.ndarray
    output: np.ndarray


def _read(handle: BinaryIO, fmt: str, path: Path) -> tuple:
    size = struct.calcsize(fmt)
    data = handle.read(size)
    if len(data) != size:
        raise DataError(f"{path}: truncated fastText model (ended at byte {handle.tell()})")
    return struct.unpack(fmt, data)


def _matrix(handle: BinaryIO, path: Path, name: str, new_format: bool) -> np.ndarray:
    (quantized,) = _read(handle, "<?", path) if new_format else (False,)
    if quantized:
        raise DataError(f"{path}: the {name} matrix is quantized (a .ftz model); only full .bin models can be imported")
    rows, cols = _read(handle, "<qq", path)
    data = handle.read(4 * rows * cols)
    if len(data) != 4 * rows * cols:
        raise DataError(f"{path}: truncated fastText model ({name} matrix {rows} x {cols})")
    return np.frombuffer(data, "<f4").reshape(rows, cols)


def read_bin(path: str | Path) -> FastTextModel:
    """Read a fastText ``.bin``.

    Raises:
        DataError: not a fastText model (magic), an unsupported version, a quantized or
            truncated file, or an input matrix whose rows are not ``nwords + bucket`` (the hashing
            parameters do not fit the matrix: never re-hashed).
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such fastText model")
    with open(path, "rb") as handle:
        magic, version = _read(handle, "<ii", path)
        new_format = magic == MAGIC
        fields = ("dim", "ws", "epoch", "min_count", "neg", "word_ngrams", "loss", "model", "bucket", "minn", "maxn", "lr_update_rate")
        if new_format:
            if version not in (11, 12):
                raise DataError(f"{path}: fastText format version {version} is not supported (11 or 12)")
            values = _read(handle, "<12i", path)
        else:  # the old format begins with dim and ws
            values = (magic, version, *_read(handle, "<10i", path))
        args: dict[str, float | int | str] = dict(zip(fields, values, strict=True))
        if not (0 < int(args["dim"]) <= 100_000 and 0 < int(args["ws"]) <= 10_000 and 0 <= int(args["bucket"]) and int(args["model"]) in MODELS):
            raise DataError(f"{path}: not a fastText .bin model (no magic number {MAGIC}, and no plausible old-format header)")
        (args["t"],) = _read(handle, "<d", path)
        args["loss"] = LOSSES.get(int(args["loss"]), str(args["loss"]))
        args["model"] = MODELS.get(int(args["model"]), str(args["model"]))
        size, nwords, nlabels = _read(handle, "<iii", path)
        ntokens, prune_size = _read(handle, "<qq", path) if new_format else (*_read(handle, "<q", path), 0)
        words, counts, labels = [], [], []
        for _ in range(size):
            raw = bytearray()
            while (char := handle.read(1)) != b"\0":
                if not char:
                    raise DataError(f"{path}: truncated fastText model (in the dictionary)")
                raw += char
            count, kind = _read(handle, "<qb", path)
            word = raw.decode("utf-8", errors="replace")
            if kind == 0:
                words.append(word)
                counts.append(count)
            else:
                labels.append(word)
        if len(words) != nwords or len(labels) != nlabels:
            raise DataError(f"{path}: dictionary holds {len(words)} words and {len(labels)} labels, the header says {nwords} and {nlabels}")
        if prune_size > 0:
            raise DataError(f"{path}: a pruned (quantized) dictionary; only full .bin models can be imported")
        input_matrix = _matrix(handle, path, "input", new_format)
        output_matrix = _matrix(handle, path, "output", new_format)
    bucket = int(args["bucket"])
    if input_matrix.shape[0] != nwords + bucket:
        raise DataError(
            f"{path}: the input matrix has {input_matrix.shape[0]:,} rows, but nwords {nwords:,} + bucket {bucket:,} = "
            f"{nwords + bucket:,}: the hashing parameters do not fit the matrix; refusing to re-hash"
        )
    if input_matrix.shape[1] != int(args["dim"]):
        raise DataError(f"{path}: the input matrix has {input_matrix.shape[1]} columns, but dim = {args['dim']}")
    return FastTextModel(args, words, np.asarray(counts, np.int64), labels, int(ntokens), input_matrix, output_matrix)
