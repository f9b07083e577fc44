"""``ptmkit export RUN_DIR`` for bag-of-rows text classifiers (families providing
:class:`ptmkit.contract.ClassifiesRows`, e.g. fastText's supervised model, Joulin et al. 2017):
the transformer export's stages in one module, without variants or a gate (convert:
:func:`write_onnx`; check parity: :func:`parity`; write: :func:`ptmkit.exporting.write.install`).

1. Write the classifier (:meth:`ptmkit.contract.ClassifiesRows.load_row_classifier`) as an ONNX
   graph built from its two matrices (:func:`write_onnx`): inputs ``row_ids`` ``(batch, rows)``
   int32 and ``row_mask`` ``(batch, rows)`` float32, output ``logits`` ``(batch, labels)``.
2. Featurize the dev texts with the lean runtime's own featurizer
   (:class:`ptmkit_export.bag_of_rows.BagOfRows`, the code :class:`ptmkit_export.Predictor` runs)
   and compare ONNX Runtime's logits with Keras' on them, in batches of 32 padded to their longest
   text, on batch 1 and on random padded rows: the difference of the logits relative to
   ``max(1, largest |logit| of the text)`` and that of the probabilities must be <=
   :data:`PARITY_TOLERANCE`. An absolute 1e-6 is below float32's resolution for logits over 8 (an
   ulp is 1.9e-6 at 16-32), and the logits are sums of terms as large as the largest logit, so two
   float32 computations in another order differ by about 1e-7 of it. Absolute differences are
   recorded too.
   Dev accuracy through ONNX Runtime is recorded.
3. Write ``model.onnx``, ``vocabulary.txt`` (one word a line, line ``i`` owns row ``i``) and
   ``manifest.json`` (``featurizer`` object instead of ``tokenizer``; ``activation``, the
   classifier's declared ``softmax`` or ``sigmoid``, which the lean runtime applies to the logits); built in a temporary
   directory beside the target and moved in only when every check passed.

``--int8`` is refused: ONNX Runtime's dynamic int8 would quantize the row matrix's ``Gather`` (4x
smaller), but the export's int8 gate times token sequences of transformer exports; this model is a
gather, a mean and one matrix product.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from ptmkit.contract import RowClassifier
from ptmkit.errors import ExportError, PtmkitError
from ptmkit.io import staging_directory

PARITY_TOLERANCE = 1e-6
PARITY_BATCH = 32


class RowExportError(PtmkitError):
    """The exported graph failed a check, or the export cannot be made; nothing was written."""


#: Matrices larger than this go to ``model.onnx.data`` (ONNX external data): a protobuf holds 2 GB.
EXTERNAL_DATA_BYTES = 1 << 30


def write_onnx(input_matrix: np.ndarray, output_matrix: np.ndarray | None, path: Path) -> list[str]:
    """Write the classifier's graph to ``path``: ``Gather`` of ``row_ids`` ``(batch, rows)`` int32
    from ``input_matrix``, the ``row_mask``-weighted sum as a batched ``MatMul``, divided by
    ``max(sum(row_mask), 1)``, then ``MatMul`` by ``output_matrix``: ``logits`` ``(batch, labels)``.
    Without ``output_matrix`` the graph ends at the mean: ``vectors`` ``(batch, dim)`` (a
    word-vector lookup; a fastText word is the mean of its word and n-gram rows).

    The graph is built with ``onnx.helper`` rather than converted by tf2onnx, which ran out of
    memory (24 GB) on fastText's 2,000,000 x 100 bucket rows; :func:`parity` checks it against the
    Keras model. Matrices over :data:`EXTERNAL_DATA_BYTES` are stored in ``model.onnx.data``.

    Returns:
        the names of the files written (``model.onnx``, and ``model.onnx.data`` when used).

    Raises:
        RowExportError: the ONNX checker refused the graph.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rows, dim = input_matrix.shape
    nodes = [
        helper.make_node("Gather", ["input_matrix", "row_ids"], ["gathered"], axis=0),  # (batch, rows, dim)
        helper.make_node("Unsqueeze", ["row_mask", "axis_1"], ["mask_row"]),  # (batch, 1, rows)
        helper.make_node("MatMul", ["mask_row", "gathered"], ["total_row"]),  # (batch, 1, dim)
        helper.make_node("Squeeze", ["total_row", "axis_1"], ["total"]),  # (batch, dim)
        helper.make_node("ReduceSum", ["row_mask", "axis_1"], ["count"], keepdims=1),  # (batch, 1)
        helper.make_node("Max", ["count", "one"], ["divisor"]),
        helper.make_node("Div", ["total", "divisor"], ["mean" if output_matrix is not None else "vectors"]),
    ]
    initializers = [
        numpy_helper.from_array(np.ascontiguousarray(input_matrix, np.float32), "input_matrix"),
        numpy_helper.from_array(np.asarray([1], np.int64), "axis_1"),
        numpy_helper.from_array(np.asarray(1.0, np.float32), "one"),
    ]
    if output_matrix is not None:
        nodes.append(helper.make_node("MatMul", ["mean", "output_matrix"], ["logits"]))
        initializers.append(numpy_helper.from_array(np.ascontiguousarray(output_matrix, np.float32), "output_matrix"))
        output = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", output_matrix.shape[1]])
    else:
        output = helper.make_tensor_value_info("vectors", TensorProto.FLOAT, ["batch", dim])
    graph = helper.make_graph(
        nodes, "bag_of_rows_classifier" if output_matrix is not None else "bag_of_rows_vectors",
        [helper.make_tensor_value_info("row_ids", TensorProto.INT32, ["batch", "rows"]),
         helper.make_tensor_value_info("row_mask", TensorProto.FLOAT, ["batch", "rows"])],
        [output],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="ptmkit")
    model.ir_version = 8  # onnxruntime >= 1.15 reads it
    files = [path.name]
    try:
        if input_matrix.nbytes > EXTERNAL_DATA_BYTES:
            onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=path.name + ".data")
            files.append(path.name + ".data")
            onnx.checker.check_model(str(path))
        else:
            onnx.checker.check_model(model)
            onnx.save_model(model, str(path))
    except Exception as exc:
        raise RowExportError(f"ONNX graph of {rows:,} x {dim} rows failed a check: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
    return files


def parity(model: Any, session: Any, batches: list[dict[str, np.ndarray]], activation: str = "softmax") -> tuple[dict[str, float], np.ndarray]:
    """ONNX Runtime's logits against Keras' over ``batches``.

    Args:
        activation: the classifier's ``softmax`` or ``sigmoid`` (:attr:`RowClassifier.activation`),
            applied to both before comparing probabilities.

    Returns:
        ``({"abs": largest absolute difference of the logits, "scaled": largest ``|onnx - keras| /
        max(1, largest |keras logit| of the text)``, "probabilities": largest absolute difference
        of their probabilities, "max_abs_logit": largest |logit|}, ONNX Runtime's logits
        (examples, labels) float32)``.
    """
    from ptmkit_export.predictor import probabilities

    found = {"abs": 0.0, "scaled": 0.0, "probabilities": 0.0, "max_abs_logit": 0.0}
    outputs = []
    for feeds in batches:
        expected = np.asarray(model(feeds, training=False))
        actual = session.run(["logits"], feeds)[0]
        difference = np.abs(expected.astype(np.float64) - actual)
        found["abs"] = max(found["abs"], float(np.max(difference)))
        scale = np.maximum(1.0, np.max(np.abs(expected), axis=-1, keepdims=True))
        found["scaled"] = max(found["scaled"], float(np.max(difference / scale)))
        found["probabilities"] = max(found["probabilities"], float(np.max(np.abs(probabilities(expected, activation) - probabilities(actual, activation)))))
        found["max_abs_logit"] = max(found["max_abs_logit"], float(np.max(np.abs(expected))))
        outputs.append(actual)
    return found, np.concatenate(outputs)


ROW_INPUTS = (
    {"name": "row_ids", "dtype": "int32", "encoding": "row_ids", "shape": ["batch", "rows"]},
    {"name": "row_mask", "dtype": "float32", "encoding": "row_mask", "shape": ["batch", "rows"]},
)


def row_inputs() -> list[dict[str, Any]]:
    """The manifest's ``inputs`` of a bag-of-rows graph (:func:`write_onnx`), a fresh copy."""
    return [dict(spec, shape=list(spec["shape"])) for spec in ROW_INPUTS]


def check_row_options(run_path: Path, family: str, *, int8: bool, optimize: int, fp16: bool, with_tokenizer: bool, int4: bool = False) -> None:
    """Refuse the transformer export's options for a bag-of-rows classifier.

    Raises:
        ExportError: ``--int8``, ``--int4``, ``--optimize N``, ``--fp16`` or ``--with-tokenizer`` given.
    """
    given = [flag for flag, on in (("--int8", int8), ("--int4", int4), (f"--optimize {optimize}", optimize > 0), ("--fp16", fp16),
                                   ("--with-tokenizer", with_tokenizer)) if on]
    if given:
        raise ExportError(
            f"{run_path}: {', '.join(given)}: a {family} run is a bag-of-rows classifier (a row gather, a mean, one matrix "
            "product) and is exported as fp32 ONNX only; drop the option"
        )


def export_row_classifier(
    classifier: RowClassifier, run_dir: str | Path, family: str, out: str | Path | None = None, dev: str | Path | None = None, console: Console | None = None
) -> dict[str, Any]:
    """Export a bag-of-rows classifier to ``out`` (default ``RUN_DIR/export``); see the module docstring.

    Args:
        classifier: the run's classifier (:meth:`ptmkit.contract.ClassifiesRows.load_row_classifier`).
        run_dir: the run directory (recorded in the manifest).
        family: the run's family name (recorded).
        out: the export directory.
        dev: labelled file (or plain text, one text a line) for the parity check; default the
            run's dev file.

    Returns:
        the manifest, with ``directory`` and a ``summary`` of the measured numbers.

    Raises:
        RowExportError: no dev file; the conversion or the parity check failed (nothing written).
        DataError: an unreadable dev file.
    """
    import onnxruntime as ort

    from ptmkit.console import default_console
    from ptmkit.exporting.write import FORMAT, install
    from ptmkit.io import atomic_write_json, atomic_write_text
    from ptmkit_export.bag_of_rows import BagOfRows
    from ptmkit_export.manifest import ACTIVATIONS

    console = console or default_console()
    dev_file = dev or classifier.dev
    if not dev_file or not Path(dev_file).is_file():
        recorded = f"the run's dev file {dev_file} is missing" if dev_file else "no dev file is recorded in the run"
        raise RowExportError(f"{run_dir}: {recorded}; pass --dev FILE (labelled, or texts one per line) for the ONNX-vs-Keras check")
    if classifier.activation not in ACTIVATIONS:
        raise RowExportError(f"{run_dir}: the classifier's activation {classifier.activation!r} is not one of {', '.join(ACTIVATIONS)} (a plugin bug)")
    featurizer = BagOfRows(classifier.words, **classifier.featurizer)
    rows_total = int(classifier.input_matrix.shape[0])
    if rows_total != featurizer.rows_total:
        raise RowExportError(f"{run_dir}: the model has {rows_total:,} rows but {len(classifier.words):,} words + bucket {featurizer.bucket:,} = {featurizer.rows_total:,}")
    records = _dev_records(dev_file)
    texts = [r.text for r in records]
    target = Path(out) if out is not None else Path(run_dir) / "export"
    with staging_directory(target, ".export-") as tmp_name:
        tmp = Path(tmp_name)
        with console.status("writing the ONNX graph"):
            files = write_onnx(classifier.input_matrix, classifier.output_matrix, tmp / "model.onnx")
        session = ort.InferenceSession(str(tmp / "model.onnx"), providers=["CPUExecutionProvider"])
        fp32, logits = _check_parity(classifier, session, featurizer, texts, console)
        fp32["dev_file"], fp32["dev_texts"] = str(dev_file), len(texts)
        fp32 |= _dev_scores(classifier, records, logits)
        atomic_write_text(tmp / "vocabulary.txt", "".join(f"{w}\n" for w in classifier.words))
        manifest = {
            "format": FORMAT,
            "family": family,
            "task": "classification",
            "run": str(Path(run_dir).resolve()),
            "inputs": row_inputs(),
            "outputs": [{"name": "logits", "dtype": "float32", "shape": ["batch", len(classifier.labels)]}],
            "labels": list(classifier.labels),
            "activation": classifier.activation,
            "featurizer": featurizer.spec("vocabulary.txt"),
            "rows": featurizer.rows_total,
            "variants": {"fp32": fp32},
        }
        atomic_write_json(tmp / "manifest.json", manifest)
        install(tmp, target, [*files, "vocabulary.txt"], stale=["model.onnx.data"])  # a larger model's external data is stale
    return {**manifest, "directory": str(target), "summary": _summary(fp32, featurizer.rows_total, len(classifier.labels))}


def _dev_records(dev_file: str | Path) -> list[Any]:
    """The dev file's records (labels kept when it is labelled).

    Raises:
        RowExportError: no text in it.
    """
    from ptmkit.data.readers import is_labelled, read_records

    records = list(read_records(dev_file, labelled=is_labelled(dev_file), multi_label=True))
    if not records:
        raise RowExportError(f"{dev_file}: no texts for the ONNX-vs-Keras check")
    return records


def _check_parity(classifier: RowClassifier, session: Any, featurizer: Any, texts: list[str], console: Console) -> tuple[dict[str, Any], np.ndarray]:
    """:func:`parity` on the dev texts in batches of :data:`PARITY_BATCH`, one by one (the first
    50) and on random padded rows; print the differences.

    Returns:
        ``(fp32's manifest entry with the differences, ONNX Runtime's logits of the dev batches)``.

    Raises:
        RowExportError: a difference over :data:`PARITY_TOLERANCE`.
    """
    from ptmkit_export.bag_of_rows import pad_rows

    batches = [featurizer.encode(texts[i : i + PARITY_BATCH]) for i in range(0, len(texts), PARITY_BATCH)]
    rng = np.random.default_rng(0)
    random_rows = [rng.integers(0, featurizer.rows_total, size=rng.integers(0, 40)).tolist() for _ in range(16)]
    checks = {
        "dev_batches": parity(classifier.model, session, batches, classifier.activation),
        "dev_batch_1": parity(classifier.model, session, [featurizer.encode([t]) for t in texts[:50]], classifier.activation),
        "random_rows": parity(classifier.model, session, [pad_rows(random_rows)], classifier.activation),
    }
    diffs = {name: found["abs"] for name, (found, _) in checks.items()}
    scaled = max(found["scaled"] for found, _ in checks.values())
    probabilities = max(found["probabilities"] for found, _ in checks.values())
    largest = max(found["max_abs_logit"] for found, _ in checks.values())
    worst = max(diffs.values())
    console.print(
        f"ONNX vs Keras: logits max abs difference {worst:.2e} (" + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items())
        + f"; logits up to {largest:.1f}), relative to the text's largest logit {scaled:.2e}, probabilities {probabilities:.2e}; {len(texts):,} dev texts"
    )
    if scaled > PARITY_TOLERANCE or probabilities > PARITY_TOLERANCE:
        raise RowExportError(
            f"ONNX output differs from Keras: logits by {scaled:.2e} of max(1, the text's largest |logit|), probabilities by {probabilities:.2e} "
            f"(> {PARITY_TOLERANCE:g}; absolute {diffs}); nothing written"
        )
    fp32: dict[str, Any] = {
        "file": "model.onnx", "ok": True, "problems": [], "parity_max_abs_diff": diffs, "parity_max_scaled_diff": scaled,
        "parity_max_probability_diff": probabilities, "max_abs_logit": largest,
    }
    return fp32, checks["dev_batches"][1]


def _dev_scores(classifier: RowClassifier, records: list[Any], logits: np.ndarray) -> dict[str, float]:
    """Dev accuracy (precision at 1 on several labels) and macro F1 of ONNX Runtime's ``logits``
    over the records with a known label; nothing when none has one."""
    from ptmkit.training.finetune import macro_f1, top1_gold

    predicted = np.argmax(logits, axis=1)
    gold = top1_gold(predicted, [r.all_labels() for r in records], list(classifier.labels))
    known = gold >= 0
    if not known.any():
        return {}
    return {
        "dev_accuracy": round(float(np.mean(predicted[known] == gold[known])), 4),
        "dev_macro_f1": round(macro_f1(gold[known], predicted[known], len(classifier.labels)), 4),
    }


def _summary(fp32: dict[str, Any], rows: int, labels: int) -> dict[str, Any]:
    """The numbers ``ptmkit export`` prints for a bag-of-rows export."""
    summary = {
        "onnx_parity_max_abs_diff": f"{max(fp32['parity_max_abs_diff'].values()):.2e}", "onnx_parity_max_scaled_diff": f"{fp32['parity_max_scaled_diff']:.2e}",
        "onnx_parity_max_probability_diff": f"{fp32['parity_max_probability_diff']:.2e}", "max_abs_logit": round(fp32["max_abs_logit"], 2), "rows": rows,
        "labels": labels,
    }
    summary |= {f"fp32_{key}": fp32[key] for key in ("dev_accuracy", "dev_macro_f1") if key in fp32}
    return summary
