"""``ptmkit probe``: the NumPy logistic regression against scikit-learn's, and the probe on tiny runs
of four kinds (word2vec, BERT, ELMo, GPT): its features are the family's own embeddings (``ptmkit embed``
and a NumPy pooling of the backbone's outputs) and its accuracy is scikit-learn's on the same
features; bad input is one line and exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from inplugins import in_tree_plugins, registered  # noqa: F401 - the fixture
from tinyconfig import TINY

from ptmkit.probe import LogisticRegression, features_of, probe, standardize
from ptmkit.testing import main, tiny_pretrain, write_tiny_corpus, write_tiny_labelled

sklearn_linear = pytest.importorskip("sklearn.linear_model")
pytestmark = pytest.mark.usefixtures("in_tree_plugins")

TINY_ELMO = [
    "model.vocabulary_size=200",
    "model.min_frequency=1",
    "model.char_embedding_dim=4",
    "model.filter_widths=[1,2,3]",
    "model.filter_counts=[4,4,8]",
    "model.projection_dim=8",
    "model.lstm_dim=12",
    "model.dropout=0.0",
    "train.sequence_length=24",
    "train.batch_size=8",
    "train.max_steps=2",
    "train.heldout_lines=12",
]


def sklearn_fit(train_x: np.ndarray, train_y: np.ndarray, c: float = 1.0):  # type: ignore[no-untyped-def]
    """scikit-learn's StandardScaler + LogisticRegression (L-BFGS, multinomial), run to a tight tolerance."""
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(np.asarray(train_x, np.float64))
    model = sklearn_linear.LogisticRegression(C=c, tol=1e-10, max_iter=10000).fit(
        scaler.transform(np.asarray(train_x, np.float64)), train_y
    )
    return scaler, model


@pytest.mark.parametrize(("c", "classes"), [(1.0, 4), (0.05, 4), (1.0, 2), (0.05, 2)])
def test_logistic_regression_is_sklearns(c: float, classes: int) -> None:
    rng = np.random.default_rng(3)
    centers = rng.normal(size=(classes, 12))
    y = rng.integers(0, classes, 300)
    x = centers[y] + 2.5 * rng.normal(size=(300, 12)) + 7.0  # off-centre, overlapping classes
    held = centers[y[:100]] + 2.5 * rng.normal(size=(100, 12)) + 7.0
    xs, hs = standardize(x, held)
    ours = LogisticRegression(c).fit(xs, y)
    scaler, reference = sklearn_fit(x, y, c)
    assert ours.converged_
    np.testing.assert_allclose(hs, scaler.transform(held), atol=1e-12)
    np.testing.assert_allclose(ours.predict_proba(hs), reference.predict_proba(scaler.transform(held)), atol=1e-6)
    np.testing.assert_array_equal(ours.predict(hs), reference.predict(scaler.transform(held)))


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny corpus, labelled train/dev files (``__label__pos`` / ``__label__neg``)."""
    directory = tmp_path_factory.mktemp("probe")
    write_tiny_corpus(directory / "corpus.txt")
    write_tiny_labelled(directory, train=60, dev=24)
    return directory


def labelled(path: Path) -> tuple[list[str], np.ndarray]:
    from ptmkit.training.finetune import load_labelled

    texts, _, ids = load_labelled(path, ["neg", "pos"])
    return texts, ids


def check_probe_is_sklearn(run: Path, work: Path) -> dict:
    """The probe's dev accuracy equals scikit-learn's fit on the probe's own features."""
    with registered():
        result = probe(run, work / "train.txt", work / "dev.txt", work / "dev.txt")
        features, _ = features_of(run)
        (train_texts, train_y), (dev_texts, dev_y) = labelled(work / "train.txt"), labelled(work / "dev.txt")
        train_x, dev_x = features.featurize(train_texts), features.featurize(dev_texts)
    scaler, reference = sklearn_fit(train_x, train_y)
    expected = float(np.mean(reference.predict(scaler.transform(np.asarray(dev_x, np.float64))) == dev_y))
    assert result["dev_accuracy"] == expected == result["test_accuracy"]
    assert result["converged"] and result["feature_dim"] == features.dim == train_x.shape[1]
    assert (result["train"], result["dev"], result["labels"]) == (60, 24, 2)
    return result


def test_word_vectors_probe_averages_embed_words_vectors(work: Path) -> None:
    from ptmkit.wordvectors.commands import embed_words

    run = work / "w2v"
    with registered():
        assert (
            main(
                [
                    "train",
                    "word2vec",
                    "--corpus",
                    str(work / "corpus.txt"),
                    "--out",
                    str(run),
                    "--set",
                    "model.epochs=2",
                    "--set",
                    "model.min_count=2",
                    "--set",
                    "model.vector_size=16",
                ]
            )
            == 0
        )
        texts = ["the cat saw the bridge", "zzz unknownword", "A Dog, quietly"]
        features, _ = features_of(run)
        actual = features.featurize(texts)
        for text, row in zip(texts, actual, strict=True):
            vectors = [r["vector"] for r in embed_words(run, text.split()) if r["vector"] is not None]
            expected = np.mean(np.asarray(vectors, np.float32), axis=0) if vectors else np.zeros(16, np.float32)
            np.testing.assert_allclose(row, expected, atol=1e-7)  # embed_words' JSON floats are rounded
    assert not actual[1].any()  # no known word: the zero vector
    result = check_probe_is_sklearn(run, work)
    assert result["feature_kind"] == "averaged word vectors"


def masked_mean(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """NumPy reference: ``hidden`` ``(batch, sequence, dim)`` averaged over positions where ``mask`` is 1."""
    mask = mask.astype(np.float64)[..., None]
    return (np.asarray(hidden, np.float64) * mask).sum(axis=1) / mask.sum(axis=1)


def backbone_reference(run: Path, texts: list[str], output: str) -> np.ndarray:
    """Pool the backbone's ``output`` in NumPy, texts padded to 48 tokens (not the probe's batch padding)."""
    from ptmkit.plugins import get_registry
    from ptmkit.rundir import RunDir
    from ptmkit.testing import encode_texts, load_backbone

    registry = get_registry()
    backbone, _, tokenizer, manifest = load_backbone(registry, RunDir(run))
    family = registry.family(manifest["family"])
    feeds = encode_texts(tokenizer, texts, 48, family.inputs, family.special_tokens(tokenizer).padding_id)
    hidden = np.asarray(backbone(feeds, training=False)[output])
    if hidden.ndim == 4:  # (batch, layers, sequence, dim): the layers' plain mean
        hidden = hidden.mean(axis=1)
    return masked_mean(hidden, feeds[family.input("attention_mask").name])


def test_bert_probe_features_are_ptmkit_embed_and_mean_pooled_states(work: Path) -> None:
    from ptmkit.embedding import embed_texts, load_embedder

    run = work / "bert"
    texts = ["the cat saw the bridge", "a small child followed the river at night with care again and again", "the"]
    with registered():
        tiny_pretrain("bert", work / "corpus.txt", run, TINY)
        features, _ = features_of(run)
        actual = features.featurize(texts)
        model, tokenizer, pooling, manifest = load_embedder(run)
        from ptmkit.plugins import get_registry

        family = get_registry().family(manifest["family"])
        embedded = embed_texts(
            model,
            tokenizer,
            texts,
            int(pooling["max_sequence_length"]),
            family.inputs,
            family.special_tokens(tokenizer).padding_id,
        )
        reference = backbone_reference(run, texts, "sequence_output")
    np.testing.assert_allclose(actual, embedded, atol=1e-6)
    np.testing.assert_allclose(actual, reference, atol=1e-5)
    assert features.kind == "mean-pooled sequence_output"
    check_probe_is_sklearn(run, work)


def test_elmo_probe_features_are_its_layers_averaged_and_mean_pooled(work: Path) -> None:
    run = work / "elmo"
    texts = ["the cat saw the bridge", "a small child followed the river at night", "dog"]
    with registered():
        tiny_pretrain("elmo", work / "corpus.txt", run, TINY_ELMO)
        features, _ = features_of(run)
        actual = features.featurize(texts)
        reference = backbone_reference(run, texts, "hidden_states")
    np.testing.assert_allclose(actual, reference, atol=1e-5)
    assert features.kind == "mean-pooled hidden_states (mean of 3 layers)"
    check_probe_is_sklearn(run, work)


def test_cli_prints_the_table_and_writes_json(work: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not (work / "w2v" / "manifest.json").exists():
        pytest.skip("needs the word2vec run of the test above")
    out = tmp_path / "result.json"
    with registered():
        assert (
            main(
                [
                    "probe",
                    str(work / "w2v"),
                    "--task",
                    str(work / "train.txt"),
                    "--dev",
                    str(work / "dev.txt"),
                    "--out",
                    str(out),
                ]
            )
            == 0
        )
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert "word2vec" in printed and "averaged word vectors" in printed and f"{result['dev_accuracy']:.4f}" in printed
    assert result["test_accuracy"] is None and result["family"] == "word2vec"
    assert not any(p.name.startswith("result.json.") for p in tmp_path.iterdir())  # no temp file left


def test_bad_input_is_one_line_and_exit_2(work: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.tsv").write_text("label\ttext\npos\tgood film\nneg bad film\n", encoding="utf-8")
    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "manifest.json").write_text(
        json.dumps({"task": "classification", "variants": {}}), encoding="utf-8"
    )
    finetuned = tmp_path / "finetuned"
    finetuned.mkdir()
    (finetuned / "manifest.json").write_text(
        json.dumps({"family": "bert", "stage": "finetune", "parent": "runs/bert"}), encoding="utf-8"
    )
    classifier = tmp_path / "classifier"
    classifier.mkdir()
    (classifier / "manifest.json").write_text(
        json.dumps({"family": "fasttext-supervised", "stage": "pretrain"}), encoding="utf-8"
    )
    train, dev = str(work / "train.txt"), str(work / "dev.txt")
    cases = [
        (
            [str(work / "w2v"), "--task", str(tmp_path / "bad.tsv"), "--dev", dev],
            "bad.tsv:3: 1 fields, the header has 2",
        ),
        ([str(tmp_path), "--task", train, "--dev", dev], "not a finished run directory (no manifest.json)"),
        (
            [str(tmp_path / "export"), "--task", train, "--dev", dev],
            "not a run directory (its manifest.json has no 'family' and 'stage': an export directory?)",
        ),
        (
            [str(finetuned), "--task", train, "--dev", dev],
            "is a fine-tuned run; probe the pre-trained run it comes from (runs/bert)",
        ),
        ([str(classifier), "--task", train, "--dev", dev], "has no sentence features to probe"),
        ([str(tmp_path), "--task", train, "--dev", dev, "--c", "0"], "--c 0.0: the inverse penalty must be a finite number > 0"),
        ([str(tmp_path), "--task", train, "--dev", dev, "--c", "inf"], "--c inf: the inverse penalty must be a finite number > 0"),
    ]
    with registered():
        for args, expected in cases:
            assert main(["probe", *args]) == 2, args
            err = capsys.readouterr().err
            assert expected in err and err.count("\n") == 1, err


TINY_GPT = [
    "model.num_layers=1",
    "model.hidden_dim=32",
    "model.num_heads=2",
    "model.intermediate_dim=64",
    "model.vocabulary_size=400",
    "model.max_sequence_length=64",
    "train.sequence_length=64",
    "train.batch_size=8",
    "train.max_steps=2",
    "train.heldout_lines=12",
]


def test_gpt_probe_features_are_its_states_mean_pooled_without_the_padding(work: Path) -> None:
    run = work / "gpt"
    texts = ["the cat saw the bridge", "a small child followed the river at night with care", "dog"]
    with registered():
        tiny_pretrain("gpt", work / "corpus.txt", run, TINY_GPT)
        features, _ = features_of(run)
        actual = features.featurize(texts)
        alone = np.concatenate([features.featurize([text]) for text in texts])  # no padding at all
        reference = backbone_reference(run, texts, "sequence_output")
    np.testing.assert_allclose(actual, alone, atol=1e-5)
    np.testing.assert_allclose(actual, reference, atol=1e-5)
    assert (features.kind, features.dim) == ("mean-pooled sequence_output", 32)
