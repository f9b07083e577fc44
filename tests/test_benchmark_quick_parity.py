"""The ``--quick`` modes of the MiniLM parity benchmarks run end to end on minilm_inference.py's tiny
random BERT (2 layers, hidden 32, MiniLM's tokenizer), so the scripts cannot rot.

Each test runs a pipeline whose torch and TensorFlow halves live in separate processes:
``hf_reference.py`` then ``minilm_parity.py`` (ptmkit's import matches transformers and
sentence-transformers on the same random weights), the two sides of ``minilm_trajectory.py`` (the
same losses step by step without dropout) and of ``minilm_dropout_gradients.py`` (the same dropout
noise: z-scores and variance ratios near 1). No speed figure is asserted: timed assertions do not
belong in tests."""

from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path

import numpy as np
from benchmark_quick import ROOT, run_quick

COMMITTED_REFERENCE = ROOT / "tests" / "data" / "minilm_reference.npz"


def _digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def _row(printed: str, name: str) -> str:
    """The value column of the parity table's row that starts with ``name``."""
    found = re.search(rf"^{re.escape(name)}.*?  (\S.*)$", printed, re.MULTILINE)
    assert found, f"no row {name!r} in:\n{printed}"
    return found.group(1)


def test_hf_reference_and_parity_quick(tmp_path: Path) -> None:
    """hf_reference.py --quick writes the tiny model's reference under the work directory (never
    tests/data); minilm_parity.py --quick reads it, and ptmkit's import agrees with transformers,
    sentence-transformers, the checkpoint's tokenizer and its own ONNX export."""
    before = _digest(COMMITTED_REFERENCE)
    printed = run_quick("hf_reference.py", "--work", str(tmp_path))
    assert _digest(COMMITTED_REFERENCE) == before
    shape = re.search(r"^wrote (\S+): (\d+) sentences x (\d+) tokens x (\d+),", printed, re.MULTILINE)
    assert shape and Path(shape.group(1)) == tmp_path / "minilm_reference.npz", printed
    with np.load(tmp_path / "minilm_reference.npz") as data:
        assert len(data["texts"]) == int(shape.group(2)) == 12
        assert data["last_hidden_state"].shape == (12, int(shape.group(3)), 32) and data["sentence_embedding"].shape == (12, 32)
        assert data["token_ids"].shape == data["padding_mask"].shape == (12, int(shape.group(3)))
        assert 0 < data["padding_mask"].sum() < data["padding_mask"].size  # padded to the longest: some padding
        assert np.allclose(np.linalg.norm(data["sentence_embedding"], axis=1), 1, atol=1e-5)

    printed = run_quick("minilm_parity.py", "--work", str(tmp_path))
    with np.load(tmp_path / "minilm_reference.npz") as data:
        real = int(data["padding_mask"].sum())
    for activation, tolerance in (("gelu", 1e-5), ("gelu_approximate", 1e-3)):
        value = _row(printed, f"hidden states vs transformers, {activation} ({real} real tokens)")
        found = re.fullmatch(r"max abs diff ([\d.e+-]+) \(all positions ([\d.e+-]+)\)", value)
        assert found and float(found.group(1)) < tolerance and float(found.group(2)) < tolerance, value
    assert float(_row(printed, "sentence embeddings vs sentence-transformers").removeprefix("max abs diff ")) < 1e-5
    same, total = map(int, re.fullmatch(r"(\d+) of (\d+) texts identical", _row(printed, "token ids vs")).groups())
    assert same == total > 250
    onnx = re.fullmatch(r"cosine min ([\d.]+), mean ([\d.]+)", _row(printed, "ONNX fp32 vs Keras embeddings (100 glosses)"))
    assert onnx and float(onnx.group(1)) > 0.99999, printed
    int8 = re.fullmatch(r"cosine mean ([\d.]+), min ([\d.]+)", _row(printed, "ONNX int8 vs fp32 embeddings (100 glosses)"))
    assert int8 and 0.9 < float(int8.group(2)) <= float(int8.group(1)) <= 1, printed
    assert re.fullmatch(r"fp32 [\d.]+ ms, int8 [\d.]+ ms", _row(printed, "latency batch 1 x 128, 1 thread"))
    sizes = re.fullmatch(r"fp32 ([\d.]+) MB, int8 ([\d.]+) MB", _row(printed, "model size"))
    assert sizes and float(sizes.group(2)) < float(sizes.group(1)), printed


def test_trajectory_quick(tmp_path: Path) -> None:
    """Without dropout, ptmkit's adamw and Hugging Face's Trainer optimiser give the same loss at
    each of the 6 steps on the tiny model, from the random head's log(classes) down."""
    for side in ("torch", "keras"):
        printed = run_quick("minilm_trajectory.py", "--side", side, "--out", str(tmp_path / f"{side}.npy"))
        assert re.search(rf"^{side}: 6 steps, loss [\d.]+ -> [\d.]+; wrote ", printed, re.MULTILINE), printed
    torch_losses, keras_losses = np.load(tmp_path / "torch.npy"), np.load(tmp_path / "keras.npy")
    assert torch_losses.shape == keras_losses.shape == (6,)
    labels = {line.split("\t", 1)[0] for line in (ROOT / "data" / "classify" / "wordnet-supersense-train-20k.tsv").read_text(encoding="utf-8").splitlines()[1:]}
    assert abs(torch_losses[0] - math.log(len(labels))) < 0.1
    assert torch_losses[-1] < torch_losses[0] - 1e-3  # the steps train
    assert np.abs(keras_losses - torch_losses).max() < 1e-4
    printed = run_quick("minilm_trajectory.py", "--compare", str(tmp_path / "torch.npy"), str(tmp_path / "keras.npy"))
    found = re.search(r"^steps 6: max \|keras - torch\| per step ([\d.e+-]+) ", printed, re.MULTILINE)
    assert found and float(found.group(1)) == float(f"{np.abs(keras_losses - torch_losses).max():.2e}"), printed
    assert re.search(r"^   0-6 ", printed, re.MULTILINE), printed


def test_dropout_gradients_quick(tmp_path: Path) -> None:
    """Over 50 dropout draws on the tiny model, the mean gradients of the two frameworks differ only
    by Monte-Carlo error (rms z near 1) and their variances match, on all six tensors."""
    for side in ("torch", "keras"):
        printed = run_quick("minilm_dropout_gradients.py", "--side", side, "--out", str(tmp_path / f"{side}.npz"))
        assert re.search(rf"^{side}: mean loss [\d.]+ over 50 draws -> ", printed, re.MULTILINE), printed
    printed = run_quick("minilm_dropout_gradients.py", "--compare", str(tmp_path / "keras.npz"), str(tmp_path / "torch.npz"))
    losses = re.search(r"^mean loss ([\d.]+) vs ([\d.]+) \(50 and 50 draws\)$", printed, re.MULTILINE)
    assert losses and abs(float(losses.group(1)) - float(losses.group(2))) < 0.05, printed
    rows = re.findall(r"^(\S+) +([\d.]+) +([\d.]+) +([\d.]+)$", printed, re.MULTILINE)
    assert [name for name, *_ in rows] == [
        "classifier.weight",
        "bert.pooler.dense.weight",
        "bert.encoder.layer.1.output.dense.weight",
        "bert.encoder.layer.0.attention.self.query.weight",
        "bert.encoder.layer.0.attention.output.LayerNorm.weight",
        "bert.embeddings.LayerNorm.weight",
    ], printed
    for name, z, ratio, cosine in rows:
        assert 0.7 < float(z) < 1.4 and 0.7 < float(ratio) < 1.4 and float(cosine) > 0.95, (name, z, ratio, cosine)
