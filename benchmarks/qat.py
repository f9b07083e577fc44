"""Quantisation-aware training (Q8BERT, ``ptmkit finetune --qat``) against post-training int8 on
all-MiniLM-L6-v2 fine-tuned on the shipped polarity data.

Steps: the fp32 run is head_pruning.py's teacher (``ptmkit import-hf`` of the MiniLM in the test
extra, ``ptmkit finetune`` with the quickstart's recipe, ``ptmkit.quickstart.MINILM_POLARITY``);
the QAT run is the same command with ``--qat`` and ``finetune.qat_reduce_range`` set as the
export's ``--reduce-range`` will be (ONNX Runtime's 7-bit weights on CPUs without VNNI, chosen
by ``ptmkit_export.quantize.auto_reduce_range``). Rows:

- ``fp32``: the fine-tuned run, its fp32 ONNX (size and latency are fp32's);
- ``PTQ int8 (per-channel)``: ``ptmkit export --int8`` of it, the export's defaults;
- ``PTQ int8 (per-tensor)``: ``--int8 --per-tensor``, the QAT row's export settings;
- ``Keras quantize("int8")``: Keras' own post-training int8 (``model.quantize("int8")``: int8
  per-output-channel weights, inputs quantised per row at run time) of the fp32 run's model,
  run by Keras (TensorFlow); latency is Keras' ``predict_on_batch`` at 1 x 128, not ONNX Runtime;
- ``QAT (Keras, fake quant)``: the QAT run's own dev accuracy (metrics.json: weights on the grid,
  inputs fake-quantised at their EMA ranges);
- ``QAT -> ORT int8 (per-tensor)``: ``ptmkit export --int8 --per-tensor`` of the QAT run.

Columns: dev accuracy (40 texts), agreement with the fp32 run's Keras predictions, ONNX size,
latency at batch 1 x 128 (ONNX Runtime, ``--threads``, sessions interleaved call by call, median
of ``--rounds`` medians of ``--calls`` calls), and the mean |logit difference| to the model the
row was made from (int8 ONNX vs the same run's Keras model), which QAT shrinks: its export
quantises the weights to the integers it trained with.

Run: ``python benchmarks/qat.py [--work DIR] [--out FILE.md]``; ``--quick``: a tiny pre-trained
BERT (one epoch) instead of MiniLM.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from head_pruning import DEV, LENGTH, TRAIN, latencies, ptmkit, session, teacher, write  # noqa: E402  (no package)


def dev_inputs(run: Path) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The dev texts encoded at length 128 through the run's tokenizer, and the gold ids."""
    from ptmkit.data.tokenization import encode_texts
    from ptmkit.plugins import get_registry
    from ptmkit.rundir import RunDir
    from ptmkit.training.finetune import load_labelled

    r = RunDir(run)
    family = get_registry().family(r.manifest()["family"])
    tokenizer = r.load_tokenizer()
    texts, _, gold = load_labelled(DEV, r.read_json("labels.json"))
    return encode_texts(tokenizer, texts, LENGTH, family.inputs, family.special_tokens(tokenizer).padding_id), gold


def onnx_logits(path: Path, x: dict[str, np.ndarray], threads: int) -> np.ndarray:
    s = session(path, threads)
    names = [i.name for i in s.get_inputs()]
    return np.concatenate([s.run(None, {n: x[n][i : i + 1] for n in names})[0] for i in range(len(next(iter(x.values()))))])


def keras_rows(run: Path, x: dict[str, np.ndarray], calls: int) -> dict[str, Any]:
    """The fp32 Keras logits of ``run``, then Keras' ``quantize("int8")`` of the same model: its
    logits and its median ``predict_on_batch`` seconds at 1 x 128 (or the error it raised)."""
    from ptmkit.training.finetune import load_classifier

    model, _, _, _ = load_classifier(run)
    fp32 = np.asarray(model.predict(x, batch_size=40, verbose=0))
    out: dict[str, Any] = {"fp32": fp32}
    try:
        model.quantize("int8")
        out["keras_int8"] = np.asarray(model.predict(x, batch_size=40, verbose=0))
        one = {k: v[:1] for k, v in x.items()}
        model.predict_on_batch(one)
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            model.predict_on_batch(one)
            times.append(time.perf_counter() - start)
        out["keras_int8_ms"] = statistics.median(times) * 1000
    except Exception as exc:  # noqa: BLE001  (reported in the table, not hidden)
        out["keras_int8_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/qat-bench"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from ptmkit.quickstart import MINILM_POLARITY
    from ptmkit_export.quantize import auto_reduce_range

    args.work.mkdir(parents=True, exist_ok=True)
    started, load_before = time.time(), Path("/proc/loadavg").read_text().split()[:3]
    reduce_range, _ = auto_reduce_range()
    range_flag = "--reduce-range" if reduce_range else "--no-reduce-range"
    fp32_run = teacher(args.work, args.quick)  # head_pruning's: work/base, then work/teacher
    qat_run = args.work / "qat"
    if not (qat_run / "manifest.json").exists():
        recipe = ["finetune.epochs=1", "finetune.sequence_length=32"] if args.quick else MINILM_POLARITY
        qat_keys = ["finetune.qat=true", f"finetune.qat_reduce_range={str(reduce_range).lower()}"]
        ptmkit("finetune", args.work / "base", "--train", TRAIN, "--dev", DEV, "--out", qat_run, *[a for item in [*recipe, *qat_keys] for a in ("--set", item)])
    exports = {"fp32": args.work / "export-fp32", "ptq-channel": args.work / "export-ptq-channel", "ptq-tensor": args.work / "export-ptq-tensor", "qat": args.work / "export-qat"}
    settings = {"fp32": [], "ptq-channel": ["--int8", range_flag], "ptq-tensor": ["--int8", "--per-tensor", range_flag], "qat": ["--int8", "--per-tensor", range_flag]}
    for name, directory in exports.items():
        if not (directory / "manifest.json").exists():
            ptmkit("export", qat_run if name == "qat" else fp32_run, "--out", directory, *settings[name])
    files = {"fp32": exports["fp32"] / "model.onnx", **{name: exports[name] / "model.int8.onnx" for name in ("ptq-channel", "ptq-tensor", "qat")}}
    latency = latencies(files, args.threads, args.rounds, args.calls, 600 if args.quick else 30000)
    x, gold = dev_inputs(fp32_run)
    keras = keras_rows(fp32_run, x, args.calls)
    keras_qat = keras_rows(qat_run, x, 0)["fp32"]  # the QAT run's saved model (grid weights, float inputs)
    reference = keras["fp32"].argmax(-1)
    qat_metrics = json.loads((qat_run / "metrics.json").read_text())

    def row(name: str, logits: np.ndarray | None, source: np.ndarray, file: Path | None, ms: float | None, accuracy: float | None = None) -> dict[str, Any]:
        predictions = logits.argmax(-1) if logits is not None else None
        return {
            "row": name,
            "dev acc": accuracy if accuracy is not None else float((predictions == gold).mean()),
            "agreement with fp32": float((predictions == reference).mean()) if predictions is not None else "-",
            "ONNX MB": file.stat().st_size / 1e6 if file else "-",
            "ms (1x128)": ms if ms is not None else "-",
            "mean abs logit diff to its Keras model": f"{np.mean(np.abs(logits - source)):.2e}" if logits is not None else "-",
        }

    rows = [
        row("fp32 fine-tune (fp32 ONNX)", onnx_logits(files["fp32"], x, args.threads), keras["fp32"], files["fp32"], latency["fp32"]),
        row("PTQ ORT int8, per-channel (export default)", onnx_logits(files["ptq-channel"], x, args.threads), keras["fp32"], files["ptq-channel"], latency["ptq-channel"]),
        row("PTQ ORT int8, per-tensor", onnx_logits(files["ptq-tensor"], x, args.threads), keras["fp32"], files["ptq-tensor"], latency["ptq-tensor"]),
    ]
    if "keras_int8" in keras:
        rows.append(row('Keras quantize("int8") (Keras latency)', keras["keras_int8"], keras["fp32"], None, keras["keras_int8_ms"]))
    else:
        rows.append({"row": f'Keras quantize("int8"): {keras["keras_int8_error"]}', **{k: "-" for k in rows[0] if k != "row"}})
    qat_row = row("QAT fine-tune (Keras, fake quant)", None, keras_qat, None, None, accuracy=qat_metrics["dev_accuracy"])
    rows.append(qat_row)
    rows.append(row("QAT -> ORT int8, per-tensor", onnx_logits(files["qat"], x, args.threads), keras_qat, files["qat"], latency["qat"]))
    rows.append(row("QAT saved model (Keras: grid weights, float inputs)", keras_qat, keras_qat, None, None))
    write(rows, args, load_before, time.time() - started, title=f"QAT (Q8BERT) vs post-training int8 ({range_flag})", script="qat.py")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    raise SystemExit(main())
