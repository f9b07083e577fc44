"""The word2vec family end to end through the CLI (train, evaluate, embed, export to every vector
format and to ONNX), checked against gensim 4.4 reading the same files and evaluating the same
vectors; long lines trained in full; bad corpora refused with one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from inplugins import declared_entry_points, in_tree_plugins, registered  # noqa: F401 - the fixture
from tinyconfig import DATA, REPO

from ptmkit.testing import main

gensim = pytest.importorskip("gensim")
pytestmark = pytest.mark.usefixtures("in_tree_plugins")
EVAL = DATA / "eval"
FAST = ["--set", "model.epochs=4", "--set", "model.min_count=2", "--set", "model.vector_size=32"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1,500 lower-cased Wikipedia paragraphs (~110K tokens)."""
    lines = (DATA / "corpus" / "enwiki-106.txt").read_text(encoding="utf-8").lower().splitlines()[:1500]
    path = tmp_path_factory.mktemp("w2v") / "wiki-1500.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def run(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "sgns"
    with registered():
        assert main(["train", "word2vec", "--corpus", str(corpus), "--out", str(out), *FAST]) == 0
    return out


def test_every_in_tree_plugin_is_registered_through_an_entry_point() -> None:
    packages = sorted(p.name for p in (REPO / "plugins").iterdir() if p.name.startswith("ptmkit_") and (p / "__init__.py").exists())
    assert sorted(declared_entry_points().values()) == packages


def _kv(run: Path):  # type: ignore[no-untyped-def]
    from gensim.models import KeyedVectors

    words = [line.split("\t")[0] for line in (run / "vocabulary.tsv").read_text(encoding="utf-8").splitlines()]
    kv = KeyedVectors(32)
    kv.add_vectors(words, np.load(run / "vectors.npy"))
    return kv


def test_training_learns_and_writes_a_finished_run(run: Path, corpus: Path) -> None:
    manifest = json.loads((run / "manifest.json").read_text())
    metrics = json.loads((run / "metrics.json").read_text())
    assert manifest["family"] == "word2vec" and manifest["stage"] == "pretrain"
    assert metrics["tokens"] == len(corpus.read_text().split())
    # The item log loss starts at ln 2 (zero output vectors) and must fall well below it.
    assert metrics["final_loss"] < 0.9 * np.log(2)
    assert not (run / "tokens").exists()


@pytest.fixture(scope="module")
def centered(run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run with its vectors minus their mean, for comparisons with gensim's evaluation: a
    110K-token run's vectors share one direction (mean cosine of random pairs 0.995 here, 0.968
    with gensim's own training on the same text), which makes many similarities equal to float32
    precision, and gensim's BLAS norm and ours then break those ties differently (a 2e-5
    difference in rho that says nothing about the ranking). Such a run also answers almost no
    analogy (0 or 1 of 1,539), so 20 are planted: ``d = b - a + c`` on unit vectors, for
    questions whose words appear in no other planted one; both toolkits must then count them."""
    import shutil

    copy = Path(shutil.copytree(run, tmp_path_factory.mktemp("centered") / "run"))
    vectors = np.load(copy / "vectors.npy")
    vectors = vectors - vectors.mean(axis=0)
    index = {line.split("\t")[0]: i for i, line in enumerate((copy / "vocabulary.tsv").read_text(encoding="utf-8").splitlines())}
    used: set[str] = set()
    planted = 0
    for line in (EVAL / "questions-words.txt").read_text(encoding="utf-8").splitlines():
        words = line.lower().split()
        if planted == 20 or line.startswith(":") or len(set(words)) != 4 or not all(w in index for w in words) or used & set(words):
            continue
        a, b, c, d = (vectors[index[w]] / np.linalg.norm(vectors[index[w]]) for w in words)
        vectors[index[words[3]]] = b - a + c
        used |= set(words)
        planted += 1
    np.save(copy / "vectors.npy", vectors)
    return copy


def test_evaluate_equals_gensims_numbers_on_the_same_vectors(centered: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = centered
    argv = ["evaluate", str(run), "--wordsim", str(EVAL / "wordsim353.tsv"), "--analogy", str(EVAL / "questions-words.txt"), "--json"]
    assert main(argv) == 0
    ours = json.loads(capsys.readouterr().out)
    kv = _kv(run)
    pearson, spearman, oov_ratio = kv.evaluate_word_pairs(str(EVAL / "wordsim353.tsv"))
    (wordsim,) = ours["wordsim"]
    assert wordsim["spearman"] == pytest.approx(spearman[0], abs=1e-6)
    assert wordsim["pearson"] == pytest.approx(pearson[0], abs=1e-4)  # float32 cosines, rounded differently
    assert wordsim["oov_ratio"] == pytest.approx(oov_ratio, abs=1e-3)
    score, sections = kv.evaluate_word_analogies(str(EVAL / "questions-words.txt"))
    (analogy,) = ours["analogy"]
    assert analogy["accuracy"] == pytest.approx(score, abs=1e-9)
    theirs = {s["section"]: (len(s["correct"]), len(s["correct"]) + len(s["incorrect"])) for s in sections}
    assert {s["section"]: (s["correct"], s["questions"]) for s in analogy["sections"]} | {
        "Total accuracy": (analogy["correct"], analogy["questions"])
    } == theirs
    assert analogy["correct"] >= 20  # the planted ones at least


def test_restrict_vocab_and_case_folding_match_gensim(centered: Path) -> None:
    from ptmkit.api import WordVectors
    from ptmkit.testing import evaluate_analogies, evaluate_word_pairs

    kv = _kv(centered)
    # A cased duplicate after its lower-case form must not replace it (the most frequent casing wins).
    words = list(kv.index_to_key) + ["KING", "Paris"]
    matrix = np.vstack([kv.vectors, np.ones((2, 32), np.float32)])
    vectors = WordVectors(words, matrix)
    from gensim.models import KeyedVectors

    theirs = KeyedVectors(32)
    theirs.add_vectors(words, matrix)
    for restrict in (500, 300_000):
        ours = evaluate_word_pairs(vectors, EVAL / "wordsim353.tsv", restrict_vocab=restrict)
        _, spearman, _ = theirs.evaluate_word_pairs(str(EVAL / "wordsim353.tsv"), restrict_vocab=restrict)
        assert ours["spearman"] == pytest.approx(spearman[0], abs=1e-6)
        score, _ = theirs.evaluate_word_analogies(str(EVAL / "questions-words.txt"), restrict_vocab=restrict)
        assert evaluate_analogies(vectors, EVAL / "questions-words.txt", restrict_vocab=restrict)["accuracy"] == pytest.approx(score, abs=1e-9)


@pytest.mark.parametrize(("fmt", "binary", "no_header"), [("word2vec", False, False), ("word2vec-binary", True, False), ("glove", False, True), ("fasttext-vec", False, False)])
def test_every_vector_format_loads_in_gensim_with_the_same_vectors(run: Path, tmp_path: Path, fmt: str, binary: bool, no_header: bool) -> None:
    from gensim.models import KeyedVectors

    from ptmkit.testing import read_vectors

    output = tmp_path / f"vectors.{fmt}"
    assert main(["export", str(run), "--vectors", fmt, "--output", str(output)]) == 0
    kv = _kv(run)
    loaded = KeyedVectors.load_word2vec_format(str(output), binary=binary, no_header=no_header)
    assert loaded.index_to_key == kv.index_to_key
    np.testing.assert_array_equal(loaded.vectors, kv.vectors)
    back = read_vectors(output)
    assert back.words == kv.index_to_key
    np.testing.assert_array_equal(back.vectors, kv.vectors)


def test_embed_prints_one_json_line_per_word_and_flags_oov(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown word never sinks the call: gensim raises KeyError for it, ptmkit prints its
    line with "vector": null (and a warning), the other words' vectors as gensim's."""
    kv = _kv(run)
    assert main(["embed", str(run), "--words", "king", "--words", "qwertyuiop", "--words", "the"]) == 0
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert [line["word"] for line in lines] == ["king", "qwertyuiop", "the"]
    assert [line["in_vocabulary"] for line in lines] == [True, False, True] and lines[1]["vector"] is None
    np.testing.assert_allclose(lines[2]["vector"], kv["the"], atol=1e-7)
    assert "qwertyuiop" not in kv.key_to_index
    assert "1 of 3 word(s) not in the vocabulary" in captured.err and "'qwertyuiop'" in captured.err


def test_onnx_export_maps_ids_to_vectors(run: Path, tmp_path: Path) -> None:
    import onnxruntime as ort

    assert main(["export", str(run), "--out", str(tmp_path / "export")]) == 0
    manifest = json.loads((tmp_path / "export" / "manifest.json").read_text())
    assert manifest["parity_max_abs_diff"] <= 1e-6
    session = ort.InferenceSession(str(tmp_path / "export" / "model.onnx"), providers=["CPUExecutionProvider"])
    ids = np.arange(0, 300, dtype=np.int32)[:, None]
    vectors = session.run(["vectors"], {"row_ids": ids, "row_mask": np.ones(ids.shape, np.float32)})[0]
    np.testing.assert_allclose(vectors, _kv(run).vectors[:300], atol=1e-6)


def test_a_word_at_the_end_of_a_25000_token_line_is_trained(tmp_path: Path) -> None:
    """gensim cuts sentences at 10,000 tokens (its MAX_WORDS_IN_BATCH): there, ``tailword`` would
    keep its random initial vector. Here the line is one sentence, trained in full."""
    rng = np.random.default_rng(0)
    filler = [f"w{i}" for i in rng.integers(0, 40, size=24_600)]
    # 200 tail occurrences, as in the 2 MB test: with 20, the tail's norm after training ranged
    # 0.45-2.8 over seeds 1-3 (its nearest word was right every time).
    tail = ["tailword", "mate"] * 200
    corpus = tmp_path / "long.txt"
    corpus.write_text(" ".join(filler + tail) + "\n")
    out = tmp_path / "run"
    assert main(["train", "word2vec", "--corpus", str(corpus), "--out", str(out), "--set", "model.vector_size=16", "--set", "model.sample=0"]) == 0
    vectors = _check_tail(out)
    assert np.linalg.norm(vectors["tailword"]) > 5 * np.sqrt(16) * 0.5 / 16  # far beyond its initial +-0.5/dim


def test_a_2mb_file_without_newline_is_trained_in_full(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    filler = " ".join(f"filler{i}" for i in rng.integers(0, 40, size=250_000))
    corpus = tmp_path / "one-line.txt"
    # 200 tail occurrences: 20 were too few to train with the learning rate near its end (the
    # tail's norm stayed near its initial one and its nearest word depended on the seed).
    corpus.write_bytes((filler + " " + " ".join(["tailword", "mate"] * 200)).encode())
    assert corpus.stat().st_size > 2_000_000 and b"\n" not in corpus.read_bytes()
    out = tmp_path / "run"
    argv = ["train", "word2vec", "--corpus", str(corpus), "--out", str(out), "--set", "model.vector_size=16", "--set", "model.epochs=3", "--set", "model.sample=0"]
    assert main(argv) == 0
    assert json.loads((out / "metrics.json").read_text())["tokens"] == 250_400
    vectors = _check_tail(out)
    assert np.linalg.norm(vectors["tailword"]) > 5 * np.sqrt(16) * 0.5 / 16  # far beyond its initial +-0.5/dim


def _check_tail(out: Path) -> dict[str, np.ndarray]:
    words = [line.split("\t")[0] for line in (out / "vocabulary.tsv").read_text().splitlines()]
    matrix = np.load(out / "vectors.npy")
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    tail = unit[words.index("tailword")]
    similarities = unit @ tail
    # Its nearest neighbour is the word it co-occurs with, and only with it.
    ranked = [words[i] for i in np.argsort(-similarities)]
    assert ranked[:2] == ["tailword", "mate"]
    return {w: matrix[i] for i, w in enumerate(words)}


def test_cbow_with_hierarchical_softmax_learns(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "cbow-hs"
    argv = ["train", "word2vec", "--corpus", str(corpus), "--out", str(out), *FAST, "--set", "model.architecture=cbow", "--set", "model.hs=true", "--set", "model.negative=0"]
    assert main(argv) == 0
    # Hierarchical softmax starts at ln 2 per node (zero inner-node vectors); it must fall below.
    assert json.loads((out / "metrics.json").read_text())["final_loss"] < np.log(2) - 0.005


@pytest.mark.parametrize(
    ("settings", "windows"),
    [
        (["model.hs=true", "model.negative=0"], True),  # auto: hierarchical softmax alone batches windows
        (["model.batching=windows"], True),  # negatives shared by a window's pairs
        (["model.hs=true", "model.negative=0", "model.batching=pairs"], False),
    ],
)
def test_skipgram_window_batches_learn(corpus: Path, tmp_path: Path, settings: list[str], windows: bool) -> None:
    from ptmkit_word2vec.config import Word2VecConfig
    from ptmkit_word2vec.train import _default_batch, uses_window_batches

    out = tmp_path / "sg"
    argv = ["train", "word2vec", "--corpus", str(corpus), "--out", str(out), *FAST, "--set", "model.backend=keras"]  # the batching of the Keras step
    for setting in settings:
        argv += ["--set", setting]
    assert main(argv) == 0
    values = {key.split(".")[1]: value for key, value in (setting.split("=") for setting in settings)}
    config = Word2VecConfig(hs=values.get("hs") == "true", negative=int(values.get("negative", 5)), batching=values.get("batching", "auto"))
    assert uses_window_batches(config) == windows
    # The item log loss starts at ln 2 (zero output vectors); hierarchical softmax's stays nearer.
    assert json.loads((out / "metrics.json").read_text())["final_loss"] < (np.log(2) - 0.01 if config.hs else 0.9 * np.log(2))
    # Window steps take a hundred or two windows (~5.7 pairs each), pair steps 1,024 pairs.
    assert _default_batch(config, windows) == ((96 if config.hs else 192) if windows else 1024)


def test_batching_must_be_known() -> None:
    from ptmkit.api import ConfigError
    from ptmkit_word2vec.config import Word2VecConfig

    with pytest.raises(ConfigError, match="model.batching"):
        Word2VecConfig(batching="sentences").validate()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "no words to train on (it is empty): 0 tokens seen, 0 unique words, 0 with count >= min_count=5"),
        ("\n\n  \n", "no words to train on (3 line(s), all blank): 0 tokens seen"),
        ("one two three\n", "3 tokens seen in 1 lines, 3 unique words, 0 with count >= min_count=5"),
    ],
)
def test_unusable_corpus_is_one_line_exit_2_and_leaves_no_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str) -> None:
    corpus = tmp_path / "c.txt"
    corpus.write_text(text)
    assert main(["train", "word2vec", "--corpus", str(corpus), "--out", str(tmp_path / "run")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {corpus}: ") and expected in line
    assert not (tmp_path / "run").exists()


def test_bert_runs_are_refused_by_word_vector_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "bert-run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"family": "bert", "stage": "pretrain"}))
    assert main(["embed", str(run), "--words", "king"]) == 2
    assert "a bert run has no static word vectors" in capsys.readouterr().err


def test_ctrl_c_stops_training_with_exit_130_and_leaves_no_run(corpus: Path, tmp_path: Path) -> None:
    """SIGINT in the middle of training: exit 130 and the "interrupted" line within seconds, and no
    run directory (no epoch checkpoint was due yet; tests/test_wordvector_resume.py resumes one
    that was). It used to hang: the example producer waited forever to queue its end marker on a
    full queue while the trainer waited for it."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    argv = [sys.executable, "-m", "ptmkit.cli", "train", "word2vec", "--corpus", str(corpus), "--out", str(out), *FAST, "--set", "model.epochs=500", "--set", "model.checkpoint_seconds=3600"]
    with registered():
        process = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=os.environ.copy())
    assert process.stderr is not None
    lines = []
    for line in process.stderr:  # wait until training is under way
        lines.append(line)
        if line.startswith("epoch 1/"):  # epoch 2 under way
            break
    process.send_signal(signal.SIGINT)
    started = time.monotonic()
    try:
        _, rest = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError("training did not stop within 60 s of SIGINT") from None
    assert process.returncode == 130, "".join(lines) + rest
    assert "interrupted; the same command with --resume continues a run that saved a checkpoint" in rest and time.monotonic() - started < 60
    assert not out.exists()


def test_a_corpus_that_sub_sampling_empties_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Nine tokens: sub-sampling at 1e-3 keeps (almost) none, so no pair is ever made; the run
    says so instead of saving its random start vectors as trained, and trains with sample 0."""
    corpus = tmp_path / "t.txt"
    corpus.write_text("a b\nc\nd e\nf\na\nb c\n", encoding="utf-8")
    argv = ["train", "word2vec", "--corpus", str(corpus), "--set", "model.min_count=1", "--set", "model.epochs=2", "--set", "model.vector_size=8"]
    with registered():
        assert main([*argv, "--out", str(tmp_path / "r")]) == 2
        assert capsys.readouterr().err.strip().splitlines()[-1] == (
            f"error: {corpus}: no training example in 2 epoch(s): sub-sampling (model.sample = 0.001) and the window left no pair of words in 9 tokens; "
            "on a corpus this small set --set model.sample=0"
        )
        assert not (tmp_path / "r").exists()
        assert main([*argv, "--out", str(tmp_path / "r"), "--set", "model.sample=0"]) == 0
    assert json.loads((tmp_path / "r" / "metrics.json").read_text())["steps"] > 0
