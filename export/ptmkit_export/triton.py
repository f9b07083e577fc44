"""Write a Triton Inference Server model repository for an export directory.

Layout (Triton's model repository docs,
https://github.com/triton-inference-server/server/blob/main/docs/user_guide/model_repository.md)::

    REPO_DIR/NAME/config.pbtxt      model configuration (protobuf text format, ModelConfig)
    REPO_DIR/NAME/1/model.onnx      the ONNX model, run by Triton's onnxruntime backend
    REPO_DIR/NAME/labels.txt        classifiers: one label per line, for the classification extension
    REPO_DIR/NAME/tokenizer.json    the export's tokenizer (clients tokenize; Triton serves tensors)
    REPO_DIR/NAME/featurizer.json   instead, for a bag-of-rows export: its featurizer object, and the
    REPO_DIR/NAME/vocabulary.txt    vocabulary it names (clients make row_ids/row_mask)

config.pbtxt is generated from the ONNX Runtime session's real inputs and outputs (names, element
types, shapes; model configuration docs,
https://github.com/triton-inference-server/server/blob/main/docs/user_guide/model_configuration.md):
when every input and output has a dynamic first axis, ``max_batch_size`` is set and ``dims`` leave
the batch axis out, and ``dynamic_batching`` is on. Nothing here needs Triton or tritonclient.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import onnxruntime as ort

from ptmkit_export.errors import DestinationExistsError, ExportDirError
from ptmkit_export.manifest import NAME_PATTERN, default_name, read_manifest, variant_path

#: ONNX Runtime element types -> Triton ``DataType`` names.
TRITON_TYPES = {
    "tensor(bool)": "TYPE_BOOL",
    "tensor(uint8)": "TYPE_UINT8",
    "tensor(uint16)": "TYPE_UINT16",
    "tensor(uint32)": "TYPE_UINT32",
    "tensor(uint64)": "TYPE_UINT64",
    "tensor(int8)": "TYPE_INT8",
    "tensor(int16)": "TYPE_INT16",
    "tensor(int32)": "TYPE_INT32",
    "tensor(int64)": "TYPE_INT64",
    "tensor(float16)": "TYPE_FP16",
    "tensor(float)": "TYPE_FP32",
    "tensor(double)": "TYPE_FP64",
    "tensor(string)": "TYPE_STRING",
    "tensor(bfloat16)": "TYPE_BF16",
}


def _dims(shape: list[Any]) -> list[int]:
    return [d if isinstance(d, int) and d >= 0 else -1 for d in shape]


def _tensor_block(name: str, data_type: str, dims: list[int], label_filename: str | None = None) -> str:
    lines = [f"    name: {json.dumps(name)}", f"    data_type: {data_type}", f"    dims: [ {', '.join(map(str, dims))} ]"]
    if label_filename:
        lines.append(f'    label_filename: "{label_filename}"')
    return "  {\n" + "\n".join(lines) + "\n  }"


def triton_config(
    session: ort.InferenceSession,
    name: str,
    max_batch_size: int = 32,
    max_queue_delay_us: int = 5000,
    instance_count: int = 1,
    kind: str = "KIND_AUTO",
    label_output: str | None = None,
) -> str:
    """The ``config.pbtxt`` text (Triton ``ModelConfig`` in protobuf text format) for ``session``'s model.

    Args:
        session: an ONNX Runtime session of the model; its ``get_inputs()`` / ``get_outputs()``
            give the tensors' names, element types and shapes.
        name: the model name (letters, digits, ``_ . -``; the repository folder's name).
        max_batch_size: Triton's ``max_batch_size`` (>= 1) when every tensor's first axis is
            dynamic; otherwise 0 is written and ``dims`` hold full shapes.
        max_queue_delay_us: ``dynamic_batching.max_queue_delay_microseconds`` (>= 0).
        instance_count: model instances (``instance_group.count``, >= 1).
        kind: ``instance_group.kind``: ``KIND_AUTO`` (GPU when Triton has one), ``KIND_CPU`` or ``KIND_GPU``.
        label_output: an output to mark with ``label_filename: "labels.txt"``.

    Returns:
        The configuration text, ending in a newline.

    Raises:
        ValueError: an invalid name, count or kind; a tensor type Triton has no type for.
    """
    if not NAME_PATTERN.match(name):
        raise ValueError(f"model name {name!r} must be letters, digits, '_', '.' or '-'")
    if max_batch_size < 1 or max_queue_delay_us < 0 or instance_count < 1:
        raise ValueError("max_batch_size and instance_count must be >= 1 and max_queue_delay_us >= 0")
    if kind not in ("KIND_AUTO", "KIND_CPU", "KIND_GPU"):
        raise ValueError(f"kind must be KIND_AUTO, KIND_CPU or KIND_GPU, got {kind!r}")
    tensors = [("input", t) for t in session.get_inputs()] + [("output", t) for t in session.get_outputs()]
    for _, tensor in tensors:
        if tensor.type not in TRITON_TYPES:
            raise ValueError(f"tensor {tensor.name!r} has type {tensor.type}, which Triton has no data type for")
    batched = all(t.shape and not isinstance(t.shape[0], int) for _, t in tensors)
    blocks: dict[str, list[str]] = {"input": [], "output": []}
    for role, tensor in tensors:
        dims = _dims(list(tensor.shape))[1:] if batched else _dims(list(tensor.shape))
        label = "labels.txt" if role == "output" and tensor.name == label_output else None
        blocks[role].append(_tensor_block(tensor.name, TRITON_TYPES[tensor.type], dims or [1], label))
    lines = [
        f"name: {json.dumps(name)}",
        'platform: "onnxruntime_onnx"',
        'backend: "onnxruntime"',
        f"max_batch_size: {max_batch_size if batched else 0}",
        "input [\n" + ",\n".join(blocks["input"]) + "\n]",
        "output [\n" + ",\n".join(blocks["output"]) + "\n]",
        f"instance_group [\n  {{\n    count: {instance_count}\n    kind: {kind}\n  }}\n]",
    ]
    if batched:
        lines.append(f"dynamic_batching {{\n  max_queue_delay_microseconds: {max_queue_delay_us}\n}}")
    lines.append('version_policy: { latest: { num_versions: 1 } }')
    return "\n".join(lines) + "\n"


def write_triton_repository(
    export_dir: str | os.PathLike[str],
    repo_dir: str | os.PathLike[str],
    name: str | None = None,
    variant: str = "fp32",
    max_batch_size: int = 32,
    max_queue_delay_us: int = 5000,
    instance_count: int = 1,
    kind: str = "KIND_AUTO",
    overwrite: bool = False,
) -> Path:
    """Write ``REPO_DIR/NAME`` (config.pbtxt, ``1/model.onnx``, labels.txt, tokenizer.json) for an export.

    The model folder is built in a temporary folder inside ``repo_dir`` and renamed into place, so
    an interrupted call leaves no half-written model behind; other models in ``repo_dir`` are left
    alone.

    Args:
        export_dir: an export directory (manifest.json, tokenizer.json, model files).
        repo_dir: the model repository (created if missing).
        name: the model name (default: the export's run name, as ``ptmkit serve`` names it).
        variant: the export variant to copy (default ``"fp32"``: the int8 variant's dynamic
            quantization kernels run on CPU only).
        max_batch_size, max_queue_delay_us, instance_count, kind: see :func:`triton_config`.
        overwrite: replace an existing ``REPO_DIR/NAME``; otherwise that is an error.

    Returns:
        The model folder ``REPO_DIR/NAME``.

    Raises:
        ExportDirError: a missing or broken export, an unknown variant, a variant that tokenizes
            inside the graph (``fp32+tokenizer``: it needs a custom op library), a model ONNX Runtime
            cannot load, ``repo_dir`` not a folder.
        DestinationExistsError: (an ExportDirError) ``REPO_DIR/NAME`` exists and ``overwrite`` is
            false.
        ValueError: an invalid name or option (see :func:`triton_config`).
    """
    export_dir = Path(export_dir)
    manifest = read_manifest(export_dir)
    model_path = _servable_variant(export_dir, manifest, variant)
    name = name or default_name(export_dir)
    session = _load_session(model_path)
    is_classifier = manifest.get("task") != "embedding" and bool(manifest["labels"])
    label_output = manifest["outputs"][0]["name"] if is_classifier else None
    config = triton_config(session, name, max_batch_size, max_queue_delay_us, instance_count, kind, label_output)

    repo = Path(repo_dir)
    if repo.exists() and not repo.is_dir():
        raise ExportDirError(f"{repo}: is not a folder")
    repo.mkdir(parents=True, exist_ok=True)
    target = repo / name
    if target.exists() and not overwrite:
        raise DestinationExistsError(target)
    staging = Path(tempfile.mkdtemp(dir=repo, prefix=f".{name}.", suffix=".partial"))
    try:
        _fill_model_folder(staging, export_dir, manifest, model_path, is_classifier)
        (staging / "config.pbtxt").write_text(config, encoding="utf-8")
        os.chmod(staging, 0o755)
        _move_into_place(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _servable_variant(export_dir: Path, manifest: dict[str, Any], variant: str) -> Path:
    """The model file of ``variant``; ``ExportDirError`` for one that tokenizes inside the graph."""
    model_path = variant_path(export_dir, manifest, variant)
    if manifest["variants"][variant].get("text_input"):
        raise ExportDirError(
            f"{model_path}: variant {variant!r} tokenizes inside the graph with onnxruntime-extensions' operators, which a Triton "
            f"repository would need as a custom op library on the server; write the {manifest['variants'][variant].get('base', 'fp32')} variant"
        )
    return model_path


def _load_session(model_path: Path) -> ort.InferenceSession:
    """A CPU ONNX Runtime session of ``model_path``; ``ExportDirError`` when it cannot load."""
    try:
        return ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime raises its own exception types
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ExportDirError(f"{model_path}: cannot load ONNX model ({first})") from error


def _fill_model_folder(staging: Path, export_dir: Path, manifest: dict[str, Any], model_path: Path, is_classifier: bool) -> None:
    """Copy into ``staging`` the model (``1/model.onnx`` and its external weights), the tokenizer
    (or featurizer and vocabulary) and, for a classifier, ``labels.txt``."""
    (staging / "1").mkdir()
    shutil.copyfile(model_path, staging / "1" / "model.onnx")
    external = model_path.with_name(model_path.name + ".data")  # ONNX external weights, when any
    if external.is_file():
        shutil.copyfile(external, staging / "1" / external.name)
    if "featurizer" in manifest:
        spec = dict(manifest["featurizer"])
        shutil.copyfile(export_dir / spec["vocabulary"], staging / "vocabulary.txt")
        (staging / "featurizer.json").write_text(json.dumps({**spec, "vocabulary": "vocabulary.txt"}, indent=2) + "\n", encoding="utf-8")
    else:
        shutil.copyfile(export_dir / manifest["tokenizer"], staging / "tokenizer.json")
    if is_classifier:
        (staging / "labels.txt").write_text("".join(f"{label}\n" for label in manifest["labels"]), encoding="utf-8")


def _move_into_place(staging: Path, target: Path) -> None:
    """Rename ``staging`` to ``target``; an existing ``target`` is moved aside first, then removed."""
    if target.exists():
        old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".old"))
        os.replace(target, old / target.name)
        os.replace(staging, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, target)
