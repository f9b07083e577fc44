"""``ptmkit export RUN_DIR --onnx --int8``: Keras -> ONNX (tf2onnx), checked, then int8.

1. Convert with Keras' own ``model.export(format="onnx")`` (which drives tf2onnx), inputs
   ``token_ids``, ``segment_ids``, ``padding_mask`` with symbolic ``batch`` and ``sequence`` axes,
   output renamed ``logits`` (a fine-tuned head) or ``embeddings`` (a run without a head: the
   backbone with its sentence pooling, :mod:`ptmkit.embedding`).
2. Check: ``onnx.checker``, an ONNX Runtime session, and outputs against Keras at shapes other
   than the trace shapes (batch 1 x 17; batch 3 x the fine-tuning length; batch 8 x 1, each with
   random padding); the max abs difference must be <= 1e-4 (:data:`PARITY_TOLERANCE`).
3. ``--int8``: dynamic int8, per-channel (:func:`ptmkit_export.quantize.quantize_int8`); top-1
   agreement with fp32 on the dev set (heads) or mean cosine to fp32 on the dev texts
   (embeddings) and the median latency of both at batch 1 x 128 are printed and stored; int8
   slower than fp32, agreeing on fewer than 97% of dev examples or with a mean cosine below 0.99,
   is reported loudly and marked ``ok: false`` so that the runtime does not pick it by default.

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
AGREEMENT_THRESHOLD = 0.97  # top-1, heads
COSINE_THRESHOLD = 0.99  # mean cosine to fp32, embeddings
DEV_EMBEDDING_TEXTS = 1000  # texts of --dev used for the embedding check
LATENCY_SHAPE = (1, 128)
LATENCY_THREADS = 1  # timings on a shared 2-core machine swing 3x with 2 threads; 1 is repeatable
LATENCY_REPEATS = 50


class ExportError(PtmkitError):
    """The exported graph failed a check; nothing was written."""


def convert_to_onnx(model: Any, path: Path, input_names: tuple[str, ...], output_name: str = "logits") -> None:
    """Export ``model`` to ONNX at ``path`` with ``batch``/``sequence`` axes and one output named ``output_name``."""
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
        node.output[:] = [output_name if name == old else name for name in node.output]
    output.name = output_name
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


def check_parity(
    model: Any, session: Any, shapes: list[tuple[int, int]], vocabulary_size: int, pad_id: int, output_name: str = "logits"
) -> dict[str, float]:
    """Max abs difference of ONNX Runtime vs Keras outputs at each ``(batch, length)`` shape."""
    rng = np.random.default_rng(0)
    diffs = {}
    for batch, length in shapes:
        feeds = random_inputs(rng, batch, length, vocabulary_size, pad_id)
        with warnings.catch_warnings():
            # Keras warns that attention's softmax over a length-1 axis is constant: true, and meant.
            warnings.filterwarnings("ignore", message="You are using a softmax over axis")
            expected = np.asarray(model(feeds, training=False))  # eager: predict() would retrace per shape
        actual = session.run([output_name], feeds)[0]
        diffs[f"{batch}x{length}"] = float(np.max(np.abs(expected - actual)))
    return diffs


def export_run(run_dir: str | Path, out: str | Path | None = None, int8: bool = False, dev: str | Path | None = None, console: Console | None = None, with_tokenizer: bool = False) -> dict[str, Any]:
    """Export a run to ONNX (and int8); see the module docstring.

    A fine-tuned run exports its head's ``logits``; a run without a head (pre-trained or imported
    with ``ptmkit import-hf``) exports sentence ``embeddings`` with the run's pooling
    (:mod:`ptmkit.embedding`).

    Args:
        run_dir: a run directory.
        out: the export directory (default ``RUN_DIR/export``).
        int8: also write ``model.int8.onnx``.
        dev: file for the fp32-vs-int8 check: labelled for a head (default: the run's dev file),
            any text file for embeddings (required then).
        with_tokenizer: also write single-file models that tokenize inside the graph
            (``model.with_tokenizer.onnx``, variant ``fp32+tokenizer``, and ``int8+tokenizer``
            with ``int8``; :mod:`ptmkit.tokenizer_export`).

    Returns:
        the export manifest, with ``directory`` and a ``summary`` of the measured numbers.

    Raises:
        RunDirError: missing or corrupted files.
        ExportError: the ONNX graph failed a check (nothing is written); no dev texts for int8.
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
    task_manifest: dict[str, Any]
    if run.manifest().get("head"):
        model, config, tokenizer, run_manifest = load_classifier(run_dir, registry)
        output, task, labels = "logits", run_manifest["head"], run_manifest["labels"]
        sequence_length = int(run_manifest["sequence_length"])
        task_manifest = {"labels": labels, "outputs": [{"name": output, "dtype": "float32", "shape": ["batch", len(labels)]}]}
    else:
        from ptmkit.embedding import load_embedder

        model, tokenizer, pooling, run_manifest = load_embedder(run_dir)
        config = None
        output, task, labels = "embeddings", "embedding", []
        sequence_length = int(pooling["max_sequence_length"])
        width = int(model.output.shape[-1])
        task_manifest = {"labels": [], "pooling": pooling, "outputs": [{"name": output, "dtype": "float32", "shape": ["batch", width]}]}
    family = registry.family(run_manifest["family"])
    if config is None:
        from ptmkit.config import read_toml
        from ptmkit.training.pretrain import resolve_config

        config = resolve_config(registry, run_manifest["family"], base=read_toml(run.require("config.toml")))
    specials = family.special_tokens(tokenizer)
    vocabulary_size = int(config.model.vocabulary_size)
    target = Path(out) if out is not None else run.path / "export"
    target.parent.mkdir(parents=True, exist_ok=True)
    dev_file = dev or run_manifest.get("dev")
    if int8 and not dev_file:
        raise ExportError(f"{run.path}: no dev file recorded in the run; pass --dev FILE (texts, one per line) for the fp32-vs-int8 check")

    with tempfile.TemporaryDirectory(prefix=".export-", dir=target.parent) as tmp_name:
        tmp = Path(tmp_name)
        fp32_path = tmp / "model.onnx"
        with console.status("converting to ONNX (tf2onnx)"):
            try:
                convert_to_onnx(model, fp32_path, family.input_names, output)
            except Exception as exc:
                raise ExportError(f"ONNX conversion of {run.path} failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
        options = ort.SessionOptions()
        options.intra_op_num_threads = LATENCY_THREADS
        session = ort.InferenceSession(str(fp32_path), options, providers=["CPUExecutionProvider"])
        shapes = [(1, 17), (3, sequence_length), (8, 1)]
        parity = check_parity(model, session, shapes, vocabulary_size, specials.pad, output)
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
            assert dev_file is not None
            int8_path = tmp / "model.int8.onnx"
            with console.status("quantizing to int8 (dynamic, per-channel)"):
                quantization = quantize_int8(fp32_path, int8_path, per_channel=True)
            int8_session = ort.InferenceSession(str(int8_path), options, providers=["CPUExecutionProvider"])
            if labels:
                texts, _, y_dev = load_labelled(dev_file, labels)
            else:
                from ptmkit.data.readers import read_records

                texts = [record.text for record in read_records(dev_file, labelled=False)][:DEV_EMBEDDING_TEXTS]
            feeds = encode_texts(tokenizer, texts, sequence_length, family.input_names, specials.pad)
            fp32_out, int8_out = _run(session, feeds, output), _run(int8_session, feeds, output)
            int8_latency = median_latency_ms(int8_session, latency_feeds, repeats=LATENCY_REPEATS)
            int8_variant: dict[str, Any] = {"file": "model.int8.onnx", "quantization": quantization, "dev_file": str(dev_file)}
            if labels:
                fp32_top, int8_top = np.argmax(fp32_out, -1), np.argmax(int8_out, -1)
                agreement, threshold, measure = float(np.mean(fp32_top == int8_top)), AGREEMENT_THRESHOLD, "top-1 agreement"
                int8_variant["dev_agreement_with_fp32"] = round(agreement, 4)
                int8_variant["dev_accuracy"] = round(float(np.mean(int8_top == y_dev)), 4)
                variants["fp32"]["dev_accuracy"] = round(float(np.mean(fp32_top == y_dev)), 4)
            else:
                cosines = cosine(fp32_out, int8_out)
                agreement, threshold, measure = float(np.mean(cosines)), COSINE_THRESHOLD, "mean cosine"
                int8_variant["dev_mean_cosine_to_fp32"] = round(agreement, 5)
                int8_variant["dev_min_cosine_to_fp32"] = round(float(np.min(cosines)), 5)
                int8_variant["dev_texts"] = len(texts)
            ok = agreement >= threshold and int8_latency <= variants["fp32"]["latency_ms_b1x128"]
            variants["int8"] = int8_variant | {"ok": ok, "latency_ms_b1x128": round(int8_latency, 3), "bytes": int8_path.stat().st_size}
            if not ok:
                problems = []
                if agreement < threshold:
                    problems.append(f"{measure} with fp32 is only {agreement:.4f} on {dev_file} (< {threshold})")
                if int8_latency > variants["fp32"]["latency_ms_b1x128"]:
                    problems.append(f"is slower than fp32 ({int8_latency:.2f} ms vs {variants['fp32']['latency_ms_b1x128']:.2f} ms at batch 1 x 128)")
                console.print(f"[bold red]WARNING: int8 {' and '.join(problems)}; it is marked not ok and the runtime uses fp32 by default[/bold red]")
        shutil.copyfile(run.require("tokenizer.json"), tmp / "tokenizer.json")
        if with_tokenizer:
            from ptmkit.tokenizer_export import dev_texts, tokenizer_variants

            variants.update(tokenizer_variants(
                tmp, variants, tmp / "tokenizer.json", family.input_names, output, sequence_length, specials.pad,
                dev_texts(dev_file, labels), LATENCY_THREADS, LATENCY_REPEATS, console,
            ))
        manifest = {
            "format": "ptmkit-export/1",
            "family": run_manifest["family"],
            "task": task,
            "run": str(run.path.resolve()),
            "inputs": [{"name": name, "dtype": "int32", "encoding": ENCODING_FIELDS[name], "shape": ["batch", "sequence"]} for name in family.input_names],
            **task_manifest,
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
    summary: dict[str, Any] = {"onnx_parity_max_abs_diff": f"{worst:.2e}"}
    for name, variant in variants.items():
        summary[f"{name}_latency_ms_b1x128"] = variant["latency_ms_b1x128"]
        if "dev_accuracy" in variant:
            summary[f"{name}_dev_accuracy"] = variant["dev_accuracy"]
    if "int8" in variants:
        for key in ("dev_agreement_with_fp32", "dev_mean_cosine_to_fp32"):
            if key in variants["int8"]:
                summary[f"int8_{key}"] = variants["int8"][key]
        summary["int8_ok"] = variants["int8"]["ok"]
    return {**manifest, "directory": str(target), "summary": summary}


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two ``(n, d)`` arrays; ``(n,)`` float64."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.sum(a * b, -1) / np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1), 1e-12)


def _run(session: Any, feeds: dict[str, np.ndarray], output: str, batch_size: int = 64) -> np.ndarray:
    count = len(next(iter(feeds.values())))
    return np.concatenate([session.run([output], {k: v[i : i + batch_size] for k, v in feeds.items()})[0] for i in range(0, count, batch_size)])
