"""fastText's supervised classifier end to end: ``ptmkit export`` (ONNX Runtime against Keras on the
dev texts, <= 1e-6), ``ptmkit predict`` and the server through the lean runtime (no TensorFlow),
and ``ptmkit finetune`` with the ``fasttext`` head from fastText and word2vec runs (rows copied from
the run, n-gram rows hashed as gensim hashes them, metrics as scikit-learn computes them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from inplugins import in_tree_plugins, registered  # noqa: F401 - the fixture
from tinyconfig import DATA

from ptmkit.testing import main

pytestmark = pytest.mark.usefixtures("in_tree_plugins")
CLASSIFY = DATA / "classify"
MULTI_SCRIPT = ["Москва столица 東京大学 🙂👍 naïveté", "ŽLUŤOUČKÝ kůň Straße", "a genus of ferns", ""]


@pytest.fixture(scope="module")
def labelled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """1,500 training glosses; 300 dev glosses plus lines in several scripts; 200 test glosses
    (dev and test: of labels the training glosses have)."""
    folder = tmp_path_factory.mktemp("data")
    train = (CLASSIFY / "wordnet-supersense-train-20k.tsv").read_text(encoding="utf-8").splitlines()
    dev = (CLASSIFY / "wordnet-supersense-dev.tsv").read_text(encoding="utf-8").splitlines()
    test = (CLASSIFY / "wordnet-supersense-test.tsv").read_text(encoding="utf-8").splitlines()
    known = {line.split("\t", 1)[0] for line in train[1:1501]}
    dev = dev[:1] + [line for line in dev[1:] if line.split("\t", 1)[0] in known][:300]
    test = test[:1] + [line for line in test[1:] if line.split("\t", 1)[0] in known][:200]  # only labels seen in training
    files = {"train": train[:1501], "dev": dev + [f"noun.plant\t{t}" for t in MULTI_SCRIPT if t], "test": test}
    paths = {}
    for name, lines in files.items():
        paths[name] = folder / f"{name}.tsv"
        paths[name].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths


@pytest.fixture(scope="module")
def supervised(tmp_path_factory: pytest.TempPathFactory, labelled: dict[str, Path]) -> Path:
    """A classifier with word bigrams and character 2-4-grams, lower-cased, exported."""
    out = tmp_path_factory.mktemp("runs") / "sup"
    argv = ["train", "fasttext-supervised", "--corpus", str(labelled["train"]), "--out", str(out), "--set", "model.epochs=2",
            "--set", "model.vector_size=16", "--set", "model.word_ngrams=2", "--set", "model.minn=2", "--set", "model.maxn=4",
            "--set", "model.bucket=5003", "--set", "model.lowercase=true", "--set", f"model.dev={labelled['dev']}"]
    with registered():
        assert main(argv) == 0
        assert main(["export", str(out)]) == 0
    return out


def keras_logits(run: Path, texts: list[str]) -> np.ndarray:
    """The run's Keras model on rows made by the training code (``supervised.text_rows``)."""
    from ptmkit.api import read_toml
    from ptmkit_fasttext.supervised import load_row_classifier, pad_rows, text_rows

    classifier = load_row_classifier(run)
    model = read_toml(run / "config.toml")["model"]
    index = {w: i for i, w in enumerate(classifier.words)}
    bucket = classifier.featurizer["bucket"]
    rows = [text_rows((t.lower() if model["lowercase"] else t).split(), index, model["word_ngrams"], bucket, model["minn"], model["maxn"]) for t in texts]
    return np.asarray(classifier.model(pad_rows(rows)))


def test_export_equals_keras_and_predict_serves_it(supervised: Path, labelled: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    from ptmkit_export import Predictor
    from ptmkit_export.server import create_app

    manifest = json.loads((supervised / "export" / "manifest.json").read_text())
    metrics = json.loads((supervised / "metrics.json").read_text())
    fp32 = manifest["variants"]["fp32"]
    assert max(fp32["parity_max_abs_diff"].values()) <= 1e-6 and fp32["dev_texts"] == 303
    assert fp32["parity_max_scaled_diff"] <= 1e-6 and fp32["parity_max_probability_diff"] <= 1e-6
    assert fp32["dev_accuracy"] == metrics["dev_accuracy"]  # ONNX Runtime's dev accuracy is Keras'
    assert manifest["featurizer"] | {"hash": None, "eos": None} == {
        "kind": "bag-of-rows", "vocabulary": "vocabulary.txt", "lowercase": True, "minn": 2, "maxn": 4, "bucket": 5003, "word_ngrams": 2, "hash": None, "eos": None,
        "end_of_line": False}
    predictor = Predictor(supervised / "export")
    dev_texts = [line.split("\t", 1)[1] for line in labelled["dev"].read_text(encoding="utf-8").splitlines()[1:]]
    texts = dev_texts[:40] + MULTI_SCRIPT
    np.testing.assert_allclose(predictor.logits(texts), keras_logits(supervised, texts), atol=1e-6)

    assert main(["predict", str(supervised / "export"), "--echo", "--text", MULTI_SCRIPT[0], "--file", str(labelled["test"])]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 201 and lines[0]["text"] == MULTI_SCRIPT[0]
    expected = predictor.predict([line["text"] for line in lines])
    assert [line["label"] for line in lines] == [p.label for p in expected]
    assert all(abs(sum(line["probabilities"].values()) - 1) < 1e-6 for line in lines)
    served = create_app(predictor, "sup").state.service.run_batch("text", [texts[:3], texts[3:5]])
    assert [list(r["labels"]) for r in served] == [[p.label for p in predictor.predict(texts[:3])], [p.label for p in predictor.predict(texts[3:5])]]


def test_predictor_on_a_featurizer_export_loads_no_tensorflow(supervised: Path) -> None:
    script = (
        "import json, sys; from ptmkit_export import Predictor; p = Predictor(sys.argv[1]); p.predict(['Москва 🙂', 'a fern']);"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'ptmkit', 'ptmkit_fasttext', 'tf2onnx'))))"
    )
    result = subprocess.run([sys.executable, "-c", script, str(supervised / "export")], capture_output=True, text=True, env=dict(os.environ), timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_int8_is_refused_in_one_line(supervised: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(supervised), "--int8", "--out", str(supervised / "export-int8")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "--int8" in err and "fp32 ONNX only" in err and "\n" not in err
    assert not (supervised / "export-int8").exists()


@pytest.fixture(scope="module")
def fasttext_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    lines = (DATA / "corpus" / "enwiki-106.txt").read_text(encoding="utf-8").lower().splitlines()[:300]
    corpus = tmp_path_factory.mktemp("ftcorpus") / "wiki.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path_factory.mktemp("ftruns") / "ft"
    argv = ["train", "fasttext", "--corpus", str(corpus), "--out", str(out), "--set", "model.bucket=50000", "--set", "model.vector_size=16",
            "--set", "model.epochs=1", "--set", "model.min_count=2", "--set", "model.lowercase=true"]
    with registered():
        assert main(argv) == 0
    return out


def test_finetune_from_fasttext_vectors(fasttext_run: Path, labelled: dict[str, Path], tmp_path: Path) -> None:
    """The head starts from every row of the run (rows no training text touches keep the run's
    values), hashes unknown words' n-grams as gensim does, inherits the run's lower-casing, and its
    run exports and predicts; its dev macro-F1 is scikit-learn's on the exported model."""
    from gensim.models.fasttext import ft_ngram_hashes
    from sklearn.metrics import f1_score

    from ptmkit.testing import load_vectors
    from ptmkit_export import Predictor
    from ptmkit_fasttext.supervised import load_row_classifier

    out = tmp_path / "cls"
    argv = ["finetune", str(fasttext_run), "--train", str(labelled["train"]), "--dev", str(labelled["dev"]), "--test", str(labelled["test"]),
            "--out", str(out), "--set", "head.epochs=2"]
    assert main(argv) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert {"dev_accuracy", "dev_macro_f1", "test_accuracy", "test_macro_f1"} <= metrics.keys()
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["family"], manifest["stage"], manifest["head"], manifest["parent_family"]) == ("fasttext-supervised", "finetune", "fasttext", "fasttext")

    _, parent = load_vectors(fasttext_run)
    classifier = load_row_classifier(out)
    assert classifier.featurizer == {"lowercase": True, "minn": 3, "maxn": 6, "bucket": 50000, "word_ngrams": 1, "end_of_line": False}
    assert classifier.words[: len(parent.words)] == parent.words
    rows = classifier.model.get_layer("input_rows").get_weights()[0]
    nwords = len(classifier.words)
    from ptmkit_export.bag_of_rows import BagOfRows

    featurizer = BagOfRows(classifier.words, **classifier.featurizer)
    touched = {r for line in labelled["train"].read_text(encoding="utf-8").splitlines()[1:] for r in featurizer.rows(line.split("\t", 1)[1])}
    untouched_words = [i for i in range(len(parent.words)) if i not in touched]
    untouched_buckets = [b for b in range(50000) if nwords + b not in touched]
    assert len(untouched_words) > 100 and len(untouched_buckets) > 100
    np.testing.assert_array_equal(rows[untouched_words], parent.matrix[untouched_words])
    np.testing.assert_array_equal(rows[[nwords + b for b in untouched_buckets]], parent.matrix[[len(parent.words) + b for b in untouched_buckets]])
    for word in ["zzqxjv", "Москвы", "東京"]:
        assert featurizer.rows(word) == [nwords + h for h in ft_ngram_hashes(word.lower(), 3, 6, 50000)]

    assert main(["export", str(out)]) == 0
    export = json.loads((out / "export" / "manifest.json").read_text())
    fp32 = export["variants"]["fp32"]
    # The export's own gate: 1e-6 of max(1, the text's largest |logit|), and on probabilities. These
    # logits reach ~10, where one float32 step is 1e-6 (1.19e-6 absolute was seen).
    assert fp32["parity_max_scaled_diff"] <= 1e-6 and fp32["parity_max_probability_diff"] <= 1e-6
    assert max(fp32["parity_max_abs_diff"].values()) <= 1e-6 * max(1.0, fp32["max_abs_logit"])
    assert export["variants"]["fp32"]["dev_accuracy"] == metrics["dev_accuracy"]
    predictor = Predictor(out / "export")
    dev = [line.split("\t", 1) for line in labelled["dev"].read_text(encoding="utf-8").splitlines()[1:]]
    predicted = [p.label for p in predictor.predict([text for _, text in dev])]
    assert round(f1_score([label for label, _ in dev], predicted, average="macro"), 4) == metrics["dev_macro_f1"]
    assert round(float(np.mean([p == label for p, (label, _) in zip(predicted, dev, strict=True)])), 4) == metrics["dev_accuracy"]


def test_finetune_from_fasttext_word_vectors_only(fasttext_run: Path, labelled: dict[str, Path], tmp_path: Path) -> None:
    """``head.subwords=false``: fastText's ``-pretrainedVectors`` with a ``.vec``: word rows start
    as the run's word vectors (own row and n-gram rows averaged), no n-gram rows."""
    from ptmkit.testing import load_vectors
    from ptmkit_export.bag_of_rows import BagOfRows
    from ptmkit_fasttext.supervised import load_row_classifier

    out = tmp_path / "cls"
    argv = ["finetune", str(fasttext_run), "--train", str(labelled["train"]), "--dev", str(labelled["dev"]), "--out", str(out),
            "--set", "head.epochs=1", "--set", "head.subwords=false"]
    assert main(argv) == 0
    _, parent = load_vectors(fasttext_run)
    classifier = load_row_classifier(out)
    assert classifier.featurizer == {"lowercase": True, "minn": 0, "maxn": 0, "bucket": 0, "word_ngrams": 1, "end_of_line": False}
    featurizer = BagOfRows(classifier.words, **classifier.featurizer)
    touched = {r for line in labelled["train"].read_text(encoding="utf-8").splitlines()[1:] for r in featurizer.rows(line.split("\t", 1)[1])}
    untouched = [i for i in range(len(parent.words)) if i not in touched]
    assert len(untouched) > 100 and classifier.input_matrix.shape[0] == len(classifier.words)
    np.testing.assert_array_equal(classifier.input_matrix[untouched], parent.vectors[untouched])
    assert not np.allclose(parent.vectors[untouched], parent.matrix[untouched])  # the averaged vectors, not the own rows


def test_finetune_head_with_the_ova_loss(fasttext_run: Path, labelled: dict[str, Path], tmp_path: Path) -> None:
    """``head.loss=ova`` reaches the fine-tuned run's config and classifier (``activation``
    ``sigmoid``) and its export's manifest; the lean runtime's probabilities are the sigmoid of
    the logits; its dev accuracy (top label) is within 0.05 of the softmax head's with the same
    settings on these 303 single-label glosses of 43 labels (a one-vs-all and a softmax linear
    model rank single-label data alike; 0.05 is 15 texts; measured 0.383 and 0.380; the official
    fastText without pre-trained vectors, dim 16, 5 epochs, lr 0.5: 0.39 and 0.42)."""
    from ptmkit_export import Predictor
    from ptmkit_fasttext.supervised import load_row_classifier

    accuracy = {}
    for loss in ("softmax", "ova"):
        out = tmp_path / loss
        argv = ["finetune", str(fasttext_run), "--train", str(labelled["train"]), "--dev", str(labelled["dev"]), "--out", str(out),
                "--set", "head.epochs=5", "--set", "head.learning_rate=0.5", "--set", "head.batch_size=4", "--set", "head.subwords=false", "--set", f"head.loss={loss}"]
        assert main(argv) == 0
        accuracy[loss] = json.loads((out / "metrics.json").read_text())["dev_accuracy"]
    classifier = load_row_classifier(out)
    assert classifier.activation == "sigmoid"
    assert main(["export", str(out)]) == 0
    assert json.loads((out / "export" / "manifest.json").read_text())["activation"] == "sigmoid"
    predictor = Predictor(out / "export")
    texts = ["a genus of ferns", "the act of running"]
    got = np.asarray([list(p.probabilities.values()) for p in predictor.predict(texts)])
    np.testing.assert_allclose(got, 1 / (1 + np.exp(-predictor.logits(texts).astype(np.float64))), rtol=1e-6)
    assert abs(accuracy["ova"] - accuracy["softmax"]) <= 0.05, accuracy


def test_finetune_from_word2vec_vectors_and_wrong_heads(labelled: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ptmkit_export import Predictor

    lines = (DATA / "corpus" / "enwiki-106.txt").read_text(encoding="utf-8").lower().splitlines()[:200]
    corpus = tmp_path / "wiki.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    sgns = tmp_path / "sgns"
    assert main(["train", "word2vec", "--corpus", str(corpus), "--out", str(sgns), "--set", "model.vector_size=16", "--set", "model.epochs=1", "--set", "model.min_count=2"]) == 0
    common = ["--train", str(labelled["train"]), "--dev", str(labelled["dev"])]
    out = tmp_path / "cls"
    assert main(["finetune", str(sgns), *common, "--out", str(out), "--set", "head.epochs=1", "--set", "head.word_ngrams=2", "--set", "head.bucket=1000"]) == 0
    assert main(["export", str(out)]) == 0
    predictor = Predictor(out / "export")
    assert predictor.featurizer is not None and predictor.featurizer.maxn == 0 and predictor.featurizer.bucket == 1000
    assert len(predictor.predict(MULTI_SCRIPT)) == len(MULTI_SCRIPT)
    capsys.readouterr()

    cases = [
        ([str(sgns), "--set", "finetune.head=classification"], "finetune.head = 'classification' needs ['pooled_output'], which word2vec runs do not provide; heads for them: fasttext"),
        ([str(sgns), "--set", "finetune.epochs=2"], "the fasttext head trains with its own settings; set head.* keys"),
        ([str(sgns), "--strategy", "adapters"], "--strategy / finetune.strategy = 'adapters': the fasttext head trains on the run's word vectors"),
        ([str(out)], "is a finetune run whose fasttext head trained on word vectors, with no encoder to fine-tune further"),
    ]
    for args, message in cases:
        assert main(["finetune", *args, *common, "--out", str(tmp_path / "bad")]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err, err
        assert not (tmp_path / "bad").exists()

    # The word2vec run's own export: a word it does not know has no row; it does not sink the
    # batch: the zero vector, flagged by out_of_vocabulary() and "oov": true.
    assert main(["export", str(sgns), "--out", str(tmp_path / "sgns-export")]) == 0
    vectors = Predictor(tmp_path / "sgns-export")
    both = vectors.embed(["the", "zzqxv"])
    assert both.shape == (2, 16) and both[0].any() and not both[1].any()
    assert vectors.out_of_vocabulary(["the", "zzqxv"]).tolist() == [False, True]
    capsys.readouterr()
    assert main(["embed", str(tmp_path / "sgns-export"), "--text", "zzqxv"]) == 0
    assert json.loads(capsys.readouterr().out)["oov"] is True


def test_a_large_matrix_goes_to_external_data(supervised: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Matrices over 1 GiB (fastText's 2M buckets at dim 300) are written beside the graph, as
    ONNX external data; the export still equals Keras and predicts."""
    from ptmkit.api import get_registry
    from ptmkit.testing import row_export
    from ptmkit_export import Predictor

    monkeypatch.setattr(row_export, "EXTERNAL_DATA_BYTES", 0)
    classifier = get_registry().family("fasttext-supervised").load_row_classifier(supervised)
    manifest = row_export.export_row_classifier(classifier, supervised, "fasttext-supervised", tmp_path / "export")
    assert (tmp_path / "export" / "model.onnx.data").stat().st_size >= classifier.input_matrix.nbytes
    assert max(manifest["variants"]["fp32"]["parity_max_abs_diff"].values()) <= 1e-6
    np.testing.assert_allclose(Predictor(tmp_path / "export").logits(MULTI_SCRIPT), keras_logits(supervised, MULTI_SCRIPT), atol=1e-6)


def test_word_vector_exports_embed_through_the_lean_runtime(fasttext_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A word-vector export's featurizer gives each word the rows fastText averages: Predictor.embed
    of a word equals its vector (in and out of the vocabulary, several scripts); of a text, the
    mean of its words' rows; ``ptmkit embed EXPORT --text`` serves it."""
    from ptmkit.testing import load_vectors
    from ptmkit_export import Predictor

    assert main(["export", str(fasttext_run), "--out", str(tmp_path / "export")]) == 0
    _, vectors = load_vectors(fasttext_run)
    predictor = Predictor(tmp_path / "export")
    assert predictor.is_embedder and predictor.featurizer is not None and predictor.featurizer.lowercase
    words = [*vectors.words[:20], "history", "historyx", "東京大学", "Москва", "🙂"]
    np.testing.assert_allclose(predictor.embed(words), np.stack([vectors.vector(w.lower()) for w in words]), atol=1e-6)
    rows = (vectors.rows("history") or []) + (vectors.rows("zzqx") or [])
    np.testing.assert_allclose(predictor.embed(["History zzqx"])[0], vectors.matrix[rows].mean(axis=0), atol=1e-6)
    capsys.readouterr()
    assert main(["embed", str(tmp_path / "export"), "--text", "history"]) == 0
    line = json.loads(capsys.readouterr().out)
    np.testing.assert_allclose(line["embedding"], vectors.vector("history"), atol=1e-6)
