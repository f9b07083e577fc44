"""Checkpoints the BERT importer must refuse: one line naming the file and the problem, exit 2,
nothing written. A tiny synthetic BERT checkpoint (written with safetensors' NumPy API) is the
valid starting point each case breaks."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghijklmnopqrstuvwxyz", "the", "##s", "film", "good"]
CONFIG = {
    "architectures": ["BertModel"],
    "model_type": "bert",
    "vocab_size": len(VOCAB),
    "hidden_size": 8,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 16,
    "max_position_embeddings": 32,
    "type_vocab_size": 2,
    "hidden_act": "gelu",
    "layer_norm_eps": 1e-12,
    "position_embedding_type": "absolute",
}


def write_checkpoint(directory: Path, config: dict[str, object] = CONFIG, vocab: list[str] = VOCAB) -> Path:
    from tokenizers.implementations import BertWordPieceTokenizer

    from ptmkit_bert.config import BertConfig
    from ptmkit_bert.hf import expected_shapes

    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(config))
    bert = BertConfig(vocabulary_size=len(VOCAB), num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16, max_sequence_length=32)
    rng = np.random.default_rng(0)
    save_file({name: rng.normal(0, 0.02, shape).astype(np.float32) for name, shape in expected_shapes(bert).items()}, str(directory / "model.safetensors"))
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = BertWordPieceTokenizer(str(directory / "vocab.txt"), lowercase=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    return directory


def run_import(checkpoint: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ptmkit.cli", "import-hf", str(checkpoint), "--out", str(out)], capture_output=True, text=True, timeout=300)


def refused(result: subprocess.CompletedProcess[str], out: Path, *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}")]  # no temporary left


def test_a_tiny_checkpoint_imports_and_keeps_its_weights(tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    from ptmkit.api import RunDir, get_registry
    from ptmkit.testing import load_backbone

    checkpoint = write_checkpoint(tmp_path / "ckpt")
    result = run_import(checkpoint, tmp_path / "run")
    assert result.returncode == 0, result.stderr
    backbone, _, tokenizer, manifest = load_backbone(get_registry(), RunDir(tmp_path / "run"))
    weights = load_file(str(checkpoint / "model.safetensors"))
    np.testing.assert_array_equal(backbone.get_layer("token_embedding").embeddings.numpy(), weights["embeddings.word_embeddings.weight"])
    query = backbone.get_layer("transformer_layer_0")._self_attention_layer.query_dense.kernel.numpy()
    np.testing.assert_array_equal(query.reshape(8, 8), weights["encoder.layer.0.attention.self.query.weight"].T)
    assert tokenizer.encode("the films").tokens == ["[CLS]", "the", "film", "##s", "[SEP]"]
    assert manifest["pooling"]["mode"] == "mean" and manifest["pooling"]["normalize"] is False


def _drop(name: str) -> Callable[[Path], None]:
    return lambda d: (d / name).unlink()


def _truncate(d: Path) -> None:
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])


def _config(**changes: object) -> Callable[[Path], None]:
    def change(d: Path) -> None:
        config = {**CONFIG, **changes}
        for key, value in changes.items():
            if value is None:
                del config[key]
        (d / "config.json").write_text(json.dumps(config))

    return change


def _pickle_only(d: Path) -> None:
    (d / "model.safetensors").rename(d / "pytorch_model.bin")


def _t5(d: Path) -> None:
    (d / "config.json").write_text(json.dumps({"model_type": "t5", "d_model": 8}))


def _long_vocabulary(d: Path) -> None:
    """More tokens than embedding rows (transformers fails on the first id without a row; a
    vocabulary *smaller* than the matrix is taken, tests/test_hf_import_transformers.py)."""
    from tokenizers.implementations import BertWordPieceTokenizer

    (d / "vocab.txt").write_text("\n".join([*VOCAB, "cat", "dog", "##ing"]) + "\n")
    BertWordPieceTokenizer(str(d / "vocab.txt"), lowercase=True).save(str(d / "tokenizer.json"))


def _wrong_shape(d: Path) -> None:
    from safetensors.numpy import load_file

    weights = load_file(str(d / "model.safetensors"))
    weights["encoder.layer.0.intermediate.dense.weight"] = np.zeros((12, 8), np.float32)
    save_file(weights, str(d / "model.safetensors"))


CASES = {
    "no config.json": (_drop("config.json"), ["ckpt", "no config.json"]),
    "no weights": (_drop("model.safetensors"), ["ckpt", "no model.safetensors"]),
    "pickled weights only": (_pickle_only, ["pytorch_model.bin", "pickle", "safe_serialization=True"]),
    "truncated safetensors": (_truncate, ["model.safetensors", "not a readable safetensors file"]),
    "a model type no plugin imports": (_t5, ["config.json", "model_type 't5'", "they read: ", "bert"]),
    "a vocabulary larger than the embeddings": (_long_vocabulary, ["tokenizer.json", f"vocabulary has {len(VOCAB) + 3} tokens", "'##ing'", f"embedding matrix has {len(VOCAB)} rows"]),
    "a tensor of another shape": (_wrong_shape, ["model.safetensors", "encoder.layer.0.intermediate.dense.weight", "[12, 8]", "[16, 8]"]),
    "a missing config key": (_config(hidden_size=None), ["config.json", "missing key 'hidden_size'"]),
    "an unsupported activation": (_config(hidden_act="silu"), ["config.json", "'hidden_act' = 'silu'", "supported: gelu"]),
    "relative positions": (_config(position_embedding_type="relative_key"), ["config.json", "position_embedding_type", "only 'absolute'"]),
    "heads that do not divide hidden": (_config(num_attention_heads=3), ["config.json", "num_attention_heads", "hidden_size"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_checkpoint_is_refused_naming_the_file(case: str, tmp_path: Path) -> None:
    breaker, needles = CASES[case]
    checkpoint = write_checkpoint(tmp_path / "ckpt")
    breaker(checkpoint)
    refused(run_import(checkpoint, tmp_path / "run"), tmp_path / "run", *needles)


def test_a_missing_directory_and_a_non_empty_out_are_refused(tmp_path: Path) -> None:
    refused(run_import(tmp_path / "nowhere", tmp_path / "run"), tmp_path / "run", "nowhere", "no such checkpoint directory")
    nested = write_checkpoint(tmp_path / "package" / "model")  # a pip package that holds the checkpoint in model/
    refused(run_import(nested.parent, tmp_path / "run"), tmp_path / "run", "no config.json", f"did you mean {nested}?")
    checkpoint = write_checkpoint(tmp_path / "ckpt")
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = run_import(checkpoint, out)
    assert result.returncode == 2 and "not an empty directory" in result.stderr and str(out) in result.stderr
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    shutil.rmtree(out)


def test_finetune_starts_from_the_imported_weights(tmp_path: Path) -> None:
    """With a learning rate of 0, the fine-tuned backbone is exactly the checkpoint's."""
    from safetensors.numpy import load_file

    from ptmkit.testing import finetune, load_classifier
    from ptmkit_bert.hf import import_hf

    repo = Path(__file__).resolve().parents[3]
    checkpoint = write_checkpoint(tmp_path / "ckpt")
    import_hf(checkpoint, tmp_path / "run")
    overrides = ["finetune.learning_rate=0", "finetune.epochs=1", "finetune.max_train_examples=16", "finetune.sequence_length=16"]
    train, dev = repo / "data" / "classify" / "polarity-200-train.txt", repo / "data" / "classify" / "polarity-200-dev.txt"
    metrics = finetune(tmp_path / "run", train, dev, tmp_path / "tuned", overrides=overrides, test_file=dev)
    assert metrics["test_accuracy"] == metrics["dev_accuracy"] and metrics["test_examples"] == 40
    model, config, _, manifest = load_classifier(tmp_path / "tuned")
    assert config.finetune.sequence_length == 16 and manifest["parent"] == str((tmp_path / "run").resolve())
    weights = load_file(str(checkpoint / "model.safetensors"))
    backbone = next(layer for layer in model.layers if layer.name.startswith("bert_backbone"))
    np.testing.assert_array_equal(backbone.get_layer("token_embedding").embeddings.numpy(), weights["embeddings.word_embeddings.weight"])
    np.testing.assert_array_equal(backbone.get_layer("pooled_dense").kernel.numpy(), weights["pooler.dense.weight"].T)
