"""ONNX Runtime sessions of an export's model files, opened one way by :class:`ptmkit_export.Predictor`
and :class:`ptmkit_export.Translator`: thread count, providers, the fallback warning and the
one-line error on a file ONNX Runtime cannot load."""

from __future__ import annotations

import warnings
from pathlib import Path

import onnxruntime as ort

from ptmkit_export.errors import ExportDirError


def inference_session(model_path: Path, variant: str, threads: int | None, providers: list[str], text_input: bool) -> ort.InferenceSession:
    """The ONNX Runtime session of one variant file: ``threads`` intra-op threads (None: ONNX
    Runtime's default), the onnxruntime-extensions library registered for a model that tokenizes
    inside its graph (``text_input``).

    Raises:
        ValueError: ``threads`` < 1.
        ExportDirError: ONNX Runtime cannot load the file (its first message line quoted).

    Warns:
        RuntimeWarning: CUDA was asked for but ONNX Runtime fell back to another provider.
    """
    options = ort.SessionOptions()
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        options.intra_op_num_threads = threads
    if text_input:
        from ptmkit_export.tokenizer_graph import extensions_library

        options.register_custom_ops_library(extensions_library(f"{model_path} (variant {variant!r})"))
    try:
        session = ort.InferenceSession(str(model_path), options, providers=providers)
    except Exception as error:  # onnxruntime raises its own exception types
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ExportDirError(f"{model_path}: cannot load ONNX model ({first})") from error
    if "CUDAExecutionProvider" in providers and "CUDAExecutionProvider" not in session.get_providers():
        # onnxruntime-gpu without a usable CUDA runtime or device: ONNX Runtime fell back quietly.
        warnings.warn(
            f"{model_path}: CUDAExecutionProvider could not be used (no GPU or CUDA libraries); running on "
            f"{', '.join(session.get_providers())}",
            RuntimeWarning,
            stacklevel=3,
        )
    return session
