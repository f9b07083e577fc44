"""The bilstm family (Tang et al. 2019's student): the backbone against torch's ``nn.LSTM``, the
vocabulary and embeddings copied from a word2vec run (unknown words to ``<unk>``), a student that
learns a toy task from a teacher's logits alone (``finetune.distill_loss = "mse"``), the ONNX
export against Keras, and the refusal of layer-to-layer distillation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from inplugins import in_tree_plugins, registered  # noqa: F401 - the fixture

from ptmkit.testing import run_cli

pytestmark = pytest.mark.usefixtures("in_tree_plugins")

#: The toy task: a text is positive when it holds "good", negative when it holds "bad", among filler words.
FILLERS = [f"w{i}" for i in range(24)]
TINY = ["model.units=8", "model.hidden_dim=8", "model.dropout=0.0"]
RECIPE = ["finetune.epochs=8", "finetune.batch_size=8", "finetune.sequence_length=12", "finetune.learning_rate=3e-2", "finetune.warmup_ratio=0"]


def _texts(count: int, seed: int, unseen: bool = False) -> list[tuple[str, str]]:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        words = list(rng.choice(FILLERS, int(rng.integers(3, 8))))
        if unseen:
            words.append(f"never{i}")  # no vector, not in the student's vocabulary: <unk>
        label = ("pos", "neg")[i % 2]
        words.insert(int(rng.integers(0, len(words) + 1)), "good" if label == "pos" else "bad")
        rows.append((label, " ".join(words)))
    return rows


def _write(path: Path, rows: list[tuple[str, str]]) -> Path:
    path.write_text("".join(f"__label__{label} {text}\n" for label, text in rows), encoding="utf-8")
    return path


def _set(overrides: list[str]) -> list[str]:
    return [a for item in overrides for a in ("--set", item)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A word2vec run on a corpus without ``w16``..``w23`` (they get random rows), the bilstm run
    built on the toy training texts, a teacher fine-tuned on the gold labels, and a student
    distilled from the teacher's logits alone (``distill_alpha = 1``: no gold label)."""
    work = tmp_path_factory.mktemp("bilstm")
    train, dev = _write(work / "train.txt", _texts(96, 0)), _write(work / "dev.txt", _texts(40, 1, unseen=True))
    rng = np.random.default_rng(2)
    corpus = work / "corpus.txt"
    corpus.write_text("".join(" ".join(rng.choice([*FILLERS[:16], "good", "bad"], 8)) + "\n" for _ in range(200)), encoding="utf-8")
    runs = {name: work / name for name in ("w2v", "base", "teacher", "student")}
    with registered():
        assert run_cli(["train", "word2vec", "--corpus", str(corpus), "--out", str(runs["w2v"]),
                     *_set(["model.vector_size=8", "model.min_count=1", "model.epochs=1", "model.sample=0"])]) == 0
        assert run_cli(["train", "bilstm", "--corpus", str(train), "--out", str(runs["base"]), *_set([f"model.word_vectors={runs['w2v']}", *TINY])]) == 0
        common = ["--train", str(train), "--dev", str(dev)]
        assert run_cli(["finetune", str(runs["base"]), *common, "--out", str(runs["teacher"]), *_set(RECIPE)]) == 0
        assert run_cli(["finetune", str(runs["base"]), *common, "--out", str(runs["student"]), "--teacher", str(runs["teacher"]),
                     *_set([*RECIPE, "finetune.distill_loss=mse", "finetune.distill_alpha=1.0"])]) == 0
    return {**runs, "train": train, "dev": dev}


def test_backbone_matches_torch_bilstm() -> None:
    """Rows of 5, 2 and 1 words padded to 5: ``sequence_output`` equals torch's bidirectional
    ``nn.LSTM`` on the row alone (zero at padding); ``last`` pooling is torch's ``h_n`` (forward
    at the last word, backward at the first) and ``max`` the maximum over the row's words, each
    through the ReLU layer; within 1e-5."""
    import keras
    import torch

    from ptmkit_bilstm.backbone import BiLSTMBackbone

    lengths, units = [5, 2, 1], 4
    ids = np.zeros((3, 5), np.int32)
    mask = np.zeros((3, 5), np.int32)
    rng = np.random.default_rng(1)
    for row, length in enumerate(lengths):
        ids[row, :length] = rng.integers(2, 11, length)
        mask[row, :length] = 1
    for pooling in ("last", "max"):
        keras.utils.set_random_seed(5)
        backbone = BiLSTMBackbone(11, 6, units, 3, pooling)
        reference = torch.nn.LSTM(6, units, bidirectional=True, batch_first=True)
        with torch.no_grad():
            for direction, suffix in (("forward_layer", ""), ("backward_layer", "_reverse")):
                kernel, recurrent, bias = getattr(backbone.get_layer("bilstm"), direction).get_weights()
                getattr(reference, f"weight_ih_l0{suffix}").copy_(torch.from_numpy(kernel.T))
                getattr(reference, f"weight_hh_l0{suffix}").copy_(torch.from_numpy(recurrent.T))
                getattr(reference, f"bias_ih_l0{suffix}").copy_(torch.from_numpy(bias))
                getattr(reference, f"bias_hh_l0{suffix}").zero_()
        table = backbone.get_layer("word_embeddings").get_weights()[0]
        kernel, bias = backbone.get_layer("hidden").get_weights()
        out = {k: np.asarray(v) for k, v in backbone({"token_ids": ids, "padding_mask": mask}).items()}
        for row, length in enumerate(lengths):
            with torch.no_grad():
                states, (h_n, _) = reference(torch.from_numpy(table[ids[row, :length]])[None])
            states = states[0].numpy()
            np.testing.assert_allclose(out["sequence_output"][row, :length], states, atol=1e-5)
            np.testing.assert_array_equal(out["sequence_output"][row, length:], 0.0)
            pooled = np.concatenate([h_n[0, 0].numpy(), h_n[1, 0].numpy()]) if pooling == "last" else states.max(0)
            np.testing.assert_allclose(out["pooled_output"][row], np.maximum(pooled @ kernel + bias, 0.0), atol=1e-5)


def test_embeddings_start_from_the_word_vectors_and_unknown_words_are_unk(runs: dict[str, Path]) -> None:
    """The vocabulary is the training texts' words (no ``__label__`` token); words word2vec knows
    start from its vectors, the others from random rows; a word outside it encodes as ``<unk>``."""
    from ptmkit.api import RunDir, get_registry
    from ptmkit.testing import load_backbone

    vectors = get_registry().family("word2vec").load_word_vectors(runs["w2v"])
    tokenizer = RunDir(runs["base"]).load_tokenizer()
    vocabulary = tokenizer.get_vocab()
    assert vocabulary["<pad>"] == 0 and vocabulary["<unk>"] == 1
    assert set(vocabulary) == {"<pad>", "<unk>", "good", "bad", *FILLERS}
    backbone, config, *_ = load_backbone(get_registry(), RunDir(runs["base"]))
    assert (config.model.vocabulary_size, config.model.embedding_dim) == (len(FILLERS) + 4, 8)
    table = backbone.get_layer("word_embeddings").get_weights()[0]
    for word in ["good", "bad", *FILLERS[:16]]:
        np.testing.assert_array_equal(table[vocabulary[word]], vectors.vector(word))
    assert all(vectors.vector(word) is None and np.abs(table[vocabulary[word]]).sum() > 0 for word in FILLERS[16:])
    np.testing.assert_array_equal(table[:2], 0.0)
    assert tokenizer.encode("good never1 w3").ids == [vocabulary["good"], 1, vocabulary["w3"]]
    metrics = json.loads((runs["base"] / "metrics.json").read_text())
    assert (metrics["words"], metrics["words_with_vectors"]) == (len(FILLERS) + 2, 18)


def test_student_learns_the_task_from_the_teachers_logits_alone(runs: dict[str, Path]) -> None:
    """With ``distill_alpha = 1`` the student never sees a gold label, only the MSE to the
    teacher's logits; it still classifies the dev texts (each with a word it has never seen) far
    above chance (0.5), as the teacher does."""
    teacher = json.loads((runs["teacher"] / "metrics.json").read_text())
    student = json.loads((runs["student"] / "metrics.json").read_text())
    assert teacher["dev_accuracy"] >= 0.9, teacher
    assert student["dev_accuracy"] >= 0.85 and student["dev_agreement_with_teacher"] >= 0.85, student
    assert json.loads((runs["student"] / "config.toml").read_text().split("distill_loss = ")[1].split("\n")[0]) == "mse"


def test_export_matches_keras(runs: dict[str, Path], tmp_path: Path) -> None:
    """``ptmkit export`` of the student: fused ONNX LSTM nodes (no Loop), and ONNX Runtime's logits
    on rows of 6, 2 and 0 words equal Keras' within 1e-5."""
    import gc

    import onnxruntime as ort

    from ptmkit.testing import export_run, load_classifier

    gc.collect()
    gc.freeze()  # the export collects before each tf2onnx pass: skip the live objects (the root conftest's reason)
    manifest = export_run(runs["student"], tmp_path / "export")
    assert manifest["task"] == "classification" and manifest["recurrence"] == {"kind": "fused", "LSTM": 2, "Loop": 0}
    model, *_ = load_classifier(runs["student"])
    ids = np.zeros((3, 6), np.int32)
    mask = np.zeros((3, 6), np.int32)
    for row, length in enumerate([6, 2, 0]):
        ids[row, :length] = np.arange(2, 2 + length) + row
        mask[row, :length] = 1
    expected = np.asarray(model.predict({"token_ids": ids, "padding_mask": mask}, verbose=0))
    session = ort.InferenceSession(str(tmp_path / "export" / "model.onnx"), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"token_ids": ids, "padding_mask": mask})
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("method", ["tinybert", "minilm"])
def test_layer_distillation_is_refused_in_one_line(runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], method: str) -> None:
    out = tmp_path / "s"
    argv = ["finetune", str(runs["base"]), "--train", str(runs["train"]), "--dev", str(runs["dev"]), "--out", str(out),
            "--teacher", str(runs["teacher"]), "--distill", method]
    assert run_cli(argv) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --distill {method}: the student's family 'bilstm' does not expose its blocks' states and attention "
        "(it does not implement ExposesAttention.attention_internals); --distill logits works with any family"
    )
    assert not out.exists()
