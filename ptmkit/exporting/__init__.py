"""``ptmkit export RUN_DIR --onnx [--optimize N] [--int8 [--static ...]] [--fp16]``: Keras -> ONNX, checked, optimised, quantised, gated.

1. Convert with tf2onnx as Keras' ``model.export(format="onnx")`` drives it, in less memory
   (:func:`convert_to_onnx`: 2.2 GB peak for all-MiniLM-L6-v2 where ``model.export`` took 5.9 GB), inputs
   as the family declares them (:class:`ptmkit.contract.InputSpec`) with their named axes symbolic,
   output renamed ``logits`` (a fine-tuned head) or ``embeddings`` (a run without a head: the
   backbone with its sentence pooling, :mod:`ptmkit.embedding`).
2. Check: ``onnx.checker``, an ONNX Runtime session, and outputs against Keras at shapes other
   than the trace shapes (batch 1 x 17; batch 3 x the fine-tuning length; batch 8 x 1, each with
   random padding, each length within the model's declared ``max_sequence_length``); the max abs
   difference must be <= 1e-4 (:data:`PARITY_TOLERANCE`).
3. ``--optimize N`` (1-3): ptmkit's graph passes and, at 2-3, ONNX Runtime's transformer
   optimizer (:mod:`ptmkit_export.optimize`; model type, head count and hidden size from the
   family's :meth:`~ptmkit.contract.ModelFamily.graph_optimizer`) write ``model.opt.onnx``
   (variant ``optimized``); the fused op counts are
   printed and stored. Quantization then starts from the optimised graph.
4. ``--int8``: dynamic int8 (:func:`ptmkit_export.quantize.quantize_int8`; per-channel unless
   ``per_channel=False``; ``reduce_range`` chosen from the CPU unless given; ``exclude_nodes``
   kept float), or with ``static=True`` QDQ static int8 calibrated on texts of ``calibration``
   (:func:`ptmkit_export.quantize.quantize_int8_static`). ``--fp16``: ``model.fp16.onnx``.
5. Gate, every variant against fp32: top-1 agreement on the dev set (heads) or mean cosine on the
   dev texts (embeddings), median latency at batch 1 x 128 and throughput at batch 32 x 128 (one
   ONNX Runtime thread: the numbers are comparable between variants, not the machine's best).
   A variant that agrees on fewer than 97% of dev examples (mean cosine below 0.99), or is more
   than 5% slower than fp32 at batch 1 x 128 (the two timed alternately), is printed in red and
   stored with ``ok: false`` and its ``problems``; :class:`ptmkit_export.Predictor` never picks it by default and warns when asked
   for it. The table is printed and stored in the manifest (``gate``).

Everything is built in a temporary directory beside the target and moved in only when every
check passed: a failed export leaves no model file behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import shutil
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from ptmkit.console import default_console
from ptmkit.contract import ClassifiesRows, InputSpec
from ptmkit.errors import ExportError
from ptmkit.io import staging_directory
from ptmkit.rundir import RunDir

PARITY_TOLERANCE = 1e-4
AGREEMENT_THRESHOLD = 0.97  # top-1, heads
COSINE_THRESHOLD = 0.99  # mean cosine to fp32, embeddings
DEV_EMBEDDING_TEXTS = 1000  # texts of --dev used for the embedding check
LATENCY_SHAPE = (1, 128)
LATENCY_THREADS = 1  # timings on a shared 2-core machine swing 3x with 2 threads; 1 is repeatable
LATENCY_REPEATS = 50


def convert_to_onnx(model: Any, path: Path, inputs: Sequence[InputSpec], output_name: str = "logits") -> None:
    """Export ``model`` to ONNX at ``path``: one graph input per declared input (its dtype, its
    named axes as symbolic dimensions, fixed sizes kept) and one output named ``output_name``
    with a symbolic ``batch`` axis.

    tf2onnx (``from_function``, as Keras' ``model.export(format="onnx")`` calls it) in its
    ``large_model`` mode: the weights are frozen straight into NumPy values, not run through a
    TensorFlow graph and grappler (for all-MiniLM-L6-v2 that step alone took 1.8 GB), then put
    back into one self-contained file. tf2onnx's graph optimizers run as in its default mode (each
    on a copy of the graph; one that fails is skipped), with the garbage of each collected before
    the next (:func:`_collecting_tf2onnx_optimizers`): left to Python's collector, those copies
    held 3.7 GB. Peak memory for all-MiniLM-L6-v2 (22M parameters): 5.9 GB before, about 2.2 GB
    now, of which 1.05 GB is TensorFlow and the loaded model, and about 0.6 GB one optimizer pass
    (the graph, its copy and tf2onnx's shape inference) (benchmarks/export_memory.py).
    """
    import onnx
    import tensorflow as tf
    import tf2onnx

    signature = [{s.name: tf.TensorSpec((None, *s.shape), tf.as_dtype(s.dtype), name=s.name) for s in inputs}]
    function = tf.function(lambda inputs: model(inputs, training=False), input_signature=signature)
    with warnings.catch_warnings(), _collecting_tf2onnx_optimizers():
        warnings.simplefilter("ignore", FutureWarning)  # tf2onnx probes np.object
        try:
            from keras.src.export.tf2onnx_lib import patch_tf2onnx

            patch_tf2onnx()  # what model.export does: tf2onnx 1.17 on NumPy 2
        except ImportError:  # a Keras that no longer needs it
            pass
        graph_model, storage = tf2onnx.convert.from_function(function, signature, large_model=True)
    del function
    _inline_external_tensors(graph_model, storage.name_to_tensor_data)
    del storage
    graph = graph_model.graph
    axes = {s.name: s.axes for s in inputs}
    for value in graph.input:
        for dim, axis in zip(value.type.tensor_type.shape.dim, axes[value.name], strict=True):
            if not dim.HasField("dim_value"):
                dim.dim_param = axis
    (output,) = graph.output
    old = output.name
    for node in graph.node:
        node.output[:] = [output_name if name == old else name for name in node.output]
    output.name = output_name
    output.type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.checker.check_model(graph_model)
    onnx.save(graph_model, str(path))
    del graph_model
    release_memory()


def _inline_external_tensors(graph_model: Any, data: dict[str, bytes]) -> None:
    """Move tf2onnx's ``large_model`` tensors (``data``: location -> raw bytes) into the graph, so
    the model is one file (all-MiniLM-L6-v2: 101 MB, far below protobuf's 2 GB)."""
    from onnx import TensorProto, external_data_helper

    for tensor in external_data_helper._get_all_tensors(graph_model):
        if tensor.data_location == TensorProto.EXTERNAL:
            location = next(entry.value for entry in tensor.external_data if entry.key == "location")
            tensor.raw_data = data.pop(location)
            del tensor.external_data[:]
            tensor.data_location = TensorProto.DEFAULT


@contextlib.contextmanager
def _collecting_tf2onnx_optimizers() -> Iterator[None]:
    """Within the block, tf2onnx's ONNX optimizers run each on a copy of the graph (its default
    mode, which ``large_model`` turns off: optimising in place kept 3 GB alive) and the garbage of
    each pass (reference cycles holding NumPy copies of the weights) is collected before the next."""
    import tf2onnx.optimizer as optimizer

    original = optimizer.optimize_graph
    passes = getattr(optimizer, "_optimizers", None)
    if passes is None:  # another tf2onnx layout: convert as it is
        yield
        return

    def collected(factory: Any) -> Any:
        def make() -> Any:
            gc.collect()
            return factory()

        return make

    def optimize_graph(graph: Any, catch_errors: bool = True, optimizers: Any = None) -> Any:
        wrapped = {name: collected(factory) for name, factory in (optimizers or passes).items()}
        return original(graph, True, optimizers=wrapped)

    optimizer.optimize_graph = optimize_graph
    try:
        yield
    finally:
        optimizer.optimize_graph = original
        gc.collect()


def release_memory() -> None:
    """Collect Python's garbage and hand freed heap memory back to the OS (glibc's
    ``malloc_trim``; elsewhere only the collection): after a stage that freed gigabytes, the next
    one then starts from what is really in use, not from the stage's peak."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _release_keras() -> None:
    """Drop Keras' global state (layer name counters, cached graphs) once no model is needed."""
    import keras

    keras.backend.clear_session()
    release_memory()


def random_inputs(
    rng: np.random.Generator, inputs: Sequence[InputSpec], batch: int, length: int, vocabulary_size: int, pad_id: int,
    characters: np.ndarray | None = None, full: bool = False,
) -> dict[str, np.ndarray]:
    """The declared ``inputs`` for random token ids with random lengths (at least 1; the first
    row full; every row with ``full``) and the rest padded with ``pad_id``: one segment, the
    padding mask, ``char_ids`` from the ``characters`` table
    (:func:`ptmkit.data.tokenization.derive_inputs`)."""
    from ptmkit.data.tokenization import derive_inputs

    lengths = rng.integers(1, length + 1, size=batch)
    lengths[0] = length  # one full row, so the longest shape is exercised
    if full:
        lengths[:] = length
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int32)
    token_ids = np.where(mask == 1, rng.integers(0, vocabulary_size, size=(batch, length)), pad_id).astype(np.int32)
    return derive_inputs(inputs, token_ids, None, mask, characters)


def parity_shapes(sequence_length: int, max_sequence_length: int | None) -> list[tuple[int, int]]:
    """The ``(batch, length)`` shapes the parity check runs, other than the trace's: batch 1 x 17,
    batch 3 x ``sequence_length`` and batch 8 x 1, each length cut to ``max_sequence_length``
    (a model with 16 positions cannot read 17 tokens)."""
    limit = max_sequence_length or max(17, sequence_length)
    return [(1, min(17, limit)), (3, min(sequence_length, limit)), (8, 1)]


def check_parity(
    model: Any, session: Any, shapes: list[tuple[int, int]], vocabulary_size: int, pad_id: int, output_name: str = "logits",
    inputs: Sequence[InputSpec] = (), characters: np.ndarray | None = None,
) -> dict[str, float]:
    """Max abs difference of ONNX Runtime vs Keras outputs at each ``(batch, length)`` shape, on
    :func:`random_inputs` of the declared ``inputs``."""
    rng = np.random.default_rng(0)
    diffs = {}
    for batch, length in shapes:
        feeds = random_inputs(rng, inputs, batch, length, vocabulary_size, pad_id, characters)
        with warnings.catch_warnings():
            # Keras warns that attention's softmax over a length-1 axis is constant: true, and meant.
            warnings.filterwarnings("ignore", message="You are using a softmax over axis")
            expected = np.asarray(model(feeds, training=False))  # eager: predict() would retrace per shape
        actual = session.run([output_name], feeds)[0]
        diffs[f"{batch}x{length}"] = float(np.max(np.abs(expected - actual)))
    return diffs


#: A variant is "slower than fp32" when its median latency is over this multiple of fp32's (measured
#: alternately with it): medians of the same graph measured twice differ by a few percent here.
SLOWER_TOLERANCE = 1.05
THROUGHPUT_SHAPE = (32, 128)
THROUGHPUT_REPEATS = 3
CALIBRATION_TEXTS = 256  # texts of --calibration used for static int8
CALIBRATION_BATCH = 16
#: Variant names and files, in the order they are built and shown.
VARIANT_FILES = {"fp32": "model.onnx", "optimized": "model.opt.onnx", "int8": "model.int8.onnx", "fp16": "model.fp16.onnx"}
#: The single-file models of ``--with-tokenizer`` (:mod:`ptmkit.exporting.variants`).
TOKENIZER_VARIANT_FILES = ("model.with_tokenizer.onnx", "model.int8.with_tokenizer.onnx")


def check_options(
    optimize: int = 0,
    int8: bool = False,
    static: bool = False,
    calibration: str | Path | None = None,
    method: str = "minmax",
    exclude_nodes: tuple[str, ...] | list[str] = (),
    per_channel: bool = True,
    reduce_range: bool | None = None,
) -> None:
    """Reject inconsistent export options before anything is converted.

    Raises:
        ExportError: ``optimize`` not in 0-3; ``--static``, ``--calibration``, ``--method``,
            ``--exclude-nodes``, ``--per-tensor`` or ``--reduce-range`` without ``--int8``;
            ``--static`` without ``--calibration`` (or the reverse); a calibration file that does
            not exist; an unknown calibration method.
    """
    from ptmkit_export.optimize import LEVELS
    from ptmkit_export.quantize import CALIBRATION_METHODS

    if optimize not in LEVELS:
        raise ExportError(f"--optimize must be one of {', '.join(map(str, LEVELS))}, got {optimize}")
    if not int8:
        given = [flag for flag, on in (("--static", static), ("--calibration", calibration is not None), ("--method", method != "minmax"),
                                       ("--exclude-nodes", bool(exclude_nodes)), ("--per-tensor", not per_channel),
                                       ("--reduce-range/--no-reduce-range", reduce_range is not None)) if on]
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


def export_run(
    run_dir: str | Path,
    out: str | Path | None = None,
    int8: bool = False,
    dev: str | Path | None = None,
    console: Console | None = None,
    *,
    optimize: int = 0,
    per_channel: bool = True,
    reduce_range: bool | None = None,
    exclude_nodes: tuple[str, ...] | list[str] = (),
    static: bool = False,
    calibration: str | Path | None = None,
    method: str = "minmax",
    fp16: bool = False,
    with_tokenizer: bool = False,
) -> dict[str, Any]:
    """Export a run to ONNX (optimised, int8, fp16 variants on request); see the module docstring.

    A fine-tuned run exports its head's ``logits``; a run without a head (pre-trained or imported
    with ``ptmkit import-hf``) exports sentence ``embeddings`` with the run's pooling
    (:mod:`ptmkit.embedding`). A run of a family providing
    :class:`~ptmkit.contract.ClassifiesRows` (a bag-of-rows classifier) goes to
    :func:`ptmkit.exporting.rows.export_row_classifier` (fp32 only).

    Args:
        run_dir: a run directory.
        out: the export directory (default ``RUN_DIR/export``).
        int8: also write ``model.int8.onnx``.
        dev: file for the fp32-vs-variant gate: labelled for a head (default: the run's dev file),
            any text file for embeddings (required then).
        optimize: 0-3, see :mod:`ptmkit_export.optimize`; >= 1 writes ``model.opt.onnx``.
        per_channel: int8 weights with one scale per output column (default) or per tensor.
        reduce_range: 7-bit int8 weights; ``None`` chooses from the CPU (no VNNI: True).
        exclude_nodes: node names int8 leaves in float.
        static: static QDQ int8 calibrated on ``calibration`` instead of dynamic int8.
        calibration: text file (any format ``ptmkit`` reads, labels ignored) for static int8.
        method: static calibration: ``minmax``, ``entropy`` or ``percentile``.
        fp16: also write ``model.fp16.onnx`` (for GPUs).
        with_tokenizer: also write single-file models that tokenize inside the graph
            (``model.with_tokenizer.onnx``, variant ``fp32+tokenizer``, and ``int8+tokenizer``
            with ``int8``; :mod:`ptmkit.exporting.variants`).

    Returns:
        the export manifest, with ``directory`` and a ``summary`` of the measured numbers.

    Raises:
        RunDirError: missing or corrupted files.
        ExportError: bad options (:func:`check_options`); the ONNX graph failed a check (nothing is
            written); no dev texts for the gate; ``exclude_nodes`` names no node of the graph;
            ``--int8``/``--optimize``/``--fp16``/``--with-tokenizer`` for a bag-of-rows classifier.
    """
    import onnxruntime as ort

    from ptmkit.data.tokenization import character_table, encode_texts, manifest_inputs
    from ptmkit.plugins import get_registry
    from ptmkit.training.finetune import load_classifier, load_labelled
    from ptmkit_export.benchmark import median_latency_ms

    check_options(optimize, int8, static, calibration, method, exclude_nodes, per_channel, reduce_range)
    console = console or default_console()
    registry = get_registry()
    run = RunDir(run_dir)
    family = registry.family(run.manifest()["family"])
    if isinstance(family, ClassifiesRows):
        given = [flag for flag, on in (("--int8", int8), (f"--optimize {optimize}", optimize > 0), ("--fp16", fp16), ("--with-tokenizer", with_tokenizer)) if on]
        if given:
            raise ExportError(
                f"{run.path}: {', '.join(given)}: a {family.name} run is a bag-of-rows classifier (a row gather, a mean, one matrix "
                "product) and is exported as fp32 ONNX only; drop the option"
            )
        from ptmkit.exporting.rows import export_row_classifier

        return export_row_classifier(family.load_row_classifier(run.path), run.path, family.name, out, dev, console)
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
    graph_optimizer = family.graph_optimizer(config.model)
    if optimize >= 2 and graph_optimizer is None:
        raise ExportError(f"--optimize {optimize} fuses transformer layers with ONNX Runtime's optimizer, for which the {family.name} family declares no model type (use --optimize 1)")
    specials = family.special_tokens(tokenizer)
    limits = family.limits(config.model)
    vocabulary_size = int(limits.vocabulary_size or tokenizer.get_vocab_size())
    characters = character_table(tokenizer, family.inputs)
    mask_spec = family.input("attention_mask")
    mask_input = mask_spec.name if mask_spec else None
    target = Path(out) if out is not None else run.path / "export"
    dev_file = dev or run_manifest.get("dev")
    wanted = [name for name, on in (("optimized", optimize > 0), ("int8", int8), ("fp16", fp16)) if on]
    if wanted and not dev_file:
        raise ExportError(f"{run.path}: no dev file recorded in the run; pass --dev FILE (texts, one per line) for the fp32-vs-{wanted[0]} check")

    with staging_directory(target, ".export-") as tmp_name:
        tmp = Path(tmp_name)
        fp32_path = tmp / VARIANT_FILES["fp32"]
        release_memory()  # loading the weights left freed buffers behind
        with console.status("converting to ONNX (tf2onnx)"):
            try:
                convert_to_onnx(model, fp32_path, family.inputs, output)
            except Exception as exc:
                raise ExportError(f"ONNX conversion of {run.path} failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
        options = ort.SessionOptions()
        options.intra_op_num_threads = LATENCY_THREADS
        session = ort.InferenceSession(str(fp32_path), options, providers=["CPUExecutionProvider"])
        shapes = parity_shapes(sequence_length, limits.max_sequence_length)
        parity = check_parity(model, session, shapes, vocabulary_size, specials.padding_id, output, family.inputs, characters)
        del model  # the Keras side is done: free its weights and traced graphs before quantizing
        _release_keras()
        worst = max(parity.values())
        console.print(f"ONNX vs Keras max abs difference: {worst:.2e} " + ", ".join(f"{k}: {v:.1e}" for k, v in parity.items()))
        if worst > PARITY_TOLERANCE:
            raise ExportError(f"ONNX output differs from Keras by {worst:.2e} > {PARITY_TOLERANCE:g} ({parity}); nothing written")
        length = min(LATENCY_SHAPE[1], limits.max_sequence_length or LATENCY_SHAPE[1])
        latency_feeds, throughput_feeds = (
            random_inputs(np.random.default_rng(seed), family.inputs, rows, length, vocabulary_size, specials.padding_id, characters, full=True)
            for seed, rows in ((1, LATENCY_SHAPE[0]), (2, THROUGHPUT_SHAPE[0]))
        )
        gate_shapes = {"latency": f"1x{length}", "throughput": f"{THROUGHPUT_SHAPE[0]}x{length}"}

        def timings(sess: Any) -> dict[str, float]:
            latency = median_latency_ms(sess, latency_feeds, repeats=LATENCY_REPEATS)
            batch_ms = median_latency_ms(sess, throughput_feeds, warmup=1, repeats=THROUGHPUT_REPEATS)
            return {"latency_ms_b1x128": round(latency, 3), "throughput_seq_per_s_b32x128": round(THROUGHPUT_SHAPE[0] * 1000.0 / batch_ms, 1)}

        def paired_timings(sess: Any) -> dict[str, float]:
            """The variant's timings and fp32's, measured alternately (one call of each in turn) so a
            shared machine's load swings hit both alike."""
            (fp32_latency, latency) = paired_median_ms([session, sess], latency_feeds, LATENCY_REPEATS)
            (fp32_batch, batch_ms) = paired_median_ms([session, sess], throughput_feeds, THROUGHPUT_REPEATS, warmup=1)
            return {
                "latency_ms_b1x128": round(latency, 3),
                "throughput_seq_per_s_b32x128": round(THROUGHPUT_SHAPE[0] * 1000.0 / batch_ms, 1),
                "fp32_paired_latency_ms_b1x128": round(fp32_latency, 3),
                "fp32_paired_throughput_seq_per_s_b32x128": round(THROUGHPUT_SHAPE[0] * 1000.0 / fp32_batch, 1),
            }

        variants: dict[str, Any] = {
            "fp32": {"file": VARIANT_FILES["fp32"], "ok": True, "problems": [], "parity_max_abs_diff": parity, "latency_threads": LATENCY_THREADS,
                     **timings(session), "bytes": fp32_path.stat().st_size}
        }
        if wanted:
            assert dev_file is not None
            if labels:
                texts, _, y_dev = load_labelled(dev_file, labels)
            else:
                from ptmkit.data.readers import read_records

                texts = [record.text for record in read_records(dev_file, labelled=False)][:DEV_EMBEDDING_TEXTS]
                y_dev = None
            dev_batches = _length_batches(encode_texts(tokenizer, texts, sequence_length, family.inputs, specials.padding_id), mask_input)
            fp32_out = _run_batches(session, dev_batches, output)
            if labels:
                variants["fp32"]["dev_accuracy"] = round(float(np.mean(np.argmax(fp32_out, -1) == y_dev)), 4)

        def gate(name: str, path: Path, extra: dict[str, Any]) -> None:
            release_memory()  # what building the variant freed (ONNX Runtime's optimizer, the quantizer)
            sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            out_ = _run_batches(sess, dev_batches, output)
            entry: dict[str, Any] = {"file": path.name, **extra, "dev_file": str(dev_file), "latency_threads": LATENCY_THREADS}
            if labels:
                top = np.argmax(out_, -1)
                agreement, threshold, measure = float(np.mean(np.argmax(fp32_out, -1) == top)), AGREEMENT_THRESHOLD, "top-1 agreement"
                entry["dev_agreement_with_fp32"] = round(agreement, 4)
                entry["dev_accuracy"] = round(float(np.mean(top == y_dev)), 4)
            else:
                cosines = cosine(fp32_out, out_)
                agreement, threshold, measure = float(np.mean(cosines)), COSINE_THRESHOLD, "mean cosine"
                entry["dev_mean_cosine_to_fp32"] = round(agreement, 5)
                entry["dev_min_cosine_to_fp32"] = round(float(np.min(cosines)), 5)
                entry["dev_texts"] = len(texts)
            entry.update(paired_timings(sess))
            problems = []
            if agreement < threshold:
                problems.append(f"{measure} with fp32 is only {agreement:.4f} on {dev_file} (< {threshold})")
            if entry["latency_ms_b1x128"] > entry["fp32_paired_latency_ms_b1x128"] * SLOWER_TOLERANCE:
                problems.append(f"slower than fp32 ({entry['latency_ms_b1x128']:.2f} ms vs {entry['fp32_paired_latency_ms_b1x128']:.2f} ms at batch {gate_shapes['latency']}, measured alternately)")
            entry |= {"ok": not problems, "agreement_ok": agreement >= threshold, "problems": problems, "bytes": path.stat().st_size}
            variants[name] = entry
            if problems:
                hint = " (fp16 is meant for GPUs; ONNX Runtime's CPU has few fp16 kernels)" if name == "fp16" else ""
                console.print(f"[bold red]WARNING: {name}: {'; '.join(problems)}{hint}; marked not ok: the runtime does not pick it by default[/bold red]")

        base = fp32_path
        if optimize > 0:
            from ptmkit_export.optimize import optimize_transformer

            opt_path = tmp / VARIANT_FILES["optimized"]
            with console.status(f"optimizing the graph (level {optimize})"):
                by_field = {spec.field: spec.name for spec in family.inputs}
                info = optimize_transformer(
                    fp32_path, opt_path, optimize, *(graph_optimizer[1:] if graph_optimizer else (None, None)),
                    mask_input=by_field.get("attention_mask"), ids_input=by_field.get("ids"), segment_input=by_field.get("type_ids"),
                    model_type=graph_optimizer.model_type if graph_optimizer else None,
                )
            fused = ", ".join(f"{op} {n}" for op, n in info["fused"].items() if n) or "nothing"
            console.print(f"optimize {optimize}: passes {info['passes']}; fused: {fused}")
            for note in info["notes"]:
                console.print(f"[yellow]note: {note}[/yellow]")
            gate("optimized", opt_path, {"optimization": info})
            base = opt_path
        if int8:
            from ptmkit_export.quantize import UnknownNodeError, auto_reduce_range, quantize_int8, quantize_int8_static

            if reduce_range is None:
                chosen, reason = auto_reduce_range()
                reduce_choice = {"reduce_range": chosen, "reduce_range_source": "auto", "reduce_range_reason": reason}
            else:
                reduce_choice = {"reduce_range": reduce_range, "reduce_range_source": "--reduce-range" if reduce_range else "--no-reduce-range"}
            int8_path = tmp / VARIANT_FILES["int8"]
            kind = f"static QDQ, {method} calibration" if static else "dynamic"
            with console.status(f"quantizing to int8 ({kind}, {'per-channel' if per_channel else 'per-tensor'})"):
                try:
                    if static:
                        assert calibration is not None
                        batches = _calibration_batches(calibration, tokenizer, sequence_length, family.inputs, specials.padding_id, mask_input)
                        quantization = quantize_int8_static(base, int8_path, batches, method, per_channel, reduce_choice["reduce_range"], exclude_nodes)
                    else:
                        quantization = quantize_int8(base, int8_path, per_channel=per_channel, reduce_range=reduce_choice["reduce_range"], exclude_nodes=exclude_nodes)
                        quantization["mode"] = "dynamic"
                except UnknownNodeError as exc:
                    raise ExportError(str(exc)) from None
            quantization |= reduce_choice
            quantization["source_variant"] = "optimized" if base != fp32_path else "fp32"
            gate("int8", int8_path, {"quantization": quantization})
        if fp16:
            from ptmkit_export.optimize import convert_fp16

            fp16_path = tmp / VARIANT_FILES["fp16"]
            with console.status("converting to fp16"):
                conversion = convert_fp16(base, fp16_path)
            gate("fp16", fp16_path, {"conversion": conversion | {"source_variant": "optimized" if base != fp32_path else "fp32"}})
        gate_table = {"shapes": gate_shapes, "threads": LATENCY_THREADS, "rows": [_gate_row(name, v, variants["fp32"]) for name, v in variants.items()]}
        print_gate_table(gate_table, console)
        shutil.copyfile(run.require("tokenizer.json"), tmp / "tokenizer.json")
        if with_tokenizer:
            from ptmkit.exporting.variants import dev_texts, tokenizer_variants

            variants.update(tokenizer_variants(
                tmp, variants, tmp / "tokenizer.json", family.inputs, output, sequence_length, specials.padding_id,
                dev_texts(dev_file, labels), LATENCY_THREADS, LATENCY_REPEATS, console,
            ))
        manifest = {
            "format": "ptmkit-export/1",
            "family": run_manifest["family"],
            "task": task,
            "run": str(run.path.resolve()),
            "inputs": manifest_inputs(family.inputs),
            **task_manifest,
            "max_sequence_length": sequence_length,
            "pad_token_id": specials.padding_id,
            "tokenizer": "tokenizer.json",
            "variants": variants,
            "gate": gate_table,
        }
        from ptmkit.io import atomic_write_json

        atomic_write_json(tmp / "manifest.json", manifest)
        target.mkdir(parents=True, exist_ok=True)
        stale = target / "manifest.json"
        if stale.exists():
            stale.unlink()  # the directory is not a valid export while files are swapped
        for name in [*VARIANT_FILES.values(), *TOKENIZER_VARIANT_FILES]:  # files of variants not built this time are stale
            if name not in {v["file"] for v in variants.values()}:
                (target / name).unlink(missing_ok=True)
        for name in [v["file"] for v in variants.values()] + ["tokenizer.json", "manifest.json"]:
            os.replace(tmp / name, target / name)
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
    return {**manifest, "directory": str(target), "summary": summary}


def paired_median_ms(sessions: list[Any], feeds: dict[str, np.ndarray], repeats: int, warmup: int = 2) -> list[float]:
    """Median milliseconds per call of each session, timed round-robin (one call of each in turn)."""
    import statistics
    import time

    for sess in sessions:
        for _ in range(warmup):
            sess.run(None, feeds)
    times: list[list[float]] = [[] for _ in sessions]
    for _ in range(repeats):
        for i, sess in enumerate(sessions):
            start = time.perf_counter()
            sess.run(None, feeds)
            times[i].append(time.perf_counter() - start)
    return [statistics.median(t) * 1000.0 for t in times]


def _gate_row(name: str, variant: dict[str, Any], fp32: dict[str, Any]) -> dict[str, Any]:
    agreement = variant.get("dev_agreement_with_fp32", variant.get("dev_mean_cosine_to_fp32"))
    return {
        "variant": name,
        "file": variant["file"],
        "megabytes": round(variant["bytes"] / 1e6, 1),
        "agreement": None if name == "fp32" else agreement,
        "agreement_kind": "top-1" if "dev_agreement_with_fp32" in variant else "cosine",
        "latency_ms_b1x128": variant["latency_ms_b1x128"],
        "speedup_vs_fp32": round(variant.get("fp32_paired_latency_ms_b1x128", fp32["latency_ms_b1x128"]) / variant["latency_ms_b1x128"], 2),
        "throughput_seq_per_s_b32x128": variant["throughput_seq_per_s_b32x128"],
        "throughput_vs_fp32": round(variant["throughput_seq_per_s_b32x128"] / variant.get("fp32_paired_throughput_seq_per_s_b32x128", fp32["throughput_seq_per_s_b32x128"]), 2),
        "ok": variant["ok"],
    }


def print_gate_table(gate_table: dict[str, Any], console: Console) -> None:
    """Print the variants' gate (agreement, latency, throughput, ok) as a rich table."""
    from rich.table import Table

    shapes = gate_table["shapes"]
    table = Table(
        title=f"export variants vs fp32 (ONNX Runtime, {gate_table['threads']} thread; each ratio against fp32 timed alternately with the variant)"
    )
    for column in ("variant", "MB", "agreement", f"ms @ {shapes['latency']}", "speed-up", f"seq/s @ {shapes['throughput']}", "x fp32", "ok"):
        table.add_column(column, justify="left" if column == "variant" else "right")
    for row in gate_table["rows"]:
        agreement = "-" if row["agreement"] is None else f"{row['agreement']:.4f} {row['agreement_kind']}"
        ok = "[green]yes[/green]" if row["ok"] else "[bold red]NO[/bold red]"
        table.add_row(row["variant"], f"{row['megabytes']:.1f}", agreement, f"{row['latency_ms_b1x128']:.2f}", f"{row['speedup_vs_fp32']:.2f}x",
                      f"{row['throughput_seq_per_s_b32x128']:.1f}", f"{row['throughput_vs_fp32']:.2f}x", ok)
    console.print(table)


def _length_batches(feeds: dict[str, np.ndarray], mask_input: str | None = None, batch_size: int = 32) -> list[dict[str, np.ndarray]]:
    """Split padded inputs into batches of ``batch_size`` rows, each cut to its longest row when
    ``mask_input`` names the padding-mask input; the batches keep the original row order when
    concatenated (rows are not reordered)."""
    count = len(next(iter(feeds.values())))
    mask = feeds.get(mask_input) if mask_input else None
    batches = []
    for i in range(0, count, batch_size):
        chunk = {k: v[i : i + batch_size] for k, v in feeds.items()}
        if mask is not None:
            longest = max(1, int(mask[i : i + batch_size].sum(axis=1).max()))
            chunk = {k: np.ascontiguousarray(v[:, :longest]) for k, v in chunk.items()}
        batches.append(chunk)
    return batches


def _run_batches(session: Any, batches: list[dict[str, np.ndarray]], output: str) -> np.ndarray:
    """``output`` of every batch, concatenated; ONNX Runtime's CPU arena hands its memory back after
    each batch (``memory.enable_memory_arena_shrinkage``), so that the dev set's longest batch does
    not stay allocated in every session while the next variant is built."""
    import onnxruntime as ort

    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return np.concatenate([session.run([output], batch, options)[0] for batch in batches])


def _calibration_batches(
    path: str | Path, tokenizer: Any, sequence_length: int, inputs: Sequence[InputSpec], pad: int, mask_input: str | None
) -> list[dict[str, np.ndarray]]:
    from ptmkit.data.readers import read_records
    from ptmkit.data.tokenization import encode_texts

    texts = [record.text for _, record in zip(range(CALIBRATION_TEXTS), read_records(path, labelled=False), strict=False)]
    if not texts:
        raise ExportError(f"{path}: no calibration text")
    return _length_batches(encode_texts(tokenizer, texts, sequence_length, inputs, pad), mask_input, CALIBRATION_BATCH)


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two ``(n, d)`` arrays; ``(n,)`` float64."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.sum(a * b, -1) / np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1), 1e-12)
