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


def load_vectors(source: str | Path) -> tuple[str, WordVectors]:
    """``(family name, vectors)`` of a run directory, or ``("file", vectors)`` of a vector file
    (word2vec text/binary, GloVe, fastText .vec).

    Raises:
        RunDirError: not a finished run, or a run of a family without static word vectors.
        DataError: an unreadable vector file.
    """
    from ptmkit.plugins import get_registry
    from ptmkit.wordvectors.formats import read_vectors

    path = Path(source)
    if path.is_file():
        return "file", read_vectors(path)
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


def evaluate(source: str | Path, wordsim: list[Path], analogy: list[Path], restrict_vocab: int) -> dict[str, Any]:
    """Word-similarity and analogy scores of a run or vector file (see
    :mod:`ptmkit.wordvectors.evaluation`); written to ``RUN/evaluation.json`` for a run."""
    from ptmkit.io import atomic_write_json
    from ptmkit.wordvectors.evaluation import evaluate_analogies, evaluate_word_pairs

    if not wordsim and not analogy:
        raise PtmkitError("nothing to evaluate: give --wordsim FILE and/or --analogy FILE")
    family, vectors = load_vectors(source)
    results: dict[str, Any] = {"source": str(source), "family": family, "vocabulary": len(vectors), "restrict_vocab": restrict_vocab}
    results["wordsim"] = [evaluate_word_pairs(vectors, f, restrict_vocab) for f in wordsim]
    results["analogy"] = [evaluate_analogies(vectors, f, restrict_vocab) for f in analogy]
    if Path(source).is_dir():
        atomic_write_json(Path(source) / "evaluation.json", results)
    return results


def embed_words(source: str | Path, words: list[str]) -> list[dict[str, Any]]:
    """One ``{"word", "vector", "in_vocabulary"}`` dict per word; out-of-vocabulary words get a
    vector only from a subword family (fastText's n-grams).

    Raises:
        DataError: a word without a vector (out of vocabulary in a family without subwords).
    """
    family, vectors = load_vectors(source)
    out = []
    for word in words:
        vector = vectors.vector(word)
        if vector is None:
            how = "" if vectors.subword_family else f" ({family} has no subword information for out-of-vocabulary words)"
            raise DataError(f"{word!r}: not in the vocabulary of {source}{how}")
        out.append({"word": word, "in_vocabulary": word in vectors, "vector": [round(float(v), 7) for v in vector]})
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
    from ptmkit.training.setup import quiet_tensorflow
    from ptmkit.wordvectors.onnx import export_onnx

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
