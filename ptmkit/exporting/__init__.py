"""``ptmkit export RUN_DIR --onnx [--optimize N] [--int8 [--static ...]] [--int4] [--fp16]``: Keras -> ONNX, checked, optimised, quantised, gated.

:func:`export_run` runs the stages in order, one module each:

0. read the run (:mod:`~ptmkit.exporting.source`): the Keras model, its tokenizer, the family's
   declarations;
1. convert (:mod:`~ptmkit.exporting.convert`): tf2onnx, in less memory than Keras'
   ``model.export``, to ``model.onnx`` with the declared inputs and one output, ``logits`` or
   ``embeddings``;
2. check parity (:mod:`~ptmkit.exporting.parity`): ONNX Runtime against Keras at shapes other than
   the trace's, max abs difference <= 1e-4;
3. variants (:mod:`~ptmkit.exporting.variants`): ``--optimize`` (``model.opt.onnx``), ``--int8``
   (dynamic, or static QDQ), ``--int4`` (weight-only ``MatMulNBits``), ``--fp16``; ``--with-tokenizer`` single-file models;
4. gate (:mod:`~ptmkit.exporting.gate`): every variant against fp32 on the dev set and in paired
   timings; one that disagrees or is slower is stored with ``ok: false``;
5. write (:mod:`~ptmkit.exporting.write`): the manifest, and the files moved from a staging
   directory into the export directory only when every check passed.

Two exports of families that are no transformers have their own module: bag-of-rows classifiers
(:mod:`~ptmkit.exporting.rows`, e.g. fastText's supervised model) and word-vector lookups
(:mod:`~ptmkit.exporting.vectors`).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from rich.console import Console

from ptmkit.console import default_console
from ptmkit.contract import ClassifiesRows, ModelFamily, WritesOwnExport
from ptmkit.errors import ExportError
from ptmkit.exporting.convert import collections_skip_live_objects, convert_to_onnx, release_memory
from ptmkit.exporting.gate import LATENCY_REPEATS, LATENCY_THREADS, Gate, open_session, print_gate_table
from ptmkit.exporting.keras_side import convert_and_check
from ptmkit.exporting.parity import PARITY_TOLERANCE, check_parity, cosine, parity_shapes, random_inputs, report_parity
from ptmkit.exporting.recurrent import graph_recurrence
from ptmkit.exporting.rows import check_row_options, export_row_classifier
from ptmkit.exporting.source import ExportSource, read_run, with_width
from ptmkit.exporting.variants import (
    VARIANT_FILES,
    Int8Options,
    fp16_variant,
    int4_variant,
    int8_variant,
    optimized_variant,
    tokenizer_variants,
)
from ptmkit.exporting.write import check_destination, export_manifest, summarize, write_export
from ptmkit.io import staging_directory
from ptmkit.rundir import RunDir

__all__ = [
    "PARITY_TOLERANCE", "ExportError", "check_options", "check_parity", "convert_to_onnx", "cosine", "export_run", "parity_shapes",
    "random_inputs", "release_memory",
]


def check_options(
    optimize: int = 0,
    int8: bool = False,
    static: bool = False,
    calibration: str | Path | None = None,
    method: str = "minmax",
    exclude_nodes: tuple[str, ...] | list[str] = (),
    per_channel: bool = True,
    reduce_range: bool | None = None,
    fused_layer_norm: bool = False,
    exact_gelu: bool = False,
    int4: bool = False,
) -> None:
    """Reject inconsistent export options before anything is converted.

    Raises:
        ExportError: ``optimize`` not in 0-3; ``--static``, ``--calibration``, ``--method``,
            ``--exclude-nodes`` (unless ``--int4``), ``--per-tensor``, ``--reduce-range``,
            ``--fused-layer-norm`` or ``--exact-gelu`` without ``--int8``;
            ``--static`` without ``--calibration`` (or the reverse); a calibration file that does
            not exist; an unknown calibration method.
    """
    from ptmkit_export.optimize import LEVELS
    from ptmkit_export.quantize import CALIBRATION_METHODS

    if optimize not in LEVELS:
        raise ExportError(f"--optimize must be one of {', '.join(map(str, LEVELS))}, got {optimize}")
    if not int8:
        given = [flag for flag, on in (("--static", static), ("--calibration", calibration is not None), ("--method", method != "minmax"),
                                       ("--exclude-nodes", bool(exclude_nodes) and not int4), ("--per-tensor", not per_channel),
                                       ("--reduce-range/--no-reduce-range", reduce_range is not None),
                                       ("--fused-layer-norm", fused_layer_norm), ("--exact-gelu", exact_gelu)) if on]
        if given:
            raise ExportError(f"{', '.join(given)} configure int8 quantization; add --int8")
        return
    if method not in CALIBRATION_METHODS:
        raise ExportError(f"--method must be one of {', '.join(CALIBRATION_METHODS)}, got {method!r}")
    if static and calibration is None:
        raise ExportError("--static needs --calibration FILE (real text, one example per line, to calibrate activation ranges)")
    if not static and (calibration is not None or method != "minmax"):
        raise ExportError("--calibration/--method apply to static quantization; add --static")
    if calibration is not None and not Path(calibration).is_file():
        raise ExportError(f"{calibration}: calibration file not found")


@collections_skip_live_objects()  # the export's collections skip what was alive before it
def export_run(
    run_dir: str | Path, out: str | Path | None = None, int8: bool = False, dev: str | Path | None = None, console: Console | None = None,
    *, optimize: int = 0, per_channel: bool = True, reduce_range: bool | None = None, exclude_nodes: tuple[str, ...] | list[str] = (),
    static: bool = False, calibration: str | Path | None = None, method: str = "minmax", fp16: bool = False, with_tokenizer: bool = False,
    isolate: bool | None = None, fused_layer_norm: bool = False, exact_gelu: bool = False, int4: bool = False, merge_lora: bool = False,
) -> dict[str, Any]:
    """Export a run to ONNX (optimised, int8, fp16 variants on request); see the module docstring.

    A fine-tuned run exports its head's ``logits``; a run without a head (pre-trained or imported
    with ``ptmkit import-hf``) exports sentence ``embeddings`` with the run's pooling
    (:mod:`ptmkit.embedding`). A bag-of-rows classifier (:class:`~ptmkit.contract.ClassifiesRows`)
    goes to :func:`ptmkit.exporting.rows.export_row_classifier` (fp32 only); a family that
    :class:`~ptmkit.contract.WritesOwnExport` writes it itself unless it declines the run.

    Args:
        run_dir: a run directory.
        out: the export directory (default ``RUN_DIR/export``).
        int8: also write ``model.int8.onnx``.
        dev: file for the fp32-vs-variant gate: labelled for a head (default: the run's dev file), any text file for embeddings (required then).
        optimize: 0-3, see :mod:`ptmkit_export.optimize`; >= 1 writes ``model.opt.onnx``.
        per_channel: int8 weights with one scale per output column (default) or per tensor.
        reduce_range: 7-bit int8 weights; ``None`` chooses from the CPU (no VNNI: True).
        exclude_nodes: node names int8 leaves in float.
        static: static QDQ int8 calibrated on ``calibration`` instead of dynamic int8.
        calibration: text file (any format ``ptmkit`` reads, labels ignored) for static int8.
        method: static calibration: ``minmax``, ``entropy`` or ``percentile``.
        fused_layer_norm, exact_gelu: int8 keeps ``SkipLayerNormalization`` / the erf GELU
            (default: split / ``FastGelu``, faster; :mod:`~ptmkit.exporting.variants`).
        int4: also write ``model.int4.onnx`` (4-bit weight-only ``MatMulNBits``, block 32).
        merge_lora: fold a LoRA run's updates into its kernels in Keras first (manifest ``lora``).
        fp16: also write ``model.fp16.onnx`` (for GPUs).
        with_tokenizer: also write single-file models that tokenize inside the graph (variants
            ``fp32+tokenizer``, ``int8+tokenizer``; :func:`~ptmkit.exporting.variants.tokenizer_variants`).
        isolate: convert and check parity in a child process, so that this one never imports
            TensorFlow; None (default): when this process has not imported it already
            (:func:`ptmkit.exporting.keras_side.convert_and_check`).

    Returns:
        the export manifest, with ``directory`` and a ``summary`` of the measured numbers.

    Raises:
        RunDirError: missing or corrupted files.
        ExportError: bad options (:func:`check_options`); ``out`` is the run, holds it or is another
            run (:func:`~ptmkit.exporting.write.check_destination`); the ONNX graph failed a check (nothing is
            written); no dev texts for the gate; ``exclude_nodes`` names no node of the graph; a
            variant option for a bag-of-rows classifier; ``int4`` without ``onnx-ir``; ``merge_lora`` without LoRA.
    """
    from ptmkit.plugins import get_registry

    check_options(optimize, int8, static, calibration, method, exclude_nodes, per_channel, reduce_range, fused_layer_norm, exact_gelu, int4)
    console, registry = console or default_console(), get_registry()
    run = RunDir(run_dir)
    family = registry.family(run.manifest()["family"])
    check_destination(run.path, out)
    options = {"int8": int8, "dev": dev, "optimize": optimize, "per_channel": per_channel, "reduce_range": reduce_range, "static": static, "int4": int4,
               "exclude_nodes": tuple(exclude_nodes), "calibration": calibration, "method": method, "fp16": fp16, "with_tokenizer": with_tokenizer,
               "fused_layer_norm": fused_layer_norm, "exact_gelu": exact_gelu}
    if (special := _family_export(family, run.path, out, options, console)) is not None:
        return special
    wanted = [name for name, on in (("optimized", optimize > 0), ("int8", int8), ("int4", int4), ("fp16", fp16)) if on]
    source = read_run(run_dir, registry, dev, optimize, wanted, merge_lora)  # 0. read the run (no TensorFlow)
    target = Path(out) if out is not None else run.path / "export"
    with staging_directory(target, ".export-") as tmp_name:
        tmp = Path(tmp_name)
        fp32_path = tmp / VARIANT_FILES["fp32"]
        parity = convert_and_check(source, fp32_path, console, isolate)  # 1. convert, 2. check parity (Keras: in a child process)
        worst = report_parity(parity, console)
        source = with_width(source, (session := open_session(fp32_path)).get_outputs()[0].shape[-1])
        gate = Gate(session, source, console)  # 4. gate, fp32 first
        variants: dict[str, Any] = {"fp32": gate.fp32_entry(fp32_path, parity)}
        if wanted:
            variants["fp32"] |= gate.load_dev()
        int8_options = Int8Options(per_channel, reduce_range, exclude_nodes, static, calibration, method, fused_layer_norm, exact_gelu) if int8 else None
        variants |= _built_and_gated(gate, source, tmp, optimize, int8_options, fp16, console, tuple(exclude_nodes) if int4 else None)  # 3. variants
        gate_table = gate.table(variants)
        print_gate_table(gate_table, console)
        variants |= _with_tokenizer_file(run, tmp, variants, source, with_tokenizer, console)
        manifest = export_manifest(source, variants, gate_table, graph_recurrence(fp32_path))  # 5. write
        write_export(tmp, target, manifest)
    return {**manifest, "directory": str(target), "summary": summarize(worst, variants)}


def _with_tokenizer_file(run: RunDir, tmp: Path, variants: dict[str, Any], source: ExportSource, with_tokenizer: bool, console: Console) -> dict[str, Any]:
    """Copy the run's ``tokenizer.json`` into the staged export ``tmp``; with ``with_tokenizer``,
    also write and gate the single-file variants that tokenize inside the graph
    (:func:`~ptmkit.exporting.variants.tokenizer_variants`), returned to be added to ``variants``."""
    shutil.copyfile(run.require("tokenizer.json"), tmp / "tokenizer.json")
    if not with_tokenizer:
        return {}
    return tokenizer_variants(tmp, variants, source, LATENCY_THREADS, LATENCY_REPEATS, console)


def _family_export(family: ModelFamily, run_dir: Path, out: str | Path | None, options: dict[str, Any], console: Console) -> dict[str, Any] | None:
    """The export of a family that makes its own: a bag-of-rows classifier
    (:func:`~ptmkit.exporting.rows.export_row_classifier`), or one that
    :class:`~ptmkit.contract.WritesOwnExport` and accepts this run; None for the standard export
    (a multi-task run's: one ``logits_NAME`` output per task, its variants gated on the first
    task's dev set, without ``--with-tokenizer``'s single-file variants: ExportError).
    """
    tasks = RunDir(run_dir).manifest().get("tasks")
    if tasks and options["with_tokenizer"]:
        raise ExportError(f"--with-tokenizer: {run_dir} is a multi-task run ({len(tasks)} outputs); it has no single-file variants, drop the flag")
    if isinstance(family, ClassifiesRows):
        check_row_options(run_dir, family.name, int8=options["int8"], optimize=options["optimize"], fp16=options["fp16"],
                          with_tokenizer=options["with_tokenizer"], int4=options["int4"])
        return export_row_classifier(family.load_row_classifier(run_dir), run_dir, family.name, out, options["dev"], console)
    if isinstance(family, WritesOwnExport):
        return family.export_own(run_dir, Path(out) if out is not None else run_dir / "export", options, console)
    return None


def _built_and_gated(
    gate: Gate, source: ExportSource, tmp: Path, optimize: int, int8: Int8Options | None, fp16: bool, console: Console,
    int4: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """Build the variants asked for in ``tmp``, each gated against fp32 as soon as it is built:
    ``optimized`` from fp32 (``optimize`` > 0), then ``int8`` (with ``int8``'s options), ``int4``
    (unless ``int4`` is None; it holds the node names kept float) and ``fp16`` from the optimised
    graph when there is one, else from fp32.

    Returns:
        ``{variant: manifest entry}`` in that order.
    """
    variants: dict[str, Any] = {}
    fp32 = base = tmp / VARIANT_FILES["fp32"]
    base_name = "fp32"
    if optimize > 0:
        path = tmp / VARIANT_FILES["optimized"]
        with gate.set_aside(fp32):
            built = optimized_variant(source, base, path, optimize, console)
        variants["optimized"] = gate.check("optimized", path, built)
        base, base_name = path, "optimized"
    if int8 is not None:
        path = tmp / VARIANT_FILES["int8"]
        with gate.set_aside(fp32):
            built = int8_variant(source, base, path, base_name, int8, console)
        variants["int8"] = gate.check("int8", path, built)
    if int4 is not None:
        path = tmp / VARIANT_FILES["int4"]
        with gate.set_aside(fp32):
            built = int4_variant(base, path, base_name, int4, console)
        variants["int4"] = gate.check("int4", path, built)
    if fp16:
        path = tmp / VARIANT_FILES["fp16"]
        with gate.set_aside(fp32):
            built = fp16_variant(base, path, base_name, console)
        variants["fp16"] = gate.check("fp16", path, built)
    return variants
