"""The Triton model repository: config.pbtxt parsed with Triton's own ModelConfig protobuf."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from export_fixtures import EMBEDDING_DIM, LABELS, TEXTS, TinyExport
from onnx import TensorProto, helper

from ptmkit_export import Predictor
from ptmkit_export.errors import ExportDirError
from ptmkit_export.triton import triton_config, write_triton_repository

model_config_pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2")
from google.protobuf import text_format  # noqa: E402


def parse(path: Path):
    return text_format.Parse(path.read_text(encoding="utf-8"), model_config_pb2.ModelConfig())


def test_classifier_repository(tiny_export: TinyExport, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    model_dir = write_triton_repository(tiny_export.directory, repo, name="tiny", max_batch_size=16, max_queue_delay_us=2000)
    assert model_dir == repo / "tiny"
    assert sorted(p.name for p in repo.iterdir()) == ["tiny"]  # no staging folder left behind
    assert sorted(p.name for p in model_dir.iterdir()) == ["1", "config.pbtxt", "labels.txt", "tokenizer.json"]
    config = parse(model_dir / "config.pbtxt")
    session = ort.InferenceSession(str(model_dir / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    assert config.name == "tiny" and config.platform == "onnxruntime_onnx" and config.backend == "onnxruntime"
    assert config.max_batch_size == 16
    assert config.dynamic_batching.max_queue_delay_microseconds == 2000
    types = {"tensor(int32)": model_config_pb2.TYPE_INT32, "tensor(float)": model_config_pb2.TYPE_FP32}
    # Names, types and shapes (without the batch axis) are the ONNX model's own.
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [(t.name, types[t.type], [-1]) for t in session.get_inputs()]
    assert {i.name for i in config.input} == {"token_ids", "segment_ids", "padding_mask"}
    (output,) = config.output
    assert (output.name, output.data_type, list(output.dims)) == (tiny_export.output_name, model_config_pb2.TYPE_FP32, [len(LABELS)])
    assert output.label_filename == "labels.txt"
    assert (model_dir / "labels.txt").read_text().splitlines() == LABELS
    assert config.instance_group[0].count == 1 and config.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_AUTO
    assert config.version_policy.latest.num_versions == 1
    # The repository's model is the export's fp32 model: same numbers.
    predictor = Predictor(tiny_export.directory, variant="fp32")
    feeds = predictor.encode(TEXTS)
    (got,) = session.run(None, feeds)
    np.testing.assert_array_equal(got, predictor.logits(TEXTS))
    assert (model_dir / "1" / "model.onnx").read_bytes() == (tiny_export.directory / "model.onnx").read_bytes()


def test_existing_model_folder(tiny_export: TinyExport, tmp_path: Path) -> None:
    write_triton_repository(tiny_export.directory, tmp_path, name="tiny")
    with pytest.raises(ExportDirError, match=r"tiny: already exists \(overwrite=True replaces it\)$"):
        write_triton_repository(tiny_export.directory, tmp_path, name="tiny")
    (tmp_path / "tiny" / "stale.txt").write_text("old")
    write_triton_repository(tiny_export.directory, tmp_path, name="tiny", variant="int8", overwrite=True)
    assert not (tmp_path / "tiny" / "stale.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny"]
    assert (tmp_path / "tiny" / "1" / "model.onnx").read_bytes() == (tiny_export.directory / "model.int8.onnx").read_bytes()
    with pytest.raises(ExportDirError, match="no variant 'fp16'"):
        write_triton_repository(tiny_export.directory, tmp_path, name="other", variant="fp16")
    with pytest.raises(ValueError, match="model name 'a b'"):
        write_triton_repository(tiny_export.directory, tmp_path, name="a b")
    with pytest.raises(ExportDirError, match="export directory not found"):
        write_triton_repository(tmp_path / "missing", tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny"]


def test_embedding_repository_and_default_name(tiny_embedding_export: Path, tmp_path: Path) -> None:
    # tiny_embedding_export is RUN/export: the model is named after the run folder.
    model_dir = write_triton_repository(tiny_embedding_export, tmp_path)
    assert model_dir.name == tiny_embedding_export.parent.name
    config = parse(model_dir / "config.pbtxt")
    (output,) = config.output
    assert (output.name, list(output.dims), output.label_filename) == ("embeddings", [EMBEDDING_DIM], "")
    assert not (model_dir / "labels.txt").exists()


def test_fixed_batch_model_gets_max_batch_size_0(tmp_path: Path) -> None:
    """A model without a dynamic first axis cannot be batched by Triton: full dims, no dynamic_batching."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "fixed",
        [helper.make_tensor_value_info("x", TensorProto.INT64, [4, 7])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [4, 7])],
    )
    path = tmp_path / "fixed.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    config = text_format.Parse(triton_config(session, "fixed"), model_config_pb2.ModelConfig())
    assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")
    assert list(config.input[0].dims) == [4, 7] and config.input[0].data_type == model_config_pb2.TYPE_INT64
    with pytest.raises(ValueError, match="kind must be"):
        triton_config(session, "fixed", kind="KIND_TPU")


def test_cli_export_triton(tiny_export: TinyExport, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ptmkit.cli import main

    assert main(["export-triton", str(tiny_export.directory), str(tmp_path / "repo"), "--name", "polarity"]) == 0
    assert parse(tmp_path / "repo" / "polarity" / "config.pbtxt").name == "polarity"
    capsys.readouterr()
    assert main(["export-triton", str(tiny_export.directory), str(tmp_path / "repo"), "--name", "polarity"]) == 2  # exists
    error = " ".join(capsys.readouterr().err.split())  # the console may wrap a long line
    assert error == f"error: {tmp_path / 'repo' / 'polarity'}: already exists (--force replaces it)"  # the flag, not the Python keyword
    assert main(["export-triton", str(tiny_export.directory), str(tmp_path / "repo"), "--name", "polarity", "--force"]) == 0
    assert main(["export-triton", str(tmp_path / "missing"), str(tmp_path / "repo")]) == 2
