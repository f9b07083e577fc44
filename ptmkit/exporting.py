"""``ptmkit export RUN_DIR --onnx --int8``: Keras -> ONNX (tf2onnx), checked, then int8.

1. Convert with Keras' own ``model.export(format="onnx")`` (which drives tf2onnx), inputs
   ``token_ids``, ``segment_ids``, ``padding_mask`` with symbolic ``batch`` and ``sequence`` axes,
   output renamed ``logits``.
2. Check: ``onnx.checker``, an ONNX Runtime session, and outputs against Keras at shapes other
   than the trace shapes (batch 1 x 17; batch 3 x the fine-tuning length; batch 8 x 1, each with
   random padding); the max abs difference must be <= 1e-4 (:data:`PARITY_TOLERANCE`).
3. ``--int8``: dynamic int8, per-channel (:func:`ptmkit_export.quantize.quantize_int8`); top-1
   agreement with fp32 on the dev set and the median latency of both at batch 1 x 128 are printed
   and stored; int8 slower than fp32, or agreeing on fewer than 97% of dev examples, is reported
   loudly and marked ``ok: false`` so that the runtime does not pick it by default.

Everything is built in a temporary directory beside the target and moved in only when every
check passed: a failed export leaves no model file behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from ptmkit.console import default_console
from ptmkit.errors import PtmkitError
from ptmkit.rundir import RunDir

PARITY_TOLERANCE = 1e-4
AGREEMENT_THRESHOLD = 0.97
LATENCY_SHAPE = (1, 128)
LATENCY_THREADS = 1  # timings on a shared 2-core machine swing 3x with 2 threads; 1 is repeatable
LATENCY_REPEATS = 50


class ExportError(PtmkitError):
    """The exported graph failed a check; nothing was written."""


def convert_to_onnx(model: Any, path: Path, input_names: tuple[str, ...]) -> None:
    """Export ``model`` to ONNX at ``path`` with ``batch``/``sequence`` axes and a ``logits`` output."""
    import warnings

    import onnx
    import tensorflow as tf

    signature = [{name: tf.TensorSpec((None, None), tf.int32, name=name) for name in input_names}]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # tf2onnx probes np.object
        model.export(str(path), format="onnx", input_signature=signature, verbose=False)
    graph_model = onnx.load(str(path))
    graph = graph_model.graph
    for value in graph.input:
        dims = value.type.tensor_type.shape.dim
        dims[0].dim_param, dims[1].dim_param = "batch", "sequence"
    (output,) = graph.output
    old = output.name
    for node in graph.node:
        node.output[:] = ["logits" if name == old else name for name in node.output]
    output.name = "logits"
    output.type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.checker.check_model(graph_model)
    onnx.save(graph_model, str(path))


def random_inputs(rng: np.random.Generator, batch: int, length: int, vocabulary_size: int, pad_id: int) -> dict[str, np.ndarray]:
    """BERT-style inputs with random lengths (at least 1) and the rest padded."""
    lengths = rng.integers(1, length + 1, size=batch)
    lengths[0] = length  # one full row, so the longest shape is exercised
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int32)
    token_ids = np.where(mask == 1, rng.integers(0, vocabulary_size, size=(batch, length)), pad_id).astype(np.int32)
    segment_ids = np.zeros((batch, length), np.int32)
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": mask}


def check_parity(model: Any, session: Any, shapes: list[tuple[int, int]], vocabulary_size: int, pad_id: int) -> dict[str, float]:
    """Max abs difference of ONNX Runtime vs Keras logits at each ``(batch, length)`` shape."""
    rng = np.random.default_rng(0)
    diffs = {}
    for batch, length in shapes:
        feeds = random_inputs(rng, batch, length, vocabulary_size, pad_id)
        with warnings.catch_warnings():
            # Keras warns that attention's softmax over a length-1 axis is constant: true, and meant.
            warnings.filterwarnings("ignore", message="You are using a softmax over axis")
            expected = np.asarray(model(feeds, training=False))  # eager: predict() would retrace per shape
        actual = session.run(["logits"], feeds)[0]
        diffs[f"{batch}x{length}"] = float(np.max(np.abs(expected - actual)))
    return diffs


def export_run(run_dir: str | Path, out: str | Path | None = None, int8: bool = False, dev: str | Path | None = None, console: Console | None = None) -> dict[str, Any]:
    """Export a fine-tuned run to ONNX (and int8); see the module docstring.

    Args:
        run_dir: a fine-tuned run directory.
        out: the export directory (default ``RUN_DIR/export``).
        int8: also write ``model.int8.onnx``.
        dev: labelled file for fp32-vs-int8 agreement (default: the run's dev file).

    Returns:
        the export manifest, with ``directory`` and a ``summary`` of the measured numbers.

    Raises:
        RunDirError: the run has no head, or missing/corrupted files.
        ExportError: the ONNX graph failed a check (nothing is written).
    """
    import onnxruntime as ort

    from ptmkit.data.tokenization import ENCODING_FIELDS, encode_texts
    from ptmkit.plugins import get_registry
    from ptmkit.training.finetune import load_classifier, load_labelled
    from ptmkit_export.benchmark import median_latency_ms
    from ptmkit_export.quantize import quantize_int8

    console = console or default_console()
    registry = get_registry()
    run = RunDir(run_dir)
    model, config, tokenizer, run_manifest = load_classifier(run_dir, registry)
    family = registry.family(run_manifest["family"])
    specials = family.special_tokens(tokenizer)
    labels = run_manifest["labels"]
    sequence_length = int(run_manifest["sequence_length"])
    vocabulary_size = int(config.model.vocabulary_size)
    target = Path(out) if out is not None else run.path / "export"
    target.parent.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory(prefix=".export-", dir=target.parent) as tmp_name:
        tmp = Path(tmp_name)
        fp32_path = tmp / "model.onnx"
        with console.status("converting to ONNX (tf2onnx)"):
            try:
                convert_to_onnx(model, fp32_path, family.input_names)
            except Exception as exc:
                raise ExportError(f"ONNX conversion of {run.path} failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
        options = ort.SessionOptions()
        options.intra_op_num_threads = LATENCY_THREADS
        session = ort.InferenceSession(str(fp32_path), options, providers=["CPUExecutionProvider"])
        shapes = [(1, 17), (3, sequence_length), (8, 1)]
        parity = check_parity(model, session, shapes, vocabulary_size, specials.pad)
        worst = max(parity.values())
        console.print(f"ONNX vs Keras max abs difference: {worst:.2e} " + ", ".join(f"{k}: {v:.1e}" for k, v in parity.items()))
        if worst > PARITY_TOLERANCE:
            raise ExportError(f"ONNX output differs from Keras by {worst:.2e} > {PARITY_TOLERANCE:g} ({parity}); nothing written")
        latency_feeds = random_inputs(np.random.default_rng(1), LATENCY_SHAPE[0], min(LATENCY_SHAPE[1], config.model.max_sequence_length), vocabulary_size, specials.pad)
        latency_feeds["padding_mask"][:] = 1
        variants: dict[str, Any] = {
            "fp32": {
                "file": "model.onnx",
                "ok": True,
                "parity_max_abs_diff": parity,
                "latency_threads": LATENCY_THREADS,
                "latency_ms_b1x128": round(median_latency_ms(session, latency_feeds, repeats=LATENCY_REPEATS), 3),
                "bytes": fp32_path.stat().st_size,
            }
        }
        if int8:
            int8_path = tmp / "model.int8.onnx"
            with console.status("quantizing to int8 (dynamic, per-channel)"):
                quantization = quantize_int8(fp32_path, int8_path, per_channel=True)
            int8_session = ort.InferenceSession(str(int8_path), options, providers=["CPUExecutionProvider"])
            dev_file = dev or run_manifest.get("dev")
            if not dev_file:
                raise ExportError(f"{run.path}: no dev file recorded in the run; pass --dev FILE for the int8 agreement check")
            texts, _, y_dev = load_labelled(dev_file, labels)
            feeds = encode_texts(tokenizer, texts, sequence_length, family.input_names, specials.pad)
            fp32_top = _top1(session, feeds)
            int8_top = _top1(int8_session, feeds)
            agreement = float(np.mean(fp32_top == int8_top))
            int8_latency = median_latency_ms(int8_session, latency_feeds, repeats=LATENCY_REPEATS)
            ok = agreement >= AGREEMENT_THRESHOLD and int8_latency <= variants["fp32"]["latency_ms_b1x128"]
            variants["int8"] = {
                "file": "model.int8.onnx",
                "ok": ok,
                "quantization": quantization,
                "dev_file": str(dev_file),
                "dev_agreement_with_fp32": round(agreement, 4),
                "dev_accuracy": round(float(np.mean(int8_top == y_dev)), 4),
                "latency_ms_b1x128": round(int8_latency, 3),
                "bytes": int8_path.stat().st_size,
            }
            variants["fp32"]["dev_accuracy"] = round(float(np.mean(fp32_top == y_dev)), 4)
            if not ok:
                problems = []
                if agreement < AGREEMENT_THRESHOLD:
                    problems.append(f"agrees with fp32 on only {agreement:.1%} of {dev_file} (< {AGREEMENT_THRESHOLD:.0%})")
                if int8_latency > variants["fp32"]["latency_ms_b1x128"]:
                    problems.append(f"is slower than fp32 ({int8_latency:.2f} ms vs {variants['fp32']['latency_ms_b1x128']:.2f} ms at batch 1 x 128)")
                console.print(f"[bold red]WARNING: int8 {' and '.join(problems)}; it is marked not ok and the runtime uses fp32 by default[/bold red]")
        shutil.copyfile(run.require("tokenizer.json"), tmp / "tokenizer.json")
        manifest = {
            "format": "ptmkit-export/1",
            "family": run_manifest["family"],
            "task": run_manifest["head"],
            "run": str(run.path.resolve()),
            "inputs": [{"name": name, "dtype": "int32", "encoding": ENCODING_FIELDS[name], "shape": ["batch", "sequence"]} for name in family.input_names],
            "outputs": [{"name": "logits", "dtype": "float32", "shape": ["batch", len(labels)]}],
            "labels": labels,
            "max_sequence_length": sequence_length,
            "pad_token_id": specials.pad,
            "tokenizer": "tokenizer.json",
            "variants": variants,
        }
        from ptmkit.io import atomic_write_json

        atomic_write_json(tmp / "manifest.json", manifest)
        target.mkdir(parents=True, exist_ok=True)
        stale = target / "manifest.json"
        if stale.exists():
            stale.unlink()  # the directory is not a valid export while files are swapped
        for name in [v["file"] for v in variants.values()] + ["tokenizer.json", "manifest.json"]:
            os.replace(tmp / name, target / name)
    summary = {"onnx_parity_max_abs_diff": f"{worst:.2e}"}
    for name, variant in variants.items():
        summary[f"{name}_latency_ms_b1x128"] = variant["latency_ms_b1x128"]
        if "dev_accuracy" in variant:
            summary[f"{name}_dev_accuracy"] = variant["dev_accuracy"]
    if "int8" in variants:
        summary["int8_dev_agreement_with_fp32"] = variants["int8"]["dev_agreement_with_fp32"]
        summary["int8_ok"] = variants["int8"]["ok"]
    return {**manifest, "directory": str(target), "summary": summary}


def _top1(session: Any, feeds: dict[str, np.ndarray], batch_size: int = 64) -> np.ndarray:
    count = len(next(iter(feeds.values())))
    out = [
        np.argmax(session.run(["logits"], {k: v[i : i + batch_size] for k, v in feeds.items()})[0], axis=-1)
        for i in range(0, count, batch_size)
    ]
    return np.concatenate(out)
