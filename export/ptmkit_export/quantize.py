"""Dynamic int8 quantization of an exported ONNX model, with the Gemm rewrite it needs.

ONNX Runtime's dynamic quantizer turns ``MatMul`` nodes with a constant weight into integer
matmuls (``MatMulInteger`` / ``DynamicQuantizeMatMul``) but leaves ``Gemm`` nodes in float, and
Keras/tf2onnx exports write every 2-D ``Dense``/``EinsumDense`` projection as a ``Gemm``. So
:func:`quantize_int8` first rewrites each eligible ``Gemm`` into ``MatMul`` (+ ``Add``), which is
numerically the same graph, then quantizes.
"""

from __future__ import annotations

import collections
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ptmkit_export.graph_passes import (
    approximate_gelu,
    fold_constants,
    rewrite_gemm_as_matmul,
    unfuse_skip_layer_normalization,
)

#: Op types an int8-quantized matmul shows up as in ONNX Runtime's output.
QUANTIZED_MATMUL_OPS = frozenset(
    {"MatMulInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QLinearMatMul", "QGemm"}
)


def count_ops(model: onnx.ModelProto) -> dict[str, int]:
    """Number of top-level nodes of each op type, e.g. ``{"MatMul": 10, "Gemm": 8, ...}``."""
    return dict(sorted(collections.Counter(node.op_type for node in model.graph.node).items()))


def count_float_weight_matmuls(model: onnx.ModelProto) -> int:
    """Top-level ``MatMul``/``Gemm`` nodes whose weight (input 1) is a float initializer.

    After :func:`quantize_int8` this is the number of weight matmuls left in float (0 when every
    projection was quantized); activation-by-activation matmuls (attention scores) do not count.
    """
    floats = {
        init.name
        for init in model.graph.initializer
        if init.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE)
    }
    return sum(1 for node in model.graph.node if node.op_type in ("MatMul", "Gemm") and node.input[1] in floats)


def _prune_opsets(model: onnx.ModelProto) -> None:
    """Drop opset imports of domains no node uses (ONNX Runtime's optimizer declares all of its own)."""
    used = {node.domain for node in model.graph.node} | {"", "ai.onnx"}
    keep = [opset for opset in model.opset_import if opset.domain in used]
    del model.opset_import[:]
    model.opset_import.extend(keep)


def _umask() -> int:
    # The only portable way to read the umask is to set it; restored at once.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


def quantize_int8(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    per_channel: bool = True,
    reduce_range: bool | None = None,
    preprocess: bool = True,
    exclude_nodes: Sequence[str] = (),
    unfuse_layer_norm: bool = False,
    fast_gelu: bool = False,
) -> dict[str, Any]:
    """Write a dynamically int8-quantized copy of the fp32 ONNX model ``src`` to ``dst``.

    Steps, all on temporary files: (1) when ``preprocess``, ONNX Runtime's
    ``quant_pre_process`` with ``skip_symbolic_shape=True``, i.e. basic graph optimization
    (constant folding: tf2onnx leaves ``EinsumDense`` weights behind a ``Reshape`` of a constant,
    which hides them from the quantizer; it also drops the weight-sized constants tf2onnx keeps
    only to feed ``Shape`` nodes) plus ONNX shape inference; symbolic shape inference is
    skipped because it fails on tf2onnx graphs ("Incomplete symbolic shape inference") and is not
    needed for dynamic quantization. Dynamic axes are kept. If this step fails, the raw model is
    used and the error is reported in the summary. (2) :func:`rewrite_gemm_as_matmul`, then
    ``onnx.checker``. (3) ``onnxruntime.quantization.quantize_dynamic`` with int8 weights
    (``QInt8``; activations are quantized to uint8 at run time). (4) ``dst`` is written atomically:
    a temporary file in ``dst``'s directory, then ``os.replace``; a failure leaves ``dst`` as it was.

    Args:
        src: path of the fp32 ``.onnx`` file.
        dst: path to write the int8 ``.onnx`` file to; its directory must exist. May equal ``src``.
        per_channel: one scale per output column of each weight instead of one per tensor (more accurate, same speed).
        reduce_range: 7-bit weights, needed on x86 CPUs without VNNI, where ONNX Runtime's u8s8 kernels saturate (a tiny
            BERT's logits moved by 25% of their range on an AVX2-only CPU); ``None``: :func:`auto_reduce_range` decides.
        preprocess: run step (1).
        exclude_nodes: names of nodes (in the graph after steps 1-2, see
            :func:`quantizable_matmuls`) to leave in float.
        unfuse_layer_norm: before step (2), split ``SkipLayerNormalization`` (exact; :mod:`ptmkit_export.graph_passes`).
        fast_gelu: before step (2), make the exact GELU ``FastGelu`` (the tanh approximation; not exact).

    Returns:
        A JSON-serializable summary: ``gemm_rewritten`` (Gemm nodes turned into MatMul),
        ``quantized_matmul`` (integer matmul nodes in ``dst``: MatMulInteger,
        DynamicQuantizeMatMul, ...), ``quantized_attention`` (``QAttention`` nodes: a fused
        ``Attention``'s query, key and value projections in int8), ``float_weight_matmul`` (MatMul/Gemm nodes in ``dst`` still
        multiplying by a float weight; 0 when all were quantized), ``nodes_before`` /
        ``nodes_after`` (``{op type: count}`` of ``src`` and ``dst``), ``bytes_before`` /
        ``bytes_after`` (file sizes), ``per_channel``, ``reduce_range``, ``weight_type``
        (``"QInt8"``), ``preprocessed`` (bool), ``preprocess_error`` (str or None),
        ``skip_layer_norm_unfused`` and ``gelu_approximated`` (nodes rewritten; 0 when not asked).

    Raises:
        FileNotFoundError: ``src`` or ``dst``'s directory does not exist.
        onnx.checker.ValidationError: the rewritten or quantized graph is invalid (a bug).
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src, dst = _checked_paths(Path(src), Path(dst))
    reduce_range = auto_reduce_range()[0] if reduce_range is None else reduce_range
    original, before = _load_measured(src)
    with tempfile.TemporaryDirectory(prefix="ptmkit-quantize-") as tmp:
        work = Path(tmp)
        model, preprocess_error = _preprocessed(src, work) if preprocess else (None, None)
        if model is None:  # not asked for, or the optimizer failed: quantize the raw graph
            model = original
        del original  # one copy of the weights in memory at a time (each is the model's size)
        prepared = _prepare_for_int8(model, unfuse_layer_norm, fast_gelu)
        rewritten = _gemms_to_matmuls(model)
        onnx.checker.check_model(model)
        excluded = _excluded_nodes(model, exclude_nodes)
        onnx.save(model, str(work / "rewritten.onnx"))
        del model  # quantize_dynamic reads the file
        quantized = _run_quantizer(
            quantize_dynamic, work / "rewritten.onnx", work / "int8.onnx", per_channel=per_channel, reduce_range=reduce_range,
            weight_type=QuantType.QInt8, nodes_to_exclude=excluded,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},  # contrib ops of an optimised graph
        )
        _write_atomically(work / "int8.onnx", dst)
    return {
        **_quantized_matmul_counts(rewritten, quantized),
        **_size_summary(before, count_ops(quantized), dst, per_channel, reduce_range, exclude_nodes),
        "preprocessed": preprocess and preprocess_error is None, "preprocess_error": preprocess_error,
        **prepared, "batched_weight_matmul": len(excluded) - len(exclude_nodes),
    }


def _excluded_nodes(model: onnx.ModelProto, exclude_nodes: Sequence[str]) -> list[str]:
    """``exclude_nodes`` (each checked to be in the graph), then the :func:`batched_weight_matmuls`
    not among them: what int8 leaves in float. :func:`quantize_int8`'s summary counts the latter
    as ``batched_weight_matmul``."""
    _check_excluded(model, exclude_nodes)
    return [*exclude_nodes, *(name for name in batched_weight_matmuls(model) if name not in exclude_nodes)]


def batched_weight_matmuls(model: onnx.ModelProto) -> list[str]:
    """Names of the top-level ``MatMul`` nodes whose float initializer weight (input 1) is not 2-D
    (a batched product, e.g. a relative-segment term ``einsum("bind,snd->bnis")`` after tf2onnx):
    ONNX Runtime's ``MatMulInteger`` takes a 2-D weight only (per-channel quantization of another
    rank fails at run time, "b zero point is not valid"), so int8 leaves them in float."""
    ranks = {init.name: len(init.dims) for init in model.graph.initializer if init.data_type == onnx.TensorProto.FLOAT}
    return [
        node.name
        for node in model.graph.node
        if node.op_type == "MatMul" and node.input[1] in ranks and ranks[node.input[1]] != 2
    ]


def _prepare_for_int8(model: onnx.ModelProto, unfuse_layer_norm: bool, fast_gelu: bool) -> dict[str, int]:
    """The int8 preparation passes asked for, in place; ``{"skip_layer_norm_unfused", "gelu_approximated"}`` counts."""
    return {
        "skip_layer_norm_unfused": unfuse_skip_layer_normalization(model) if unfuse_layer_norm else 0,
        "gelu_approximated": approximate_gelu(model) if fast_gelu else 0,
    }


def _checked_paths(src: Path, dst: Path) -> tuple[Path, Path]:
    if not src.is_file():
        raise FileNotFoundError(f"{src}: ONNX model not found")
    if not dst.parent.is_dir():
        raise FileNotFoundError(f"{dst.parent}: output directory not found")
    return src, dst


def _load_measured(src: Path) -> tuple[onnx.ModelProto, tuple[int, dict[str, int]]]:
    """``(model, (file size in bytes, count_ops))`` of the ONNX file ``src``, read before anything is written."""
    model = onnx.load(str(src))
    return model, (src.stat().st_size, count_ops(model))


def _preprocessed(src: Path, work: Path) -> tuple[onnx.ModelProto | None, str | None]:
    """ONNX Runtime's ``quant_pre_process`` of ``src`` into ``work``: ``(model, None)``.

    Basic graph optimization plus ONNX shape inference, symbolic shape inference skipped (see
    :func:`quantize_int8`). When it fails: ``(None, the error's first line)``.
    """
    from onnxruntime.quantization import quant_pre_process

    try:
        quant_pre_process(str(src), str(work / "preprocessed.onnx"), skip_symbolic_shape=True)
        return onnx.load(str(work / "preprocessed.onnx")), None
    except Exception as error:  # any optimizer failure: the caller quantizes the raw graph instead
        return None, _first_line(error)


def _gemms_to_matmuls(model: onnx.ModelProto) -> int:
    """:func:`rewrite_gemm_as_matmul` in place, then drop unused opset imports; the number of Gemms rewritten."""
    rewritten = rewrite_gemm_as_matmul(model)
    _prune_opsets(model)
    return rewritten


def _run_quantizer(quantize: Callable[..., object], model_in: Path, model_out: Path, **options: Any) -> onnx.ModelProto:
    """``quantize(model_in, model_out, **options)`` (ONNX Runtime's quantizers work on files); the checked result."""
    quantize(str(model_in), str(model_out), **options)
    quantized = onnx.load(str(model_out))
    onnx.checker.check_model(quantized)
    return quantized


def _quantized_matmul_counts(rewritten: int, quantized: onnx.ModelProto) -> dict[str, int]:
    """The head of :func:`quantize_int8`'s summary: what became integer, what stayed float."""
    nodes_after = count_ops(quantized)
    return {
        "gemm_rewritten": rewritten,
        "quantized_matmul": sum(n for op, n in nodes_after.items() if op in QUANTIZED_MATMUL_OPS),
        "quantized_attention": nodes_after.get("QAttention", 0),
        "float_weight_matmul": count_float_weight_matmuls(quantized),
    }


def _size_summary(
    before: tuple[int, dict[str, int]],
    nodes_after: dict[str, int],
    dst: Path,
    per_channel: bool,
    reduce_range: bool,
    exclude_nodes: Sequence[str],
) -> dict[str, Any]:
    """The summary fields :func:`quantize_int8` and :func:`quantize_int8_static` share."""
    bytes_before, nodes_before = before
    return {
        "nodes_before": nodes_before,
        "nodes_after": nodes_after,
        "bytes_before": bytes_before,
        "bytes_after": dst.stat().st_size,
        "per_channel": per_channel,
        "reduce_range": reduce_range,
        "weight_type": "QInt8",
        "excluded_nodes": list(exclude_nodes),
    }


def _write_atomically(source: Path, dst: Path) -> None:
    fd, partial = tempfile.mkstemp(dir=dst.parent, prefix=f".{dst.name}.", suffix=".partial")
    try:
        os.chmod(partial, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual file mode
        with os.fdopen(fd, "wb") as out, open(source, "rb") as data:
            shutil.copyfileobj(data, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, dst)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise


class UnknownNodeError(ValueError):
    """``exclude_nodes`` names a node the graph to be quantized does not have."""


def quantizable_matmuls(model: onnx.ModelProto) -> list[str]:
    """Names of the top-level ``MatMul`` nodes whose weight (input 1) is a float initializer: what int8 quantizes."""
    floats = {init.name for init in model.graph.initializer if init.data_type == onnx.TensorProto.FLOAT}
    return [node.name for node in model.graph.node if node.op_type == "MatMul" and node.input[1] in floats]


def _check_excluded(model: onnx.ModelProto, exclude_nodes: Sequence[str]) -> None:
    names = {node.name for node in model.graph.node}
    missing = [name for name in exclude_nodes if name not in names]
    if missing:
        candidates = quantizable_matmuls(model)
        shown = ", ".join(candidates[:4]) + (f", ... ({len(candidates)} in all)" if len(candidates) > 4 else "")
        raise UnknownNodeError(f"--exclude-nodes: no node named {', '.join(map(repr, missing))} in the graph; quantizable MatMul nodes: {shown}")


def _declare_float_types(model: onnx.ModelProto, nodes: Sequence[str]) -> None:
    """Declare float32 the inputs and outputs of the ``nodes`` (MatMuls) that have no type yet.

    ONNX shape inference cannot type the outputs of ONNX Runtime's contrib ops (``Attention``,
    ``SkipLayerNormalization``, ... of an optimised graph), and the static quantizer silently skips
    a tensor of unknown type: it would quantize the weights but no activation.
    """
    inferred = onnx.shape_inference.infer_shapes(model)
    typed = {value.name for value in list(inferred.graph.value_info) + list(model.graph.input) + list(model.graph.output)
             if value.type.tensor_type.elem_type}
    typed |= {init.name for init in model.graph.initializer}
    wanted = set(nodes)
    missing = []
    for node in model.graph.node:
        if node.name in wanted:
            missing.extend(name for name in (node.input[0], node.output[0]) if name not in typed)
    for name in dict.fromkeys(missing):
        model.graph.value_info.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))


def cpu_has_vnni(cpuinfo: str | None = None) -> bool | None:
    """Whether this CPU has an 8-bit dot-product instruction (AVX-512 VNNI or AVX-VNNI).

    Reads the ``flags`` line of ``/proc/cpuinfo`` (or ``cpuinfo``, for tests). ``None`` when there
    is no x86 ``flags`` line to read (not Linux, or not x86: ARM's int8 kernels need no reduced range).
    """
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
                cpuinfo = handle.read()
        except OSError:
            return None
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[-1].split())
            return bool(flags & {"avx512_vnni", "avx_vnni"})
    return None


def auto_reduce_range(cpuinfo: str | None = None) -> tuple[bool, str]:
    """``(reduce_range, reason)``: 7-bit weights on x86 CPUs without VNNI, 8-bit otherwise.

    Without VNNI, ONNX Runtime's x86 u8s8 kernels (``vpmaddubsw``) add pairs of 8-bit products in
    16 bits, which can saturate with full-range weights; 7-bit weights cannot.
    """
    vnni = cpu_has_vnni(cpuinfo)
    if vnni is None:
        return False, "no x86 CPU flags found (/proc/cpuinfo): full 8-bit range"
    if vnni:
        return False, "CPU has AVX-512 VNNI / AVX-VNNI: full 8-bit range"
    return True, "CPU lacks AVX-512 VNNI / AVX-VNNI: weights reduced to 7 bits to avoid u8s8 saturation"


#: ``--method`` names of static calibration.
CALIBRATION_METHODS = ("minmax", "entropy", "percentile")


def quantize_int8_static(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    calibration: Sequence[dict[str, np.ndarray]],
    method: str = "minmax",
    per_channel: bool = True,
    reduce_range: bool | None = None,
    exclude_nodes: Sequence[str] = (),
    unfuse_layer_norm: bool = False,
    fast_gelu: bool = False,
) -> dict[str, Any]:
    """Static int8 quantization in QDQ format, calibrated on real inputs.

    Steps: ONNX Runtime basic optimization (constant folding), :func:`rewrite_gemm_as_matmul`,
    then ``onnxruntime.quantization.quantize_static`` (``QuantFormat.QDQ``, uint8 activations,
    int8 weights) on the ``MatMul`` nodes with a constant weight (:func:`quantizable_matmuls`,
    less ``exclude_nodes``): activation scales come from running ``calibration`` through the
    model with the chosen ``method`` (MinMax, Entropy or Percentile 99.999). Attention's
    activation-by-activation ``MatMul``s, softmax and layer norms stay float. ONNX Runtime fuses
    the ``QuantizeLinear``/``DequantizeLinear`` pairs around each ``MatMul`` into integer kernels
    when the session loads.

    Args:
        src, dst: fp32 model in, QDQ model out (written atomically).
        calibration: batches of model inputs (``{input name: array}``), e.g. tokenized dev text.
        method: one of :data:`CALIBRATION_METHODS`.
        per_channel, reduce_range, exclude_nodes: as :func:`quantize_int8`.
        unfuse_layer_norm, fast_gelu: as :func:`quantize_int8`.

    Returns:
        ``{"mode": "static-qdq", "method", "calibration_batches", "quantize_linear",
        "dequantize_linear", "quantized_matmul", "nodes_before", "nodes_after", "bytes_before",
        "bytes_after", "per_channel", "reduce_range", "excluded_nodes"}``.

    Raises:
        ValueError: unknown ``method``, or no calibration batches.
        UnknownNodeError: ``exclude_nodes`` names a node that is not in the graph.
        RuntimeError: the quantizer quantized no activation (a bug: it would be weight-only int8).
    """
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    reduce_range = auto_reduce_range()[0] if reduce_range is None else reduce_range
    calibrate_method = _calibration_method(method)
    batches = list(calibration)
    if not batches:
        raise ValueError("no calibration batches")
    src, dst = Path(src), Path(dst)
    model, before, nodes, prepared = _static_quantization_graph(src, exclude_nodes, unfuse_layer_norm, fast_gelu)
    with tempfile.TemporaryDirectory(prefix="ptmkit-quantize-static-") as tmp:
        work = Path(tmp)
        onnx.save(model, str(work / "folded.onnx"))
        del model  # quantize_static reads the file
        quantized = _run_quantizer(
            quantize_static, work / "folded.onnx", work / "int8.onnx", calibration_data_reader=_calibration_reader(batches),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            per_channel=per_channel,
            reduce_range=reduce_range,
            nodes_to_quantize=nodes,
            calibrate_method=calibrate_method,
            # Not CalibMaxIntermediateOutputs: ONNX Runtime 1.32's MinMax calibrator drops (does not
            # fold) the activations it holds when that count is reached, so the ranges would come
            # from the last batches only.
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT, "CalibTensorRangeSymmetric": False},
        )
        after = count_ops(quantized)
        if nodes and not after.get("QuantizeLinear"):
            raise RuntimeError("static quantization quantized no activation (0 QuantizeLinear nodes); nothing written")
        _write_atomically(work / "int8.onnx", dst)
    return {
        "mode": "static-qdq",
        "method": method,
        "calibration_batches": len(batches),
        "quantize_linear": after.get("QuantizeLinear", 0),
        "dequantize_linear": after.get("DequantizeLinear", 0),
        "quantized_matmul": len(nodes),
        **_size_summary(before, after, dst, per_channel, reduce_range, exclude_nodes),
        **prepared,
    }


def _static_quantization_graph(
    src: Path, exclude_nodes: Sequence[str], unfuse_layer_norm: bool = False, fast_gelu: bool = False
) -> tuple[onnx.ModelProto, tuple[int, dict[str, int]], list[str], dict[str, int]]:
    """``src`` constant-folded, its Gemms as MatMuls, ready for ``quantize_static``.

    Returns ``(model, (bytes, count_ops) of src, names of the MatMul nodes to quantize,
    preparation counts)``: the quantizable MatMuls less ``exclude_nodes``, their activations
    declared float32; the preparation as :func:`quantize_int8`'s.

    Raises:
        UnknownNodeError: ``exclude_nodes`` names a node that is not in the graph.
    """
    original, before = _load_measured(src)
    model = fold_constants(original)
    del original
    prepared = _prepare_for_int8(model, unfuse_layer_norm, fast_gelu)
    _gemms_to_matmuls(model)
    _check_excluded(model, exclude_nodes)
    nodes = [name for name in quantizable_matmuls(model) if name not in set(exclude_nodes)]
    _declare_float_types(model, nodes)
    return model, before, nodes, prepared


def _calibration_method(method: str) -> Any:
    """ONNX Runtime's ``CalibrationMethod`` for a ``--method`` name; ``ValueError`` for an unknown one."""
    from onnxruntime.quantization import CalibrationMethod

    methods = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy, "percentile": CalibrationMethod.Percentile}
    if method not in methods:
        raise ValueError(f"calibration method must be one of {', '.join(CALIBRATION_METHODS)}, got {method!r}")
    return methods[method]


def _calibration_reader(batches: Sequence[dict[str, np.ndarray]]) -> Any:
    """An ONNX Runtime ``CalibrationDataReader`` that hands out ``batches`` once each, in order."""
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self._iter = iter(batches)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._iter, None)

    return Reader()


#: ``MatMulNBits`` settings of :func:`quantize_int4`.
INT4_BLOCK_SIZE = 32
#: ONNX Runtime's ``accuracy_level`` 4: the activations are quantized to int8 per block at run time
#: and multiplied by the 4-bit weights with the integer (VNNI / AMX) kernels; lower levels compute
#: in fp32 (1), fp16 (2) or bf16 (3).
INT4_ACCURACY_LEVEL = 4


def quantize_int4(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    block_size: int = INT4_BLOCK_SIZE,
    accuracy_level: int = INT4_ACCURACY_LEVEL,
    exclude_nodes: Sequence[str] = (),
) -> dict[str, Any]:
    """4-bit weight-only quantization: each ``MatMul`` with a constant weight becomes
    ``com.microsoft.MatMulNBits`` (4-bit weights, one fp32 scale per ``block_size`` weights of a
    column, symmetric).

    Steps: constant folding and :func:`rewrite_gemm_as_matmul` (as for static int8), then ONNX
    Runtime's ``MatMulNBitsQuantizer`` (``onnxruntime.quantization.matmul_nbits_quantizer``, which
    needs the ``onnx-ir`` package: ``pip install ptmkit-export[int4]``). A fused ``Attention``'s
    query/key/value weights are an input of that op, not of a ``MatMul``: they stay fp32.

    Args:
        src, dst: fp32 model in, int4 model out (written atomically).
        block_size: weights per scale, a power of two >= 16 (default 32).
        accuracy_level: ONNX Runtime's compute type of ``MatMulNBits`` (:data:`INT4_ACCURACY_LEVEL`).
        exclude_nodes: node names kept in float, as :func:`quantize_int8`.

    Returns:
        ``{"mode": "int4-weight-only", "block_size", "accuracy_level", "matmul_nbits",
        "float_weight_matmul", "nodes_before", "nodes_after", "bytes_before", "bytes_after",
        "excluded_nodes"}``.

    Raises:
        ImportError: ``onnx-ir`` is not installed (the message says which package to install).
        UnknownNodeError: ``exclude_nodes`` names a node that is not in the graph.
        RuntimeError: no ``MatMul`` was quantized.
    """
    try:
        from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer
    except ImportError as error:
        raise ImportError(f"int4 quantization needs ONNX Runtime's MatMulNBits quantizer and the onnx-ir package ({error}); pip install 'ptmkit-export[int4]'") from None

    src, dst = _checked_paths(Path(src), Path(dst))
    original, (bytes_before, nodes_before) = _load_measured(src)
    model = fold_constants(original)
    del original
    _gemms_to_matmuls(model)
    _check_excluded(model, exclude_nodes)
    config = DefaultWeightOnlyQuantConfig(block_size=block_size, is_symmetric=True, accuracy_level=accuracy_level)
    quantizer = MatMulNBitsQuantizer(model, block_size=block_size, is_symmetric=True, accuracy_level=accuracy_level,
                                     nodes_to_exclude=list(exclude_nodes), algo_config=config)
    quantizer.process()
    quantized = quantizer.model.model if hasattr(quantizer.model, "model") else quantizer.model
    onnx.checker.check_model(quantized)
    after = count_ops(quantized)
    if not after.get("MatMulNBits"):
        raise RuntimeError("int4 quantization quantized no MatMul (0 MatMulNBits nodes); nothing written")
    with tempfile.TemporaryDirectory(prefix="ptmkit-quantize-int4-") as tmp:
        onnx.save(quantized, str(Path(tmp) / "int4.onnx"))
        _write_atomically(Path(tmp) / "int4.onnx", dst)
    return {
        "mode": "int4-weight-only",
        "block_size": block_size,
        "accuracy_level": accuracy_level,
        "matmul_nbits": after["MatMulNBits"],
        "float_weight_matmul": count_float_weight_matmuls(quantized),
        "nodes_before": nodes_before,
        "nodes_after": after,
        "bytes_before": bytes_before,
        "bytes_after": dst.stat().st_size,
        "excluded_nodes": list(exclude_nodes),
    }
