"""fastText's one-vs-all loss (``-loss ova``, ``Loss::OneVsAllLoss``): training equals a float64
transcription of its update, reaches the official fastText's multi-label precision and recall at
0.5 on the same data and settings (and beats softmax's), a fastText ``-loss ova`` ``.bin`` reads
with the probabilities ``fasttext predict`` prints, and an ova run exports and predicts with a
sigmoid per label (``"activation": "sigmoid"`` in the manifest)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from inplugins import in_tree_plugins, registered  # noqa: F401 - the fixture
from tinyconfig import TEST_DATA

from ptmkit.testing import main

pytestmark = pytest.mark.usefixtures("in_tree_plugins")
MULTILABEL = TEST_DATA / "fasttext-labels" / "multilabel.txt"  # issue 15's case: 150 lines, 50 with two labels
TOPICS = {
    "baking": "flour oven bread dough yeast knead loaf crust".split(),
    "knives": "blade steel sharpen edge knife whetstone chop slice".split(),
    "dessert": "sugar sweet cream chocolate pie custard frosting candy".split(),
    "garden": "soil seed plant water grow bloom weed rake".split(),
}
NOISE = "the a and of with on for it is this".split()


def multilabel_corpus(path: Path, lines: int, seed: int) -> Path:
    """Lines of 1-3 labels (40% one, 40% two, 20% three), each label 1-2 of its topic's words,
    six shared noise words and one word of a random topic (which may not be the line's)."""
    rng = np.random.default_rng(seed)
    names = sorted(TOPICS)
    out = []
    for _ in range(lines):
        labels = sorted(rng.choice(names, rng.choice([1, 1, 2, 2, 3]), replace=False))
        words = [str(rng.choice(TOPICS[label])) for label in labels for _ in range(int(rng.integers(1, 3)))]
        words += [str(rng.choice(NOISE)) for _ in range(6)] + [str(rng.choice(TOPICS[str(rng.choice(names))]))]
        rng.shuffle(words)
        out.append(" ".join(f"__label__{label}" for label in labels) + " " + " ".join(words))
    path.write_text("\n".join(out) + "\n")
    return path


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(z, np.float64)))


def test_ova_equals_a_transcription_of_one_vs_all_loss(tmp_path: Path) -> None:
    """One example per step: fastText's ``OneVsAllLoss::forward`` (for every label,
    ``binaryLogistic``: ``alpha = lr * (is_label - sigmoid(w_out[i] . h))``, the hidden gradient
    gathers ``alpha * w_out[i]``, ``w_out[i] += alpha * h``) and ``Model::update`` (input gradient
    divided by the number of rows), linear decay, transcribed in float64 with the exact sigmoid
    (fastText's training looks it up in a 512-entry table). Every label of a line is a positive;
    every line ends with fastText's ``</s>`` word (its row is in every mean)."""
    from rich.console import Console

    from ptmkit.api import quiet_tensorflow
    from ptmkit_fasttext.supervised import FastTextClassifierConfig, build_classifier, train_classifier

    quiet_tensorflow()
    lines = [("cake oven", ["baking", "dessert"]), ("bread dough", ["baking"]), ("blade chop", ["knives"]),
             ("sugar cake", ["dessert", "baking"]), ("slice edge", ["knives"]), ("flour oven", ["baking"])]
    corpus = tmp_path / "train.txt"
    corpus.write_text("".join(" ".join(f"__label__{label}" for label in labels) + f" {text}\n" for text, labels in lines))
    config = FastTextClassifierConfig(vector_size=6, epochs=3, learning_rate=0.5, batch_size=1, seed=5, loss="ova")
    run = tmp_path / "run"
    run.mkdir()
    metrics = train_classifier(corpus, run, config, Console(stderr=True))
    names = json.loads((run / "labels.json").read_text())
    assert names == ["baking", "dessert", "knives"] and metrics["multi_label_examples"] == 2
    assert (run / "vocabulary.tsv").read_text().splitlines()[0] == "</s>\t6"  # one a line, the most frequent word

    words = [line.split("\t")[0] for line in (run / "vocabulary.tsv").read_text().splitlines()]
    index = {w: i for i, w in enumerate(words)}
    targets = np.asarray([[name in labels for name in names] for _, labels in lines], np.float64)
    rng = np.random.default_rng(5)
    w_in = rng.uniform(-1 / 6, 1 / 6, (len(words), 6)).astype(np.float32).astype(np.float64)
    w_out = np.zeros((3, 6))
    steps, t = 3 * len(lines), 0
    for _ in range(3):
        for i in rng.permutation(len(lines)):
            lr = 0.5 * (1 - t / steps)
            r = [index[w] for w in [*lines[i][0].split(), "</s>"]]  # fastText's end-of-line word
            h = w_in[r].mean(axis=0)
            alpha = lr * (targets[i] - sigmoid(w_out @ h))
            grad = alpha @ w_out
            w_out += np.outer(alpha, h)
            np.add.at(w_in, r, grad / len(r))
            t += 1
    model = build_classifier(len(words), 6, 3)
    model.load_weights(str(run / "classifier.weights.h5"))
    np.testing.assert_allclose(model.get_layer("input_rows").get_weights()[0], w_in, atol=1e-6)
    np.testing.assert_allclose(model.get_layer("output").get_weights()[0], w_out.T, atol=1e-6)


def test_an_unknown_loss_is_refused_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["train", "fasttext-supervised", "--corpus", str(MULTILABEL), "--out", str(tmp_path / "run"), "--set", "model.loss=hs"]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert "config key 'model.loss' = 'hs': expected one of 'softmax', 'ova'" in error and len(error.splitlines()) == 1


def test_a_diverging_run_stops_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A batch's summed one-vs-all steps (every label of every example) overshoot at a high
    learning rate: the loss turns infinite, and training stops naming the settings instead of
    writing a model of NaNs."""
    argv = ["train", "fasttext-supervised", "--corpus", str(MULTILABEL), "--out", str(tmp_path / "run"), "--set", "model.loss=ova", "--set", "model.learning_rate=100"]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "training diverged in epoch 1" in error and "learning_rate 100, batch_size 16 and loss 'ova'" in error
    assert not (tmp_path / "run" / "classifier.weights.h5").exists()


def test_ova_precision_and_recall_match_fasttexts_and_beat_softmax(tmp_path: Path) -> None:
    """400 training lines, 200 test lines (371 gold labels), dim 10, 20 epochs, lr 0.5: the
    official fastText (``-loss ova``, 1 thread; ``fasttext test FILE -1 0.5``) and ptmkit give
    micro precision and recall of the labels with probability >= 0.5 within 0.04 of each other.
    Measured: fastText 0.847 / 0.822, ptmkit 0.848 / 0.825. The two differ in their initial
    draws, example order, learning-rate decay (fastText's per token, ptmkit's per step of 16
    examples) and fastText's table sigmoid; 0.04 is about two binomial standard errors of a
    recall near 0.82 on 371 labels (0.02), the scale at which two equally good models measured
    on this test set differ. Softmax puts one distribution over the labels, so lines with two or
    three labels rarely get two over 0.5: its recall is near 0.42 for both implementations."""
    fasttext = pytest.importorskip("fasttext")
    from rich.console import Console

    from ptmkit.api import quiet_tensorflow, read_multilabelled
    from ptmkit_fasttext.supervised import (
        FastTextClassifierConfig,
        build_classifier,
        multilabel_scores,
        pad_rows,
        text_rows,
        train_classifier,
    )

    quiet_tensorflow()
    train, test = multilabel_corpus(tmp_path / "train.txt", 400, 1), multilabel_corpus(tmp_path / "test.txt", 200, 2)
    texts, gold = read_multilabelled(test)
    assert sum(len(labels) for labels in gold) == 371
    scores = {}
    for loss in ("ova", "softmax"):
        config = FastTextClassifierConfig(vector_size=10, epochs=20, learning_rate=0.5, loss=loss)
        run = tmp_path / loss
        run.mkdir()
        train_classifier(train, run, config, Console(stderr=True, quiet=True))
        words = [line.split("\t")[0] for line in (run / "vocabulary.tsv").read_text().splitlines()]
        names = json.loads((run / "labels.json").read_text())
        model = build_classifier(len(words), 10, len(names))
        model.load_weights(str(run / "classifier.weights.h5"))
        logits = np.asarray(model(pad_rows([text_rows(config.tokens(t), {w: i for i, w in enumerate(words)}, 1, 0) for t in texts])), np.float64)
        p = sigmoid(logits) if loss == "ova" else np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        ours = multilabel_scores(p >= 0.5, gold, names)
        reference = fasttext.train_supervised(str(train), loss=loss, dim=10, epoch=20, lr=0.5, thread=1, seed=1, verbose=0)
        _, precision, recall = reference.test(str(test), k=-1, threshold=0.5)
        scores[loss] = (ours["dev_precision_at_0.5"], ours["dev_recall_at_0.5"], precision, recall)
    ova, softmax = scores["ova"], scores["softmax"]
    assert abs(ova[0] - ova[2]) <= 0.04 and abs(ova[1] - ova[3]) <= 0.04, scores
    assert ova[1] > 0.75 and ova[1] > softmax[1] + 0.3 and softmax[3] < 0.5, scores
    f1 = {loss: 2 * s[0] * s[1] / (s[0] + s[1]) for loss, s in scores.items()}
    assert f1["ova"] > f1["softmax"] + 0.2, scores


def fasttext_table_sigmoid(z: np.ndarray) -> np.ndarray:
    """fastText's ``Loss::sigmoid``: 0 below -8, 1 above 8, else the table entry
    ``int((z + 8) * 512 / 16)`` of 513 sigmoids on an even grid of [-8, 8] (float32)."""
    grid = (np.arange(513) * 16 / 512 - 8).astype(np.float32)
    table = (1.0 / (1.0 + np.exp(-grid))).astype(np.float32)
    z = np.asarray(z, np.float32)
    index = np.clip(((z + np.float32(8)) * np.float32(512) / np.float32(8) / np.float32(2)).astype(np.int64), 0, 512)
    return np.where(z < -8, 0.0, np.where(z > 8, 1.0, table[index]))


WORD_NGRAM_SIGN = (
    "fastText keeps word hashes as int32 (Dictionary::getLine's word_hashes) and sign-extends them into "
    "addWordNgrams' uint64; ptmkit_export.bag_of_rows and supervised.text_rows do not, so a bigram with a "
    "word hashing to >= 2**31 gets another bucket than fastText's (about half of them)"
)


@pytest.mark.parametrize("word_ngrams", [1, pytest.param(2, marks=pytest.mark.xfail(strict=True, reason=WORD_NGRAM_SIGN))])
def test_an_ova_bin_reads_with_fasttexts_probabilities(tmp_path: Path, word_ngrams: int) -> None:
    """A fastText ``-loss ova`` model: ``read_bin`` gives ``loss = "ova"``, the labels in output
    row order and the matrices; the lean featurizer's rows (plus fastText's end-of-line ``</s>``
    row, ``end_of_line``, as its ``predict`` reads a line) give logits whose per-label probability equals what
    ``model.predict(text, k=-1, threshold=0)`` prints within 1e-5 once fastText's own rule is
    applied: its 512-entry sigmoid table, and ``exp(log(p + 1e-5))`` (``std_log`` in
    ``Loss::findKBest``). The exact sigmoid (:func:`ptmkit_export.predictor.probabilities`)
    differs from the table by at most one table step times the sigmoid's largest slope,
    16 / 512 * 0.25 = 0.0078. With word bigrams it fails (:data:`WORD_NGRAM_SIGN`)."""
    fasttext = pytest.importorskip("fasttext")
    from ptmkit_export.bag_of_rows import BagOfRows
    from ptmkit_export.predictor import probabilities
    from ptmkit_fasttext.binfile import read_bin

    train = multilabel_corpus(tmp_path / "train.txt", 200, 3)
    reference = fasttext.train_supervised(str(train), loss="ova", dim=8, epoch=10, lr=0.5, wordNgrams=word_ngrams, bucket=1000, minn=2, maxn=4, thread=1, verbose=0)
    reference.save_model(str(tmp_path / "ova.bin"))
    model = read_bin(tmp_path / "ova.bin")
    assert model.args["loss"] == "ova" and model.args["model"] == "supervised"
    assert model.labels == reference.get_labels() and model.output.shape == (len(model.labels), 8)
    featurizer = BagOfRows(model.words, minn=2, maxn=4, bucket=1000, word_ngrams=word_ngrams, end_of_line=True)
    texts = ["flour sugar knife the", "soil and seed with water", "chocolate custard", "unknownword of blade", "plant bloom cream steel edge the a"]
    for text in texts:
        rows = featurizer.rows(text)  # fastText reads the line's end as the word </s>: end_of_line
        logits = model.output @ model.input[rows].mean(axis=0)
        printed = dict((label, p) for p, label in reference.f.predict(text + "\n", -1, 0.0, "strict"))
        expected = np.asarray([printed[label] for label in model.labels])
        np.testing.assert_allclose(fasttext_table_sigmoid(logits) + 1e-5, expected, atol=1e-5)
        assert np.max(np.abs(probabilities(logits[None], "sigmoid")[0] - expected)) <= 16 / 512 * 0.25 + 1e-5


def test_ova_run_exports_and_predicts_with_a_sigmoid_per_label(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``model.loss = "ova"`` on issue 15's multilabel.txt: the export's manifest says
    ``"activation": "sigmoid"``; the lean runtime's probabilities are the sigmoid of its logits
    (not a distribution: on the lines labelled baking and dessert, baking is over 0.9 on all,
    dessert over 0.5 on all but a few, knives under 0.1);
    dev precision and recall at 0.5 are recorded; ``ptmkit predict --threshold 0.5`` prints the
    labels over 0.5 (fastText's ``predict -k -1 -th 0.5``). A softmax run's manifest says
    ``softmax``."""
    from ptmkit.api import read_multilabelled
    from ptmkit_export import Predictor

    runs = {}
    for loss in ("ova", "softmax"):
        out = tmp_path / loss
        argv = ["train", "fasttext-supervised", "--corpus", str(MULTILABEL), "--out", str(out), "--set", "model.epochs=10", "--set", f"model.dev={MULTILABEL}",
                "--set", f"model.loss={loss}", "--set", "model.vector_size=16"]
        assert main(argv) == 0 and main(["export", str(out)]) == 0
        runs[loss] = out
    assert json.loads((runs["softmax"] / "export" / "manifest.json").read_text())["activation"] == "softmax"
    manifest = json.loads((runs["ova"] / "export" / "manifest.json").read_text())
    metrics = json.loads((runs["ova"] / "metrics.json").read_text())
    assert manifest["activation"] == "sigmoid" and metrics["dev_recall_at_0.5"] > 0.9 and metrics["dev_precision_at_0.5"] > 0.9
    texts, labels = read_multilabelled(MULTILABEL)
    both = [t for t, ls in zip(texts, labels, strict=True) if ls == ("baking", "dessert")]
    predictor = Predictor(runs["ova"] / "export")
    assert predictor.activation == "sigmoid"
    predictions = predictor.predict(both)
    p = np.asarray([[x.probabilities[name] for name in manifest["labels"]] for x in predictions])
    np.testing.assert_allclose(p, sigmoid(predictor.logits(both)), rtol=1e-6)
    assert manifest["labels"] == ["baking", "dessert", "knives"]
    # measured: baking 0.985-0.995, knives 0.005-0.015, dessert over 0.5 on 48 of the 50 lines (10 epochs)
    assert len(both) == 50 and (p[:, 0] > 0.9).all() and (p[:, 2] < 0.1).all() and np.sum(p[:, 1] > 0.5) >= 45
    assert all(x.label == manifest["labels"][int(np.argmax(row))] for x, row in zip(predictions, p, strict=True))
    capsys.readouterr()
    assert main(["predict", str(runs["ova"]), "--text", both[0], "--text", "blade slice chop", "--threshold", "0.5"]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    over = {name: q for name, q in zip(manifest["labels"], p[0], strict=True) if q >= 0.5}
    assert list(printed[0]["probabilities"]) == sorted(over, key=lambda name: -over[name]) == ["baking", "dessert"]
    assert list(printed[1]["probabilities"]) == ["knives"] and printed[1]["label"] == "knives"


@pytest.mark.parametrize("loss", ["ova", "softmax"])
def test_an_imported_supervised_bin_predicts_as_fasttext(tmp_path: Path, loss: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``ptmkit import-fasttext`` on a supervised ``.bin`` (character 2-4-grams) gives a
    ``fasttext-supervised`` run; exported (``--dev``) it predicts what ``fasttext predict -k -1``
    prints: softmax probabilities within 1e-5 (fastText prints ``exp(log(p + 1e-5))``), and for
    ova the sigmoid of logits whose table sigmoid (fastText's rule) is within 1e-5 of fastText's,
    the exact one within 0.0078. ``wordNgrams 2`` and ``-loss hs`` are refused in one line."""
    fasttext = pytest.importorskip("fasttext")
    from ptmkit_export import Predictor
    from ptmkit_export.predictor import probabilities

    train = multilabel_corpus(tmp_path / "train.txt", 200, 3)
    reference = fasttext.train_supervised(str(train), loss=loss, dim=8, epoch=15, lr=0.5, minn=2, maxn=4, bucket=1000, thread=1, verbose=0)
    reference.save_model(str(tmp_path / "model.bin"))
    run = tmp_path / "run"
    assert main(["import-fasttext", str(tmp_path / "model.bin"), "--out", str(run)]) == 0
    assert json.loads((run / "manifest.json").read_text())["family"] == "fasttext-supervised"
    assert main(["export", str(run), "--dev", str(train)]) == 0
    predictor = Predictor(run / "export")
    assert predictor.activation == ("sigmoid" if loss == "ova" else "softmax") and predictor.featurizer is not None and predictor.featurizer.end_of_line
    texts = ["flour sugar knife the", "soil and seed with water", "chocolate custard", "unknownword of blade", "plant bloom cream steel edge the a"]
    logits = predictor.logits(texts)
    got = [p.probabilities for p in predictor.predict(texts)]
    for text, row, p in zip(texts, logits, got, strict=True):
        printed = {label.removeprefix("__label__"): q for q, label in reference.f.predict(text + "\n", -1, 0.0, "strict")}
        expected = np.asarray([printed[label] for label in predictor.labels])
        ours = np.asarray([p[label] for label in predictor.labels])
        if loss == "ova":
            np.testing.assert_allclose(fasttext_table_sigmoid(row) + 1e-5, expected, atol=1e-5)
            assert np.max(np.abs(ours - expected)) <= 16 / 512 * 0.25 + 1e-5
            np.testing.assert_allclose(ours, probabilities(row, "sigmoid"), rtol=1e-6)
        else:
            np.testing.assert_allclose(ours + 1e-5, expected, atol=1e-5)
    for kwargs, message in (({"wordNgrams": 2, "bucket": 1000}, "wordNgrams 2: fastText sign-extends"), ({"loss": "hs"}, "a -loss hs classifier")):
        refused = fasttext.train_supervised(str(train), **({"loss": loss} | kwargs), dim=4, epoch=1, thread=1, verbose=0)
        refused.save_model(str(tmp_path / "refused.bin"))
        capsys.readouterr()
        assert main(["import-fasttext", str(tmp_path / "refused.bin"), "--out", str(tmp_path / "refused")]) == 2
        error = capsys.readouterr().err.strip()
        assert message in error and len(error.splitlines()) == 1 and not (tmp_path / "refused").exists()
