"""``ptmkit export RUN_DIR`` for bag-of-rows text classifiers (families providing
:data:`ptmkit.contract.ROW_CLASSIFIER`, e.g. fastText's supervised model, Joulin et al. 2017).

1. Convert the family's Keras model (:meth:`ptmkit.contract.ModelFamily.load_row_classifier`)
   with Keras' ``model.export(format="onnx")`` (tf2onnx): inputs ``row_ids`` ``(batch, rows)``
   int32 and ``row_mask`` ``(batch, rows)`` float32, output ``logits`` ``(batch, labels)``.
2. Featurize the dev texts with the lean runtime's own featurizer
   (:class:`ptmkit_export.bag_of_rows.BagOfRows`, the code :class:`ptmkit_export.Predictor` runs)
   and compare ONNX Runtime's logits with Keras' on them, in batches of 32 padded to their longest
   text, on batch 1 and on random padded rows: the largest absolute difference must be <=
   :data:`PARITY_TOLERANCE`. Dev accuracy through ONNX Runtime is recorded.
3. Write ``model.onnx``, ``vocabulary.txt`` (one word a line, line ``i`` owns row ``i``) and
   ``manifest.json`` (``featurizer`` object instead of ``tokenizer``); built in a temporary
   directory beside the target and moved in only when every check passed.

``--int8`` is refused: ONNX Runtime's dynamic int8 would quantize the row matrix's ``Gather`` (4x
smaller), but the export's int8 gate times token sequences of transformer exports; this model is a
gather, a mean and one matrix product.
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

from ptmkit.contract import RowClassifier
from ptmkit.errors import PtmkitError

PARITY_TOLERANCE = 1e-6
PARITY_BATCH = 32
FILES = ("model.onnx", "vocabulary.txt", "manifest.json")


class RowExportError(PtmkitError):
    """The exported graph failed a check, or the export cannot be made; nothing was written."""


def convert(model: Any, path: Path) -> None:
    """Write ``model`` (inputs ``row_ids`` int32, ``row_mask`` float32) as ONNX with axes ``batch``
    and ``rows`` and one output named ``logits``.

    Raises:
        RowExportError: tf2onnx or the ONNX checker failed.
    """
    import onnx
    import tensorflow as tf

    signature = [{"row_ids": tf.TensorSpec((None, None), tf.int32, name="row_ids"), "row_mask": tf.TensorSpec((None, None), tf.float32, name="row_mask")}]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # tf2onnx probes np.object
            model.export(str(path), format="onnx", input_signature=signature, verbose=False)
        graph_model = onnx.load(str(path))
        for value in graph_model.graph.input:
            dims = value.type.tensor_type.shape.dim
            dims[0].dim_param, dims[1].dim_param = "batch", "rows"
        (output,) = graph_model.graph.output
        for node in graph_model.graph.node:
            node.output[:] = ["logits" if name == output.name else name for name in node.output]
        output.name = "logits"
        output.type.tensor_type.shape.dim[0].dim_param = "batch"
        onnx.checker.check_model(graph_model)
        onnx.save(graph_model, str(path))
    except Exception as exc:
        raise RowExportError(f"ONNX conversion failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc


def parity(model: Any, session: Any, batches: list[dict[str, np.ndarray]]) -> tuple[float, np.ndarray]:
    """Largest absolute difference of ONNX Runtime's and Keras' logits over ``batches``, and ONNX
    Runtime's logits of all of them concatenated ``(examples, labels)`` float32."""
    worst, outputs = 0.0, []
    for feeds in batches:
        expected = np.asarray(model(feeds, training=False))
        actual = session.run(["logits"], feeds)[0]
        worst = max(worst, float(np.max(np.abs(expected - actual))))
        outputs.append(actual)
    return worst, np.concatenate(outputs)


def export_row_classifier(
    classifier: RowClassifier, run_dir: str | Path, family: str, out: str | Path | None = None, dev: str | Path | None = None, console: Console | None = None
) -> dict[str, Any]:
    """Export a bag-of-rows classifier to ``out`` (default ``RUN_DIR/export``); see the module docstring.

    Args:
        classifier: the run's classifier (:meth:`ptmkit.contract.ModelFamily.load_row_classifier`).
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
    from ptmkit.data.readers import LABEL_PREFIX, read_records
    from ptmkit.io import atomic_write_json, atomic_write_text
    from ptmkit.training.finetune import macro_f1
    from ptmkit_export.bag_of_rows import BagOfRows, pad_rows

    console = console or default_console()
    dev_file = dev or classifier.dev
    if not dev_file or not Path(dev_file).is_file():
        recorded = f"the run's dev file {dev_file} is missing" if dev_file else "no dev file is recorded in the run"
        raise RowExportError(f"{run_dir}: {recorded}; pass --dev FILE (labelled, or texts one per line) for the ONNX-vs-Keras check")
    featurizer = BagOfRows(classifier.words, **classifier.featurizer)
    rows_total = next((int(layer.input_dim) for layer in classifier.model.layers if hasattr(layer, "input_dim")), featurizer.rows_total)
    if rows_total != featurizer.rows_total:
        raise RowExportError(f"{run_dir}: the model has {rows_total:,} rows but {len(classifier.words):,} words + bucket {featurizer.bucket:,} = {featurizer.rows_total:,}")
    with open(dev_file, "rb") as handle:
        labelled = handle.readline().lstrip().startswith(LABEL_PREFIX.encode()) or Path(dev_file).suffix in (".tsv", ".csv", ".jsonl")
    records = list(read_records(dev_file, labelled=labelled))
    texts = [r.text for r in records]
    if not texts:
        raise RowExportError(f"{dev_file}: no texts for the ONNX-vs-Keras check")
    index = {label: i for i, label in enumerate(classifier.labels)}
    gold = np.asarray([index.get(r.label, -1) if r.label is not None else -1 for r in records])
    target = Path(out) if out is not None else Path(run_dir) / "export"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".export-", dir=target.parent) as tmp_name:
        tmp = Path(tmp_name)
        with console.status("converting to ONNX (tf2onnx)"):
            convert(classifier.model, tmp / "model.onnx")
        session = ort.InferenceSession(str(tmp / "model.onnx"), providers=["CPUExecutionProvider"])
        batches = [featurizer.encode(texts[i : i + PARITY_BATCH]) for i in range(0, len(texts), PARITY_BATCH)]
        rng = np.random.default_rng(0)
        random_rows = [rng.integers(0, featurizer.rows_total, size=rng.integers(0, 40)).tolist() for _ in range(16)]
        checks = {
            "dev_batches": parity(classifier.model, session, batches),
            "dev_batch_1": parity(classifier.model, session, [featurizer.encode([t]) for t in texts[:50]]),
            "random_rows": parity(classifier.model, session, [pad_rows(random_rows)]),
        }
        diffs = {name: value for name, (value, _) in checks.items()}
        worst = max(diffs.values())
        console.print(f"ONNX vs Keras max abs difference: {worst:.2e} (" + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items()) + f"; {len(texts):,} dev texts)")
        if worst > PARITY_TOLERANCE:
            raise RowExportError(f"ONNX output differs from Keras by {worst:.2e} > {PARITY_TOLERANCE:g} ({diffs}); nothing written")
        fp32: dict[str, Any] = {"file": "model.onnx", "ok": True, "problems": [], "parity_max_abs_diff": diffs, "dev_file": str(dev_file), "dev_texts": len(texts)}
        known = gold >= 0
        if known.any():
            predicted = np.argmax(checks["dev_batches"][1], axis=1)
            fp32["dev_accuracy"] = round(float(np.mean(predicted[known] == gold[known])), 4)
            fp32["dev_macro_f1"] = round(macro_f1(gold[known], predicted[known], len(classifier.labels)), 4)
        atomic_write_text(tmp / "vocabulary.txt", "".join(f"{w}\n" for w in classifier.words))
        manifest = {
            "format": "ptmkit-export/1",
            "family": family,
            "task": "classification",
            "run": str(Path(run_dir).resolve()),
            "inputs": [
                {"name": "row_ids", "dtype": "int32", "encoding": "row_ids", "shape": ["batch", "rows"]},
                {"name": "row_mask", "dtype": "float32", "encoding": "row_mask", "shape": ["batch", "rows"]},
            ],
            "outputs": [{"name": "logits", "dtype": "float32", "shape": ["batch", len(classifier.labels)]}],
            "labels": list(classifier.labels),
            "featurizer": featurizer.spec("vocabulary.txt"),
            "rows": featurizer.rows_total,
            "variants": {"fp32": fp32},
        }
        atomic_write_json(tmp / "manifest.json", manifest)
        target.mkdir(parents=True, exist_ok=True)
        if (target / "manifest.json").exists():
            (target / "manifest.json").unlink()  # the directory is not a valid export while files are swapped
        for name in FILES:
            os.replace(tmp / name, target / name)
        shutil.rmtree(tmp, ignore_errors=True)
    summary = {"onnx_parity_max_abs_diff": f"{worst:.2e}", "rows": featurizer.rows_total, "labels": len(classifier.labels)}
    summary |= {f"fp32_{key}": fp32[key] for key in ("dev_accuracy", "dev_macro_f1") if key in fp32}
    return {**manifest, "directory": str(target), "summary": summary}
