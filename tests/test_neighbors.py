"""`ptmkit neighbors`: nearest neighbours and analogies (3CosAdd, 3CosMul) equal gensim 4.4's
most_similar / most_similar_cosmul on the same vectors: same words, same order, scores within 1e-5."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from inplugins import in_tree_plugins, registered  # noqa: F401 - the fixture

from ptmkit.cli import main
from ptmkit.wordvectors.formats import write_vectors

gensim = pytest.importorskip("gensim")
MINN5 = Path(__file__).parent / "data" / "fasttext-no-ngrams" / "minn5.bin"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[dict]:  # type: ignore[type-arg]
    capsys.readouterr()
    assert main(["neighbors", *argv]) == 0, capsys.readouterr().err
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def _same(found: list[dict], expected: list[tuple[str, float]]) -> None:  # type: ignore[type-arg]
    assert [n["word"] for n in found] == [w for w, _ in expected]
    np.testing.assert_allclose([n["score"] for n in found], [s for _, s in expected], atol=1e-5)


@pytest.fixture(scope="module")
def vector_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    words = [f"w{i}" for i in range(300)] + ["king", "queen", "man", "woman"]
    vectors = np.random.default_rng(7).standard_normal((len(words), 20)).astype(np.float32)
    path = tmp_path_factory.mktemp("vectors") / "vectors.txt"
    write_vectors(path, words, vectors, "word2vec")
    return path


def test_neighbors_and_analogies_equal_gensims(vector_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gensim.models import KeyedVectors

    kv = KeyedVectors.load_word2vec_format(str(vector_file))
    king, queen = _run([str(vector_file), "--words", "king", "queen", "--topn", "12"], capsys)
    _same(king["neighbors"], kv.most_similar("king", topn=12))
    _same(queen["neighbors"], kv.most_similar("queen", topn=12))
    for method, reference in (("3cosadd", kv.most_similar), ("3cosmul", kv.most_similar_cosmul)):
        (record,) = _run([str(vector_file), "--analogy", "man", "king", "woman", "--method", method], capsys)
        _same(record["neighbors"], reference(positive=["king", "woman"], negative=["man"], topn=10))
        (record,) = _run([str(vector_file), "--positive", "king", "w3", "w5", "--negative", "man", "w9", "--topn", "7", "--method", method], capsys)
        _same(record["neighbors"], reference(positive=["king", "w3", "w5"], negative=["man", "w9"], topn=7))
    (record,) = _run([str(vector_file), "--words", "king", "--restrict-vocab", "50"], capsys)
    _same(record["neighbors"], kv.most_similar("king", restrict_vocab=50))


def test_fasttext_neighbors_of_unknown_words_equal_gensims(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Out-of-vocabulary words with n-grams are queries as in gensim's FastTextKeyedVectors; a
    word without n-grams (zero vector) or a word2vec word out of the vocabulary gets "neighbors":
    null without failing the others."""
    from gensim.models.fasttext import load_facebook_model

    kv = load_facebook_model(str(MINN5)).wv
    run = tmp_path / "run"
    assert main(["import-fasttext", str(MINN5), "--out", str(run)]) == 0
    records = _run([str(run), "--words", "bridges", "ab", "bird", "--topn", "5"], capsys)
    _same(records[0]["neighbors"], kv.most_similar("bridges", topn=5))
    assert records[1] == {"word": "ab", "in_vocabulary": False, "method": "3cosadd", "neighbors": None}
    _same(records[2]["neighbors"], kv.most_similar("bird", topn=5))
    (record,) = _run([str(run), "--analogy", "cat", "dog", "bridges", "--method", "3cosmul", "--topn", "5"], capsys)
    _same(record["neighbors"], kv.most_similar_cosmul(positive=["dog", "bridges"], negative=["cat"], topn=5))


def test_bad_neighbor_queries_are_one_line_errors(vector_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = [
        ([], "give --words WORD ... or --file WORDS.txt (one query per word), or --positive/--negative"),
        (["--words", "king", "--positive", "queen"], "give --words WORD ... or --file WORDS.txt (one query per word), or --positive/--negative"),
        (["--positive", "king", "--negative", "zzz"], "'zzz': not in the vocabulary (and no subword information): it has no vector"),
        (["--words", "king", "--method", "cos"], "--method cos: choose one of 3cosadd, 3cosmul"),
    ]
    for argv, message in cases:
        capsys.readouterr()
        assert main(["neighbors", str(vector_file), *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"error: {message}" or (message in err and "\n" not in err), err
    records = _run([str(vector_file), "--words", "zzz", "king"], capsys)
    assert records[0]["neighbors"] is None and len(records[1]["neighbors"]) == 10
