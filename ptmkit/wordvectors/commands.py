"""What ``ptmkit evaluate``, ``ptmkit embed --words`` and ``ptmkit export`` do for runs of static
word vectors; kept out of :mod:`ptmkit.cli` so that the commands stay thin.

A run holds word vectors when its family :class:`~ptmkit.contract.ProvidesWordVectors`; the
family loads them (:meth:`ptmkit.contract.ModelFamily.load_word_vectors`), and everything here
works on the resulting :class:`~ptmkit.wordvectors.WordVectors`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.contract import ProvidesWordVectors
from ptmkit.errors import DataError, PtmkitError, RunDirError
from ptmkit.rundir import RunDir
from ptmkit.wordvectors import WordVectors


def is_word_vector_run(run_dir: str | Path) -> bool:
    """True when ``run_dir`` is a finished run of a family providing word vectors."""
    from ptmkit.plugins import get_registry

    run = RunDir(run_dir)
    if not (run / "manifest.json").exists():
        return False
    try:
        manifest = run.manifest()
        family = get_registry().families.get(manifest["family"])
    except RunDirError:
        return False
    return family is not None and isinstance(family, ProvidesWordVectors)


def load_vectors(source: str | Path, fmt: str | None = None) -> tuple[str, WordVectors]:
    """``(family name, vectors)`` of a run directory, or ``("file", vectors)`` of a vector file
    (word2vec text/binary, GloVe, fastText .vec; ``fmt`` names the format instead of guessing it,
    see :func:`ptmkit.wordvectors.formats.read_vectors`).

    Raises:
        RunDirError: not a finished run, or a run of a family without static word vectors.
        DataError: an unreadable vector file.
        PtmkitError: ``fmt`` given for a run directory (its vectors have no file format).
    """
    from ptmkit.plugins import get_registry
    from ptmkit.wordvectors.formats import read_vectors

    path = Path(source)
    if path.is_file():
        return "file", read_vectors(path, fmt)
    if fmt is not None:
        raise PtmkitError(f"--format {fmt}: applies to vector files; {path} is a run directory")
    registry = get_registry()
    manifest = RunDir(path).manifest()
    family = registry.family(manifest["family"])
    if not isinstance(family, ProvidesWordVectors):
        able = sorted(name for name, f in registry.families.items() if isinstance(f, ProvidesWordVectors))
        raise RunDirError(
            f"{path}: a {family.name} run has no static word vectors; this command needs a run of "
            f"{', '.join(able) or 'a word-vector family'} (or a word-vector file)"
        )
    return family.name, family.load_word_vectors(path)


def evaluate(source: str | Path, wordsim: list[Path], analogy: list[Path], restrict_vocab: int, fmt: str | None = None) -> dict[str, Any]:
    """Word-similarity and analogy scores of a run or vector file (see
    :mod:`ptmkit.wordvectors.evaluation`); written to ``RUN/evaluation.json`` for a run."""
    from ptmkit.io import atomic_write_json
    from ptmkit.wordvectors.evaluation import evaluate_analogies, evaluate_word_pairs

    if not wordsim and not analogy:
        raise PtmkitError("nothing to evaluate: give --wordsim FILE and/or --analogy FILE")
    family, vectors = load_vectors(source, fmt)
    results: dict[str, Any] = {"source": str(source), "family": family, "vocabulary": len(vectors), "restrict_vocab": restrict_vocab}
    results["wordsim"] = [evaluate_word_pairs(vectors, f, restrict_vocab) for f in wordsim]
    results["analogy"] = [evaluate_analogies(vectors, f, restrict_vocab) for f in analogy]
    if Path(source).is_dir():
        atomic_write_json(Path(source) / "evaluation.json", results)
    return results


def query_words(vectors: WordVectors, values: list[str], listed: list[str] | None = None) -> list[str]:
    """The words of ``--words`` values as typed: a value the vocabulary holds whole (after
    stripping) is one word, even with spaces inside (GloVe's ``new york``); any other value is
    split on whitespace (``"king queen"``: two words). Then the ``listed`` words (``--file``,
    one per line), each taken whole.

    Raises:
        PtmkitError: no words, or a blank value (its position named).
    """
    if not values and not listed:
        raise PtmkitError("give --words WORD ... or --file WORDS.txt")
    words: list[str] = []
    for i, value in enumerate(values, 1):
        if not value.strip():
            raise PtmkitError(f"--words: value {i} of {len(values)} is empty or blank; give one word or several separated by spaces")
        words += [value.strip()] if value.strip() in vectors else value.split()
    return words + list(listed or [])


def embed_words(source: str | Path, values: list[str], fmt: str | None = None, listed: list[str] | None = None) -> list[dict[str, Any]]:
    """One ``{"word", "in_vocabulary", "vector"}`` dict per word of ``values`` (``--words`` as
    typed) and ``listed`` (``--file``; see :func:`query_words`), in order; an unknown word never
    fails the call.

    ``vector`` is a list of ``dim`` floats; for a word out of the vocabulary it is what the
    reference tool gives: a subword family's vector from the word's n-grams (fastText, gensim),
    the zero vector when the word has no n-gram; ``None`` (JSON null) in a family without
    subwords (word2vec, GloVe: gensim raises ``KeyError``), with ``in_vocabulary`` false.
    """
    _, vectors = load_vectors(source, fmt)
    out = []
    for word in query_words(vectors, values, listed):
        vector = vectors.vector(word)
        out.append({
            "word": word,
            "in_vocabulary": word in vectors,
            "vector": None if vector is None else [round(float(v), 7) for v in vector],
        })
    return out


def neighbors(
    source: str | Path, words: list[str], positive: list[str], negative: list[str], topn: int, method: str, restrict_vocab: int | None,
    fmt: str | None = None, listed: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Nearest neighbours (:func:`ptmkit.wordvectors.similarity.most_similar`): one record per
    word of ``words`` (``--words`` as typed) and ``listed`` (``--file``, :func:`query_words`), or one for the query
    ``positive`` / ``negative`` (an analogy).

    A word of ``words`` without a vector (out of the vocabulary, no subwords) or with the zero
    vector (fastText: no n-gram) gets ``"neighbors": null`` and never fails the others; a
    ``positive`` / ``negative`` word without a vector fails the query (DataError naming it).

    Returns:
        ``{"word", "in_vocabulary", "method", "neighbors"}`` per word, or one
        ``{"positive", "negative", "method", "neighbors"}``; ``neighbors`` is a list of
        ``{"word", "score"}``, best first.

    Raises:
        PtmkitError: neither or both kinds of query given.
        DataError: see above.
    """
    from ptmkit.wordvectors.similarity import METHODS, most_similar

    if method not in METHODS:
        raise PtmkitError(f"--method {method}: choose one of {', '.join(METHODS)}")
    if bool(words or listed) == bool(positive or negative):
        raise PtmkitError("give --words WORD ... or --file WORDS.txt (one query per word), or --positive/--negative (or --analogy A B C) for one query")
    _, vectors = load_vectors(source, fmt)

    def scored(found: list[tuple[str, float]]) -> list[dict[str, Any]]:
        return [{"word": word, "score": round(score, 7)} for word, score in found]

    if not words and not listed:
        query = most_similar(vectors, query_words(vectors, positive), query_words(vectors, negative) if negative else [], topn, method, restrict_vocab)
        return [{"positive": positive, "negative": negative, "method": method, "neighbors": scored(query)}]
    out = []
    for word in query_words(vectors, words, listed):
        vector = vectors.vector(word)
        usable = vector is not None and bool(np.any(vector))
        found = most_similar(vectors, [word], [], topn, method, restrict_vocab) if usable else None
        out.append({"word": word, "in_vocabulary": word in vectors, "method": method, "neighbors": None if found is None else scored(found)})
    return out


def export(source: str | Path, fmt: str | None, output: Path | None, onnx_dir: Path | None) -> dict[str, Any]:
    """Write the vectors as a file (``fmt`` in :data:`ptmkit.wordvectors.formats.FORMATS`, to
    ``output``) or, when ``fmt`` is None, as an ONNX lookup model to ``onnx_dir`` (default
    ``RUN/export``)."""
    from ptmkit.wordvectors.formats import FORMATS, write_vectors

    if fmt is not None and fmt not in FORMATS:
        raise PtmkitError(f"--vectors {fmt!r}: choose one of {', '.join(FORMATS)}")
    family, vectors = load_vectors(source)
    if fmt is not None:
        if output is None:
            raise PtmkitError("--vectors needs --output FILE")
        if output.is_dir():
            raise PtmkitError(f"--output {output}: is a directory; give a file name")
        write_vectors(output, vectors.words, vectors.vectors, fmt)
        return {"file": str(output), "format": fmt, "words": len(vectors), "dim": vectors.dim}
    from ptmkit.exporting.vectors import export_onnx
    from ptmkit.exporting.write import check_destination
    from ptmkit.training.setup import quiet_tensorflow

    check_destination(source, onnx_dir)
    quiet_tensorflow()
    extra: dict[str, Any] = getattr(vectors, "export_metadata", dict)()
    probe = list(getattr(vectors, "probe_words", []))
    lowercase = False
    if Path(source).is_dir() and (Path(source) / "config.toml").is_file():
        from ptmkit.config import read_toml

        model = read_toml(Path(source) / "config.toml").get("model")
        lowercase = bool(model.get("lowercase", False)) if isinstance(model, dict) else False
    manifest = export_onnx(vectors, onnx_dir or Path(source) / "export", family, extra, probe, lowercase)
    return {"directory": manifest["directory"], "rows": manifest["rows"], "onnx_parity_max_abs_diff": f"{manifest['parity_max_abs_diff']:.2e}"}


def dumps(record: dict[str, Any]) -> str:
    """One JSON line; DataError for a vector with nan or inf (JSON has no such numbers)."""
    try:
        return json.dumps(record, ensure_ascii=False, allow_nan=False)
    except ValueError:
        raise DataError(f"the vector of {record.get('word')!r} holds nan or inf (a diverged training run?)") from None
