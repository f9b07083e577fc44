"""The importer steps every family shares (:mod:`ptmkit.hf_checkpoints`), on files made here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ptmkit.api import (
    CheckpointError,
    check_import_paths,
    check_tensor_shapes,
    porting_weights,
    read_hf_config,
    read_weight_shapes,
)
from ptmkit.errors import RunDirError


def _checkpoint(directory: Path, config: dict[str, object], tensors: dict[str, np.ndarray]) -> Path:
    from safetensors.numpy import save_file

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")
    save_file(tensors, str(directory / "model.safetensors"))
    return directory


def test_config_and_shapes_are_read_and_checked(tmp_path: Path) -> None:
    ckpt = _checkpoint(tmp_path / "ckpt", {"model_type": "toy", "hidden_size": 4}, {"a.weight": np.zeros((4, 2), np.float32), "b.bias": np.zeros(3, np.float32)})
    path, config = read_hf_config(ckpt, "toy", "Toy", ["hidden_size"])
    assert path == ckpt / "config.json" and config["hidden_size"] == 4
    weights, shapes = read_weight_shapes(ckpt)
    assert weights == ckpt / "model.safetensors" and shapes == {"a.weight": (4, 2), "b.bias": (3,)}
    expected = {"a.weight": (4, 2), "b.bias": (3,), "pooler.weight": (4, 4)}
    assert check_tensor_shapes(weights, shapes, expected, lambda key: key if key in shapes else None, "1 layer", optional=("pooler.",)) == {"pooler."}
    with pytest.raises(CheckpointError, match=r"missing tensor 'pooler.weight' \(expected for 1 layer\)"):
        check_tensor_shapes(weights, shapes, expected, lambda key: key if key in shapes else None, "1 layer")
    with pytest.raises(CheckpointError, match=r"tensor 'b.bias' has shape \[3\], config.json implies \[4\]"):
        check_tensor_shapes(weights, shapes, {"b.bias": (4,)}, lambda key: key, "1 layer")


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"model_type": "other", "hidden_size": 4}, "model_type 'other' is not a Toy checkpoint (the Toy importer reads model_type 'toy')"),
        ({"model_type": "toy"}, "missing key 'hidden_size' (a Toy config needs hidden_size)"),
        ({"model_type": "toy", "hidden_size": True}, "key 'hidden_size' must be a positive integer, got True"),
        ({"model_type": "toy", "hidden_size": 0}, "key 'hidden_size' must be a positive integer, got 0"),
        ([1, 2], "expected a JSON object, got list"),
    ],
)
def test_bad_configs_are_refused_naming_the_key(tmp_path: Path, config: object, message: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(CheckpointError) as raised:
        read_hf_config(tmp_path, "toy", "Toy", ["hidden_size"])
    assert str(raised.value) == f"{tmp_path / 'config.json'}: {message}"


def test_weights_files_that_cannot_be_read_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        read_weight_shapes(tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text("{}", encoding="utf-8")
    with pytest.raises(CheckpointError, match="sharded safetensors checkpoints are not supported yet"):
        read_weight_shapes(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 10)
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        read_weight_shapes(tmp_path)


def test_paths_and_ports_fail_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no such checkpoint directory"):
        check_import_paths(tmp_path / "nowhere", tmp_path / "out")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("mine")
    with pytest.raises(RunDirError, match="exists and is not an empty directory"):
        check_import_paths(tmp_path, taken)
    with pytest.raises(CheckpointError) as raised, porting_weights("w.safetensors"):
        raise KeyError("encoder.layer.0")
    assert str(raised.value) == "w.safetensors: cannot read weights (KeyError: 'encoder.layer.0')"


def test_an_unsupported_model_type_lists_every_installed_importer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``import-hf`` of a ``model_type`` no family reads: one line naming the file, the type and
    every type the installed families import (the in-tree plugins all registered)."""
    from inplugins import registered

    from ptmkit.contract import ImportsCheckpoints
    from ptmkit.plugins import get_registry
    from ptmkit.testing import import_hf_refusal

    (tmp_path / "source").mkdir()
    (tmp_path / "source" / "config.json").write_text(json.dumps({"model_type": "mamba"}))
    with registered():
        supported = {t for f in get_registry().families.values() if isinstance(f, ImportsCheckpoints) for t in f.hf_model_types}
        line = import_hf_refusal(tmp_path / "source", lambda _: None, tmp_path, capsys)
    assert {"bert", "roberta", "gpt2", "electra", "albert"} <= supported
    assert "config.json" in line and "'mamba'" in line and all(t in line for t in supported), line
