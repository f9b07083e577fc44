"""Stage 5 of ``ptmkit export``, write: the manifest, and the staged files moved into the export
directory.

Every export is built in a temporary directory beside the target
(:func:`ptmkit.io.staging_directory`) and moved in only when every check passed: a failed export
leaves no model file behind. While the files are swapped the target has no ``manifest.json``, so
it never looks like a valid export holding another export's files (:func:`install`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ptmkit.errors import ExportError
from ptmkit.exporting.source import ExportSource
from ptmkit.exporting.variants import TOKENIZER_VARIANT_FILES, VARIANT_FILES

#: The export manifest's format.
FORMAT = "ptmkit-export/1"


def check_destination(run_dir: str | Path, out: str | Path | None) -> None:
    """Refuse an export directory that would overwrite a run: ``run_dir`` itself, a directory
    holding it, or another run directory (an export's ``manifest.json`` and ``tokenizer.json``
    would replace the run's); refuse an existing file. ``None`` (the default ``RUN_DIR/export``) passes.

    Raises:
        ExportError: naming ``out`` and what it would overwrite.
    """
    if out is None:
        return
    target, run = Path(out).resolve(), Path(run_dir).resolve()
    if target == run or target in run.parents:
        raise ExportError(f"--out {out}: {'is' if target == run else 'holds'} the run directory {run_dir}; the export would overwrite it "
                          f"(give a new directory, e.g. {Path(run_dir) / 'export'})")
    if target.exists() and not target.is_dir():
        raise ExportError(f"--out {out}: is a file, not a directory; give a directory for the export (e.g. {Path(run_dir) / 'export'})")
    if (target / "config.toml").is_file() and (target / "manifest.json").is_file():
        raise ExportError(f"--out {out}: is a run directory (it has config.toml); the export would overwrite its manifest (give a new directory)")


def install(tmp: Path, target: Path, files: Iterable[str], stale: Iterable[str] = ()) -> None:
    """Move ``files`` and then ``manifest.json`` from ``tmp`` into ``target`` (each an atomic
    ``os.replace`` on the same file system), after removing ``target``'s old manifest and the
    ``stale`` files a former export left there (missing ones are skipped)."""
    target.mkdir(parents=True, exist_ok=True)
    old_manifest = target / "manifest.json"
    if old_manifest.exists():
        old_manifest.unlink()  # the directory is not a valid export while files are swapped
    for name in stale:
        (target / name).unlink(missing_ok=True)
    for name in [*files, "manifest.json"]:
        os.replace(tmp / name, target / name)


def export_manifest(source: ExportSource, variants: dict[str, Any], gate_table: dict[str, Any], recurrence: dict[str, Any] | None = None) -> dict[str, Any]:
    """The manifest of a transformer export (read by :class:`ptmkit_export.Predictor`): the family,
    the task and its outputs, the inputs, the tokenizer, the variants and the gate; ``recurrence``:
    what carries the fp32 graph's recurrence, fused ``LSTM`` nodes or ``Loop`` nodes
    (:func:`ptmkit.exporting.recurrent.recurrence`: ``{"kind": "fused" | "loop" | "mixed" | "none", "LSTM": n, "Loop": m}``)."""
    from ptmkit.data.tokenization import manifest_inputs

    return {
        "format": FORMAT,
        "family": source.run_manifest["family"],
        "task": source.task,
        "run": str(source.run.path.resolve()),
        "inputs": manifest_inputs(source.family.inputs),
        **source.task_manifest,
        "max_sequence_length": source.sequence_length,
        "pad_token_id": source.padding_id,
        "tokenizer": "tokenizer.json",
        "variants": variants,
        "gate": gate_table,
        **({"recurrence": recurrence} if recurrence is not None else {}),
    }


def write_export(tmp: Path, target: Path, manifest: dict[str, Any]) -> None:
    """Write ``manifest`` to ``tmp`` and move its variants' files, ``tokenizer.json`` and the
    manifest into ``target``; variant files of an earlier export not built this time are removed."""
    from ptmkit.io import atomic_write_json

    atomic_write_json(tmp / "manifest.json", manifest)
    built = [variant["file"] for variant in manifest["variants"].values()]
    stale = [name for name in [*VARIANT_FILES.values(), *TOKENIZER_VARIANT_FILES] if name not in built]
    install(tmp, target, [*built, "tokenizer.json"], stale)


def summarize(worst: float, variants: dict[str, Any]) -> dict[str, Any]:
    """The numbers ``ptmkit export`` prints: the parity difference (``worst``) and, per variant,
    its latency, throughput, dev accuracy, agreement with fp32 and ``ok``; the optimizer's fusions."""
    summary: dict[str, Any] = {"onnx_parity_max_abs_diff": f"{worst:.2e}"}
    for name, variant in variants.items():
        summary[f"{name}_latency_ms_b1x128"] = variant["latency_ms_b1x128"]
        if "throughput_seq_per_s_b32x128" in variant:  # the single-file (+tokenizer) variants time batch 1 only
            summary[f"{name}_throughput_seq_per_s_b32x128"] = variant["throughput_seq_per_s_b32x128"]
        if "dev_accuracy" in variant:
            summary[f"{name}_dev_accuracy"] = variant["dev_accuracy"]
        for key in ("dev_agreement_with_fp32", "dev_mean_cosine_to_fp32"):
            if key in variant:
                summary[f"{name}_{key}"] = variant[key]
        if name != "fp32":
            summary[f"{name}_ok"] = variant["ok"]
    if "optimized" in variants:
        summary["optimized_fused"] = {op: n for op, n in variants["optimized"]["optimization"]["fused"].items() if n}
    return summary
