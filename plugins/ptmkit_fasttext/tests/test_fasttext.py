"""The fastText family against gensim 4.4: hashing and n-grams, Facebook .bin import (in-vocabulary
and out-of-vocabulary vectors equal ``load_facebook_model``'s in several scripts), refusal of
mismatched hashing parameters, training, OOV embedding and ONNX export."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from inplugins import in_tree_plugins, registered  # noqa: F401 - the fixture
from tinyconfig import DATA, TEST_DATA

from ptmkit.testing import main

gensim = pytest.importorskip("gensim")
pytestmark = pytest.mark.usefixtures("in_tree_plugins")
GENSIM_DATA = Path(gensim.__file__).parent / "test" / "test_data"
WORDS = ["night", "word2vec", "naïveté", "příliš", "Москва", "столица", "東京大学", "日本語", "🙂👍", "a"]
CORPUS_LINES = [
    "the night was dark and the night was long naïveté příliš",
    "Москва столица России и Москва большой город",
    "東京大学 日本語 東京大学 日本語 の 研究",
    "🙂👍 emoji 🙂👍 smile the night",
]


def test_hash_and_ngrams_equal_gensims() -> None:
    from gensim.models.fasttext import ft_ngram_hashes
    from gensim.models.fasttext_inner import compute_ngrams_bytes, ft_hash_bytes

    from ptmkit_fasttext.subwords import char_ngrams, fnv1a, ngram_rows

    for word in WORDS + ["</s>x", "ab"]:
        assert fnv1a(word.encode()) == ft_hash_bytes(word.encode())
        for minn, maxn in ((3, 6), (1, 3), (2, 4)):
            assert char_ngrams(word, minn, maxn) == compute_ngrams_bytes(word, minn, maxn)
            assert ngram_rows(word, minn, maxn, 1000, 0) == list(ft_ngram_hashes(word, minn, maxn, 1000))


@pytest.fixture(scope="module")
def gensim_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fastText .bin written by gensim's ``save_facebook_model`` with words in several scripts."""
    from gensim.models import FastText
    from gensim.models.fasttext import save_facebook_model

    sentences = [line.split() for line in CORPUS_LINES] * 5
    model = FastText(sentences, vector_size=12, min_count=1, min_n=2, max_n=5, bucket=3000, epochs=3, seed=1, workers=1)
    path = tmp_path_factory.mktemp("ft") / "scripts.bin"
    save_facebook_model(model, str(path))
    return path


@pytest.mark.parametrize("name", ["scripts", "non_ascii_fasttext.bin", "lee_fasttext.bin"])
def test_imported_vectors_equal_gensims_load_facebook_model(name: str, gensim_bin: Path, tmp_path: Path) -> None:
    from gensim.models.fasttext import load_facebook_model

    from ptmkit.testing import load_vectors

    model_path = gensim_bin if name == "scripts" else GENSIM_DATA / name
    out = tmp_path / "run"
    assert main(["import-fasttext", str(model_path), "--out", str(out)]) == 0
    reference = load_facebook_model(str(model_path)).wv
    family, ours = load_vectors(out)
    assert family == "fasttext" and ours.words == reference.index_to_key
    in_vocabulary = [w for w in reference.index_to_key[:50] if w != "</s>"] + [w for w in WORDS if w in reference.key_to_index]
    if "</s>" in ours.index:
        # fastText gives its end-of-line token no n-grams (Dictionary::initNgrams); gensim averages
        # "</s>"'s n-grams in anyway. We follow fastText: the token's own row.
        np.testing.assert_array_equal(ours.vector("</s>"), ours.matrix[ours.index["</s>"]])
    for word in in_vocabulary + [w for w in WORDS if w not in reference.key_to_index] + ["zzyzx", "Ωmega"]:
        np.testing.assert_allclose(ours.vector(word), reference[word], atol=1e-6, err_msg=word)
    if name == "scripts":
        assert {"Москва", "東京大学", "🙂👍", "naïveté"} <= set(ours.words)


def test_mismatched_hashing_parameters_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = bytearray((GENSIM_DATA / "lee_fasttext.bin").read_bytes())
    header = 8 * 4  # an old-format model: dim ws epoch minCount neg wordNgrams loss model; bucket next
    (bucket,) = struct.unpack_from("<i", data, header)
    struct.pack_into("<i", data, header, bucket + 1)
    bad = tmp_path / "bad.bin"
    bad.write_bytes(bytes(data))
    assert main(["import-fasttext", str(bad), "--out", str(tmp_path / "run")]) == 2
    assert "the hashing parameters do not fit the matrix; refusing to re-hash" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
    # A run whose stored parameters were edited is refused on load, not re-hashed.
    good = tmp_path / "good"
    assert main(["import-fasttext", str(GENSIM_DATA / "lee_fasttext.bin"), "--out", str(good)]) == 0
    params = json.loads((good / "subwords.json").read_text())
    (good / "subwords.json").write_text(json.dumps({**params, "bucket": params["bucket"] // 2}))
    assert main(["embed", str(good), "--words", "night"]) == 2
    assert "refusing to re-hash" in capsys.readouterr().err


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    lines = (DATA / "corpus" / "enwiki-106.txt").read_text(encoding="utf-8").lower().splitlines()[:800]
    corpus = tmp_path_factory.mktemp("ftc") / "wiki.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path_factory.mktemp("ftruns") / "ft"
    argv = ["train", "fasttext", "--corpus", str(corpus), "--out", str(out), "--set", "model.bucket=20000", "--set", "model.vector_size=24", "--set", "model.epochs=3", "--set", "model.min_count=2"]
    with registered():
        assert main(argv) == 0
    return out


def test_training_learns_and_oov_words_get_ngram_vectors(trained: Path, capsys: pytest.CaptureFixture[str]) -> None:
    metrics = json.loads((trained / "metrics.json").read_text())
    assert metrics["final_loss"] < 0.9 * np.log(2)  # from ln 2 at zero output vectors
    assert main(["embed", str(trained), "--words", "history", "--words", "historyx"]) == 0
    known, oov = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert known["in_vocabulary"] and not oov["in_vocabulary"]
    cosine = np.dot(known["vector"], oov["vector"]) / np.linalg.norm(known["vector"]) / np.linalg.norm(oov["vector"])
    assert cosine > 0.5  # most of their n-grams are shared


def test_trained_model_loads_like_gensim_would_compute_it(trained: Path) -> None:
    """Our in-vocabulary and OOV vectors are fastText's mean of rows, computed here with gensim's hashing."""
    from gensim.models.fasttext import ft_ngram_hashes

    from ptmkit.testing import load_vectors

    _, vectors = load_vectors(trained)
    matrix = np.load(trained / "vectors.npy")
    nwords = len(vectors.words)
    for word in vectors.words[:20] + ["unseenword", "Москва"]:
        hashes = [nwords + h for h in ft_ngram_hashes(word, 3, 6, 20000)]
        rows = ([vectors.index[word]] if word in vectors.index else []) + hashes
        np.testing.assert_allclose(vectors.vector(word), matrix[rows].mean(axis=0), atol=1e-6)


def test_onnx_export_computes_oov_vectors_from_ngram_ids(trained: Path, tmp_path: Path) -> None:
    import onnxruntime as ort

    from ptmkit.testing import encode_words, load_vectors

    assert main(["export", str(trained), "--out", str(tmp_path / "export")]) == 0
    manifest = json.loads((tmp_path / "export" / "manifest.json").read_text())
    assert manifest["parity_max_abs_diff"] <= 1e-6 and manifest["subwords"]["bucket"] == 20000
    _, vectors = load_vectors(trained)
    words = ["history", "historyx", "東京大学", "🙂"]
    feeds, missing = encode_words(vectors, words)
    assert missing == []
    session = ort.InferenceSession(str(tmp_path / "export" / "model.onnx"), providers=["CPUExecutionProvider"])
    out = session.run(["vectors"], feeds)[0]
    np.testing.assert_allclose(out, np.stack([vectors.vector(w) for w in words]), atol=1e-6)


def test_cbow_with_subwords_learns(tmp_path: Path) -> None:
    lines = (DATA / "corpus" / "enwiki-106.txt").read_text(encoding="utf-8").lower().splitlines()[:300]
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "cbow"
    argv = ["train", "fasttext", "--corpus", str(corpus), "--out", str(out), "--set", "model.architecture=cbow", "--set", "model.bucket=5000", "--set", "model.vector_size=16", "--set", "model.min_count=2"]
    assert main(argv) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["final_loss"] < 0.9 * np.log(2) and metrics["subword_rows_per_word"] > 5


def test_supervised_classifier_equals_a_transcription_of_fasttexts_update(tmp_path: Path) -> None:
    """With one example per step, training equals fastText's ``Model::update`` for supervised
    models (softmax loss, input gradient divided by the number of rows, linear learning-rate
    decay), transcribed here in float64; word bigrams hashed as ``Dictionary::addWordNgrams``."""
    from rich.console import Console

    from ptmkit.api import quiet_tensorflow
    from ptmkit_fasttext.subwords import fnv1a
    from ptmkit_fasttext.supervised import FastTextClassifierConfig, build_classifier, pad_rows, train_classifier

    quiet_tensorflow()
    texts = ["good film", "bad film", "a good good plot", "bad acting", "great film indeed", "terrible plot", "good acting", "bad bad film"]
    labels = ["pos", "neg", "pos", "neg", "pos", "neg", "pos", "neg"]
    corpus = tmp_path / "train.txt"
    corpus.write_text("".join(f"__label__{label} {text}\n" for label, text in zip(labels, texts, strict=True)))
    config = FastTextClassifierConfig(vector_size=8, word_ngrams=2, bucket=50, epochs=2, learning_rate=0.5, batch_size=1, seed=3)
    run = tmp_path / "run"
    run.mkdir()
    metrics = train_classifier(corpus, run, config, Console(stderr=True))

    words = [line.split("\t")[0] for line in (run / "vocabulary.tsv").read_text().splitlines()]
    index = {w: i for i, w in enumerate(words)}

    def rows(text: str) -> list[int]:  # fastText: words, then nwords + (h * 116049371 + h') % bucket
        hashes = [fnv1a(w.encode()) for w in text.split()]
        bigrams = [len(words) + ((a * 116049371 + b) & 0xFFFFFFFFFFFFFFFF) % 50 for a, b in zip(hashes, hashes[1:], strict=False)]
        return [index[w] for w in text.split()] + bigrams

    names = ["neg", "pos"]
    rng = np.random.default_rng(3)
    w_in = rng.uniform(-1 / 8, 1 / 8, (len(words) + 50, 8)).astype(np.float32).astype(np.float64)
    w_out = np.zeros((2, 8))
    steps, t = 2 * len(texts), 0
    for _ in range(2):
        for i in rng.permutation(len(texts)):
            lr = 0.5 * (1 - t / steps)
            r = rows(texts[i])
            h = w_in[r].mean(axis=0)
            scores = w_out @ h
            p = np.exp(scores - scores.max())
            p /= p.sum()
            alpha = lr * ((np.arange(2) == names.index(labels[i])) - p)
            grad = alpha @ w_out
            w_out += np.outer(alpha, h)
            np.add.at(w_in, r, grad / len(r))
            t += 1
    model = build_classifier(len(words) + 50, 8, 2)
    model.load_weights(str(run / "classifier.weights.h5"))
    np.testing.assert_allclose(model.get_layer("input_rows").get_weights()[0], w_in, atol=1e-6)
    np.testing.assert_allclose(model.get_layer("output").get_weights()[0], w_out.T, atol=1e-6)
    assert metrics["labels"] == 2
    logits = model(pad_rows([rows("good film"), rows("bad acting")]))
    assert np.argmax(np.asarray(logits), axis=1).tolist() == [1, 0]


def test_supervised_classifier_through_the_cli_beats_the_majority_class(tmp_path: Path) -> None:
    data = DATA / "classify"
    out = tmp_path / "sup"
    argv = ["train", "fasttext-supervised", "--corpus", str(data / "wordnet-supersense-train-20k.tsv"), "--out", str(out),
            "--set", "model.epochs=2", "--set", "model.vector_size=32", "--set", f"model.dev={data / 'wordnet-supersense-dev.tsv'}"]
    assert main(argv) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["labels"] == 45 and metrics["dev_examples"] == 5000
    assert metrics["dev_accuracy"] > 2.5 * metrics["dev_majority_baseline"]


MINN5 = TEST_DATA / "fasttext-no-ngrams" / "minn5.bin"  # issue 15's case: minn = maxn = 5


def test_a_word_without_ngrams_gets_the_zero_vector_as_in_gensim(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ "ab" is shorter than minn = 5: no n-gram, so fastText and gensim give the zero vector; the
    call with "cat" beside it is not refused, through the run and through its ONNX export."""
    from gensim.models.fasttext import load_facebook_model

    from ptmkit_export import Predictor

    kv = load_facebook_model(str(MINN5)).wv
    run = tmp_path / "run"
    assert main(["import-fasttext", str(MINN5), "--out", str(run)]) == 0
    capsys.readouterr()
    assert main(["embed", str(run), "--words", "cat ab"]) == 0
    cat, ab = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert (cat["word"], cat["in_vocabulary"], ab["word"], ab["in_vocabulary"]) == ("cat", True, "ab", False)
    np.testing.assert_allclose(cat["vector"], kv["cat"], atol=1e-6)
    assert not kv["ab"].any() and ab["vector"] == kv["ab"].tolist()
    assert main(["export", str(run), "--out", str(tmp_path / "export")]) == 0
    predictor = Predictor(tmp_path / "export")
    vectors = predictor.embed(["cat", "ab", "catab"])
    np.testing.assert_allclose(vectors, kv[["cat", "ab", "catab"]], atol=1e-6)
    assert predictor.out_of_vocabulary(["cat", "ab", "catab"]).tolist() == [False, True, False]
    capsys.readouterr()
    assert main(["embed", str(tmp_path / "export"), "--text", "cat", "--text", "ab"]) == 0
    captured = capsys.readouterr()
    records = [json.loads(line) for line in captured.out.splitlines()]
    assert [r.get("oov", False) for r in records] == [False, True] and not any(records[1]["embedding"])
    assert "1 of 2 text(s) have no word in the vocabulary" in captured.err


MULTILABEL = TEST_DATA / "fasttext-labels" / "multilabel.txt"  # issue 15's case


def test_every_label_of_a_line_counts_as_in_fasttexts_update(tmp_path: Path) -> None:
    """fastText's ``FastText::supervised`` (softmax loss): a line with several labels trains, at
    each update, on one of them drawn uniformly. Transcribed in float64 with the same draws
    (per epoch: the order, then one label per example), it equals the trained weights; the
    label set holds every label, including one that only ever comes second."""
    from rich.console import Console

    from ptmkit.api import quiet_tensorflow
    from ptmkit_fasttext.supervised import FastTextClassifierConfig, build_classifier, train_classifier

    quiet_tensorflow()
    lines = [("cake oven", ["baking", "dessert"]), ("bread dough", ["baking"]), ("blade chop", ["knives"]),
             ("sugar cake", ["dessert", "baking"]), ("slice edge", ["knives"]), ("flour oven", ["baking"])]
    corpus = tmp_path / "train.txt"
    corpus.write_text("".join(f"{text} " + " ".join(f"__label__{label}" for label in labels) + "\n" for text, labels in lines))
    config = FastTextClassifierConfig(vector_size=6, epochs=3, learning_rate=0.5, batch_size=1, seed=5)
    run = tmp_path / "run"
    run.mkdir()
    metrics = train_classifier(corpus, run, config, Console(stderr=True))
    names = json.loads((run / "labels.json").read_text())
    assert names == ["baking", "dessert", "knives"] and metrics["multi_label_examples"] == 2

    words = [line.split("\t")[0] for line in (run / "vocabulary.tsv").read_text().splitlines()]
    index = {w: i for i, w in enumerate(words)}
    targets = [[names.index(label) for label in labels] for _, labels in lines]
    rng = np.random.default_rng(5)
    w_in = rng.uniform(-1 / 6, 1 / 6, (len(words), 6)).astype(np.float32).astype(np.float64)
    w_out = np.zeros((3, 6))
    steps, t, drawn = 3 * len(lines), 0, set()
    for _ in range(3):
        order = rng.permutation(len(lines))
        choice = rng.integers(0, [len(x) for x in targets])
        for i in order:
            target = targets[i][choice[i]]
            drawn.add((i, target))
            lr = 0.5 * (1 - t / steps)
            r = [index[w] for w in lines[i][0].split()]
            h = w_in[r].mean(axis=0)
            p = np.exp(w_out @ h - (w_out @ h).max())
            p /= p.sum()
            alpha = lr * ((np.arange(3) == target) - p)
            grad = alpha @ w_out
            w_out += np.outer(alpha, h)
            np.add.at(w_in, r, grad / len(r))
            t += 1
    model = build_classifier(len(words), 6, 3)
    model.load_weights(str(run / "classifier.weights.h5"))
    np.testing.assert_allclose(model.get_layer("input_rows").get_weights()[0], w_in, atol=1e-6)
    np.testing.assert_allclose(model.get_layer("output").get_weights()[0], w_out.T, atol=1e-6)
    assert {(0, 0), (0, 1)} <= drawn  # both labels of the first line were trained on (seed 5)


def test_the_multilabel_case_keeps_dessert(tmp_path: Path) -> None:
    """Issue 15's multilabel.txt: "dessert" only ever comes second; fastText knows 3 labels, so
    does the run, and the lines labelled baking and dessert rank dessert above knives."""
    from ptmkit.api import DataError, read_labelled, read_multilabelled
    from ptmkit.testing import load_labelled

    texts, labels = read_multilabelled(MULTILABEL)
    assert len(texts) == 150 and sorted({label for ls in labels for label in ls}) == ["baking", "dessert", "knives"]
    for reader in (read_labelled, load_labelled):  # one label per line (a transformer's fine-tuning): refused, not cut
        with pytest.raises(DataError) as info:
            reader(MULTILABEL)
        assert str(info.value).startswith(f"{MULTILABEL}:1: 2 labels on one line (baking, dessert); this command takes one label per line")
    out = tmp_path / "sup"
    argv = ["train", "fasttext-supervised", "--corpus", str(MULTILABEL), "--out", str(out), "--set", "model.epochs=10", "--set", f"model.dev={MULTILABEL}"]
    assert main(argv) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert json.loads((out / "labels.json").read_text()) == ["baking", "dessert", "knives"]
    assert (metrics["labels"], metrics["multi_label_examples"]) == (3, 50) and metrics["dev_accuracy"] == 1.0
    assert main(["export", str(out)]) == 0
    from ptmkit_export import Predictor

    both = [t for t, ls in zip(texts, labels, strict=True) if ls == ("baking", "dessert")]
    probabilities = np.asarray([[p.probabilities[name] for name in ("baking", "dessert", "knives")] for p in Predictor(out / "export").predict(both)])
    assert (probabilities[:, 1] > probabilities[:, 2]).all() and probabilities[:, 1].mean() > 0.2
