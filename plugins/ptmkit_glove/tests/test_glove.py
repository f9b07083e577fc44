"""GloVe against transcriptions of the reference implementation (stanfordnlp/GloVe): sparse
co-occurrence counts equal ``cooccur.c``'s loop; one AdaGrad step equals ``glove.c``'s update of
one record; training reduces the cost and writes a word-vector run."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from inplugins import in_tree_plugins  # noqa: F401 - the fixture
from tinyconfig import DATA

from ptmkit.api import build_vocabulary, encode_corpus, read_corpus
from ptmkit.testing import main

pytestmark = pytest.mark.usefixtures("in_tree_plugins")


def cooccur_c(lines: list[list[int]], window: int) -> dict[tuple[int, int], float]:
    """``cooccur.c``'s counting, transcribed: per line, each word with the ``window`` words before
    it (out-of-vocabulary words already dropped), ``1 / distance`` both ways."""
    counts: dict[tuple[int, int], float] = defaultdict(float)
    for line in lines:
        history: list[int] = []
        for w2 in line:
            for k in range(len(history) - 1, max(-1, len(history) - 1 - window), -1):
                w1 = history[k]
                distance = len(history) - k
                counts[(w1, w2)] += 1.0 / distance
                counts[(w2, w1)] += 1.0 / distance
            history.append(w2)
    return counts


def test_sparse_cooccurrences_equal_the_reference_loop(tmp_path: Path) -> None:
    from ptmkit_glove.cooccur import count_cooccurrences

    lines = (DATA / "corpus" / "enwiki-106.txt").read_text(encoding="utf-8").splitlines()[:120]
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    vocabulary = build_vocabulary(corpus, read_corpus(corpus), min_count=3)
    tokens = encode_corpus(read_corpus(corpus), vocabulary, tmp_path / "tokens")
    encoded = [np.asarray(tokens.ids[a:b]).tolist() for a, b in zip(tokens.offsets[:-1], tokens.offsets[1:], strict=True)]
    expected = cooccur_c(encoded, window=7)
    x = count_cooccurrences(tokens, len(vocabulary), window=7, chunk_tokens=500)  # many chunks and merges
    ours = {(int(r), int(c)): float(v) for r, c, v in zip(x.rows, x.cols, x.values, strict=True)}
    assert ours.keys() == expected.keys()
    assert max(abs(ours[k] - expected[k]) for k in ours) < 1e-9


def test_adagrad_step_equals_glove_c_for_one_record() -> None:
    from ptmkit_glove.train import AdaGradStep

    size, dim, eta, x_max, alpha = 6, 4, 0.05, 100.0, 0.75
    step = AdaGradStep(size, dim, np.random.default_rng(3), x_max, alpha, eta, jit_compile=True)
    params = np.asarray(step.params.numpy(), np.float64).copy()
    gradsq = np.ones_like(params)
    records = [(1, 4, 3.5), (4, 1, 0.25), (1, 2, 250.0)]
    for row, col, value in records:
        # glove.c, one record: l1 = word row, l2 = context row (after the V word rows).
        l1, l2 = row, size + col
        diff = params[l1, :dim] @ params[l2, :dim] + params[l1, dim] + params[l2, dim] - np.log(value)
        fdiff = diff if value > x_max else (value / x_max) ** alpha * diff
        fdiff *= eta
        temp1, temp2 = fdiff * params[l2, :dim], fdiff * params[l1, :dim]
        params[l1, :dim] -= temp1 / np.sqrt(gradsq[l1, :dim])
        params[l2, :dim] -= temp2 / np.sqrt(gradsq[l2, :dim])
        gradsq[l1, :dim] += temp1 * temp1
        gradsq[l2, :dim] += temp2 * temp2
        params[l1, dim] -= fdiff / np.sqrt(gradsq[l1, dim])
        params[l2, dim] -= fdiff / np.sqrt(gradsq[l2, dim])
        gradsq[l1, dim] += fdiff * fdiff
        gradsq[l2, dim] += fdiff * fdiff
        step(np.asarray([row], np.int32), np.asarray([col], np.int32), np.asarray([value], np.float32), np.ones(1, np.float32))
    np.testing.assert_allclose(np.asarray(step.params.numpy()), params, atol=1e-6)
    np.testing.assert_allclose(np.asarray(step.gradsq.numpy()), gradsq, rtol=1e-5)


def test_training_writes_a_word_vector_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = (DATA / "corpus" / "enwiki-106.txt").read_text(encoding="utf-8").lower().splitlines()[:300]
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "run"
    argv = ["train", "glove", "--corpus", str(corpus), "--out", str(out), "--set", "model.vector_size=16", "--set", "model.epochs=3", "--set", "model.window=5"]
    assert main(argv) == 0
    costs = [float(line.split("cost ")[1]) for line in capsys.readouterr().err.splitlines() if line.startswith("epoch ")]
    assert len(costs) == 3 and costs[-1] < costs[0]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["cooccurrence_records"] < metrics["vocabulary_size"] ** 2
    assert main(["embed", str(out), "--words", "the"]) == 0
    assert len(json.loads(capsys.readouterr().out)["vector"]) == 16
