"""Stage 3 of ``ptmkit export``, variants: the graphs built from the fp32 ONNX file, each then
gated against it (:mod:`ptmkit.exporting.gate`).

- ``--optimize N`` (1-3): ptmkit's graph passes and, at 2-3, ONNX Runtime's transformer optimizer
  (:mod:`ptmkit_export.optimize`; model type, head count and hidden size from the family's
  :meth:`~ptmkit.contract.ModelFamily.graph_optimizer`) write ``model.opt.onnx`` (variant
  ``optimized``); the fused op counts are printed and stored. Quantization then starts from the
  optimised graph (:func:`optimized_variant`).
- ``--int8``: dynamic int8 (:func:`ptmkit_export.quantize.quantize_int8`; per-channel unless
  ``per_channel=False``; ``reduce_range`` chosen from the CPU unless given; ``exclude_nodes`` kept
  float), or with ``static=True`` QDQ static int8 calibrated on texts of ``calibration``
  (:func:`ptmkit_export.quantize.quantize_int8_static`) (:func:`int8_variant`). Before quantizing,
  by default, ONNX Runtime's ``SkipLayerNormalization`` is split back into ``Add`` +
  ``LayerNormalization`` (``fused_layer_norm=False``) and the exact GELU (``Gelu``/``BiasGelu``)
  becomes the tanh approximation ``FastGelu`` (``exact_gelu=False``): the fastest int8 graph that
  passed the gate in ``benchmarks/minilm_inference.py`` (see ``benchmarks/results/minilm_inference.md``).
- ``--int4``: 4-bit weight-only ``MatMulNBits`` (block 32; :func:`ptmkit_export.quantize.quantize_int4`)
  from the same base graph (:func:`int4_variant`).
- ``--fp16``: ``model.fp16.onnx`` (:func:`fp16_variant`).
- ``--with-tokenizer``: single-file models that tokenize inside the graph
  (:func:`tokenizer_variants`). The graph, its checks and the manifest entries are
  :mod:`ptmkit_export.tokenizer_graph`'s (no TensorFlow there); this module feeds it the run's
  tokenizer.json and dev texts and records a batch 1 x 128 latency beside the two-step variants'
  (same threads, same repeats).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from rich.console import Console

from ptmkit.contract import InputSpec
from ptmkit.errors import ExportError
from ptmkit.exporting.parity import length_batches
from ptmkit.exporting.source import ExportSource

#: Variant names and files, in the order they are built and shown.
VARIANT_FILES = {"fp32": "model.onnx", "optimized": "model.opt.onnx", "int8": "model.int8.onnx", "int4": "model.int4.onnx", "fp16": "model.fp16.onnx"}
#: The single-file models of ``--with-tokenizer`` (:func:`tokenizer_variants`).
TOKENIZER_VARIANT_FILES = ("model.with_tokenizer.onnx", "model.int8.with_tokenizer.onnx")
CALIBRATION_TEXTS = 256  # texts of --calibration used for static int8
CALIBRATION_BATCH = 16
#: Dev texts the single-file check runs on, besides ptmkit_export's hard cases.
CHECK_TEXTS = 500


class Int8Options(NamedTuple):
    """How ``--int8`` quantizes (see :func:`ptmkit.exporting.export_run`'s arguments of the same names)."""

    per_channel: bool = True
    reduce_range: bool | None = None
    exclude_nodes: tuple[str, ...] | list[str] = ()
    static: bool = False
    calibration: str | Path | None = None
    method: str = "minmax"
    fused_layer_norm: bool = False  # keep SkipLayerNormalization (default: split before quantizing)
    exact_gelu: bool = False  # keep the erf GELU (default: FastGelu, the tanh approximation)


def optimized_variant(source: ExportSource, fp32_path: Path, path: Path, level: int, console: Console) -> dict[str, Any]:
    """Write ``model.opt.onnx`` (``path``) from ``fp32_path`` at ``--optimize level``; print what was fused.

    Returns:
        the variant's build record: ``{"optimization": {"passes", "fused", "notes", ...}}``.
    """
    from ptmkit_export.optimize import optimize_transformer

    graph_optimizer = source.graph_optimizer
    with console.status(f"optimizing the graph (level {level})"):
        by_field = {spec.field: spec.name for spec in source.family.inputs}
        info = optimize_transformer(
            fp32_path, path, level, *(graph_optimizer[1:] if graph_optimizer else (None, None)),
            mask_input=by_field.get("attention_mask"), ids_input=by_field.get("ids"), segment_input=by_field.get("type_ids"),
            model_type=graph_optimizer.model_type if graph_optimizer else None,
        )
    fused = ", ".join(f"{op} {n}" for op, n in info["fused"].items() if n) or "nothing"
    console.print(f"optimize {level}: passes {info['passes']}; fused: {fused}")
    for note in info["notes"]:
        console.print(f"[yellow]note: {note}[/yellow]")
    return {"optimization": info}


def int8_variant(source: ExportSource, base: Path, path: Path, source_variant: str, options: Int8Options, console: Console) -> dict[str, Any]:
    """Quantize ``base`` (the graph of variant ``source_variant``) to int8 at ``path``.

    Returns:
        the variant's build record: ``{"quantization": {"mode", "reduce_range", "source_variant", ...}}``.

    Raises:
        ExportError: ``exclude_nodes`` names no node of the graph; no calibration text.
    """
    from ptmkit_export.quantize import UnknownNodeError, auto_reduce_range, quantize_int8, quantize_int8_static

    reduce_range = options.reduce_range
    if reduce_range is None:
        chosen, reason = auto_reduce_range()
        reduce_choice = {"reduce_range": chosen, "reduce_range_source": "auto", "reduce_range_reason": reason}
    else:
        reduce_choice = {"reduce_range": reduce_range, "reduce_range_source": "--reduce-range" if reduce_range else "--no-reduce-range"}
    kind = f"static QDQ, {options.method} calibration" if options.static else "dynamic"
    prepare = {"unfuse_layer_norm": not options.fused_layer_norm, "fast_gelu": not options.exact_gelu}
    with console.status(f"quantizing to int8 ({kind}, {'per-channel' if options.per_channel else 'per-tensor'})"):
        try:
            if options.static:
                assert options.calibration is not None
                batches = calibration_batches(options.calibration, source.tokenizer, source.sequence_length, source.family.inputs, source.padding_id, source.mask_input)
                quantization = quantize_int8_static(base, path, batches, options.method, options.per_channel, reduce_choice["reduce_range"], options.exclude_nodes, **prepare)
            else:
                quantization = quantize_int8(base, path, per_channel=options.per_channel, reduce_range=reduce_choice["reduce_range"], exclude_nodes=options.exclude_nodes, **prepare)
                quantization["mode"] = "dynamic"
        except UnknownNodeError as exc:
            raise ExportError(str(exc)) from None
    quantization |= reduce_choice
    quantization["source_variant"] = source_variant
    if quantization["skip_layer_norm_unfused"] or quantization["gelu_approximated"]:
        console.print(f"int8: {quantization['skip_layer_norm_unfused']} SkipLayerNormalization split into Add + LayerNormalization, "
                      f"{quantization['gelu_approximated']} GELU made FastGelu (tanh approximation) before quantizing")
    return {"quantization": quantization}


def int4_variant(base: Path, path: Path, source_variant: str, exclude_nodes: Sequence[str], console: Console) -> dict[str, Any]:
    """4-bit weight-only quantization of ``base`` (the graph of variant ``source_variant``) at ``path``.

    Returns:
        the variant's build record: ``{"quantization": {"mode": "int4-weight-only", "block_size", ...}}``.

    Raises:
        ExportError: ONNX Runtime's MatMulNBits quantizer cannot be imported (``onnx-ir`` missing);
            ``exclude_nodes`` names no node of the graph.
    """
    from ptmkit_export.quantize import UnknownNodeError, quantize_int4

    with console.status("quantizing weights to int4 (MatMulNBits, block 32)"):
        try:
            quantization = quantize_int4(base, path, exclude_nodes=exclude_nodes)
        except (ImportError, UnknownNodeError) as exc:
            raise ExportError(f"--int4: {exc}") from None
    return {"quantization": quantization | {"source_variant": source_variant}}


def fp16_variant(base: Path, path: Path, source_variant: str, console: Console) -> dict[str, Any]:
    """Convert ``base`` (the graph of variant ``source_variant``) to fp16 at ``path``.

    Returns:
        the variant's build record: ``{"conversion": {..., "source_variant"}}``.
    """
    from ptmkit_export.optimize import convert_fp16

    with console.status("converting to fp16"):
        conversion = convert_fp16(base, path)
    return {"conversion": conversion | {"source_variant": source_variant}}


def calibration_batches(
    path: str | Path, tokenizer: Any, sequence_length: int, inputs: Sequence[InputSpec], pad: int, mask_input: str | None
) -> list[dict[str, np.ndarray]]:
    """The first :data:`CALIBRATION_TEXTS` texts of ``path``, encoded, in batches of
    :data:`CALIBRATION_BATCH` cut to their longest row.

    Raises:
        ExportError: no text in ``path``.
    """
    from ptmkit.data.readers import read_records
    from ptmkit.data.tokenization import encode_texts

    texts = [record.text for _, record in zip(range(CALIBRATION_TEXTS), read_records(path, labelled=False), strict=False)]
    if not texts:
        raise ExportError(f"{path}: no calibration text")
    return length_batches(encode_texts(tokenizer, texts, sequence_length, inputs, pad), mask_input, CALIBRATION_BATCH)


def dev_texts(dev_file: str | Path | None, labels: list[str]) -> list[str]:
    """Up to :data:`CHECK_TEXTS` texts of ``dev_file`` (labelled when ``labels``), or none without one."""
    if not dev_file:
        return []
    if labels:
        from ptmkit.training.finetune import load_labelled

        texts, _, _ = load_labelled(dev_file, labels)
    else:
        from ptmkit.data.readers import read_records

        texts = [record.text for record in read_records(dev_file, labelled=False)]
    return [str(text) for text in texts[:CHECK_TEXTS]]


def tokenizer_variants(
    directory: Path, variants: dict[str, Any], source: ExportSource, latency_threads: int, latency_repeats: int, console: Console
) -> dict[str, dict[str, Any]]:
    """Build, check and time the single-file variants (``fp32+tokenizer``, ``int8+tokenizer``) of
    the ``variants`` in ``directory``, from its ``tokenizer.json``, checked on :func:`dev_texts`
    of the run's dev file.

    Returns:
        their manifest entries (see :func:`ptmkit_export.tokenizer_graph.build_tokenizer_variants`),
        each with ``latency_ms_b1x128``: one text of ``min(128, sequence_length)`` tokens,
        tokenized in the graph, median of ``latency_repeats`` calls.

    Raises:
        ExportError: the tokenizer cannot go into the graph, a check failed, or
            onnxruntime-extensions is not installed; no single-file model is written.
    """
    from ptmkit.data.tokenization import manifest_inputs
    from ptmkit_export.errors import ExportDirError
    from ptmkit_export.tokenizer_graph import TokenizerGraphError, build_tokenizer_variants_isolated

    check_texts = dev_texts(source.dev_file, source.labels)
    inputs = [{key: spec[key] for key in ("name", "dtype", "encoding")} for spec in manifest_inputs(source.family.inputs)]
    try:
        with console.status("building the tokenizer graph (onnxruntime-extensions) and checking it against tokenizers"):
            # In a fresh process: onnxruntime-extensions' regular expressions misbehave next to TensorFlow.
            made = build_tokenizer_variants_isolated(
                latency_threads, latency_repeats, directory=directory, variants=variants, tokenizer_json=directory / "tokenizer.json",
                inputs=inputs, output_name=source.output, max_sequence_length=source.sequence_length, pad_token_id=source.padding_id,
                check_texts=check_texts,
            )
    except (TokenizerGraphError, ExportDirError) as error:
        raise ExportError(str(error)) from error
    for name, entry in made.items():
        check = entry["check"]
        console.print(
            f"{name}: {entry['file']}, token ids identical to tokenizers on {check['texts']} texts, max abs difference to the "
            f"two-step {entry['base']} {check['max_abs_diff_vs_two_step']:.1e}, {entry['latency_ms_b1x128']:.2f} ms at batch 1 x 128 "
            f"against {entry['two_step_latency_ms_b1x128']:.2f} ms for tokenizers + {entry['base']} (same process, tokenization included)"
        )
    return made
