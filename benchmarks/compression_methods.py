"""Module replacement (BERT-of-Theseus) and cross-layer sharing of a fine-tuned all-MiniLM-L6-v2:
size, int8 latency and dev accuracy against the teacher.

Steps: the teacher of ``benchmarks/head_pruning.py`` (MiniLM imported, fine-tuned on the shipped
polarity data with the quickstart's recipe); ``ptmkit compress TEACHER --theseus-layers 3`` (6 ->
3 blocks, trained on the teacher's training file with its recipe, ``p_t = min(1, k t + 0.3)``
reaching 1 at half the steps); ``ptmkit compress TEACHER --share-layers all|attention|ffn`` (mean
init) and ``all`` with ``--share-init first``, not fine-tuned again; ``ptmkit export --int8`` of
each. Rows: parameters, ONNX fp32 and int8 bytes, int8 latency at batch 1 x 128 (the sessions
interleaved call by call, as ``head_pruning.py`` times them), dev accuracy of the int8 model and
its agreement with the teacher's int8 predictions.

Run: ``python benchmarks/compression_methods.py [--work DIR] [--out FILE.md]``; ``--quick``: a
tiny pre-trained BERT of two blocks instead of MiniLM (theseus 2 -> 1), and one sharing row
(``all``, mean init: every row runs the same steps; each mode's parameters and outputs are tested
in ``tests/test_compress_theseus.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import head_pruning as hp  # noqa: E402  # the teacher, the timing and the dev predictions of the head-pruning table

REPO = hp.REPO


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/compression-methods"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    started, load_before = time.time(), Path("/proc/loadavg").read_text().split()[:3]
    ft = hp.teacher(args.work, args.quick)
    runs: dict[str, tuple[Path, list[str]]] = {"teacher": (ft, [])}
    theseus = "1" if args.quick else "3"
    runs[f"theseus {theseus} blocks"] = (args.work / "theseus", ["--theseus-layers", theseus])
    for sublayers in ("all",) if args.quick else ("all", "attention", "ffn"):
        runs[f"shared {sublayers} (mean)"] = (args.work / f"share-{sublayers}", ["--share-layers", sublayers])
    if not args.quick:
        runs["shared all (first)"] = (args.work / "share-all-first", ["--share-layers", "all", "--share-init", "first"])
    for run, options in runs.values():
        if options and not (run / "manifest.json").exists():
            hp.ptmkit("compress", ft, "--out", run, *options)
        if not (run / "export" / "model.int8.onnx").exists():
            hp.ptmkit("export", run, "--int8")
    exports = {name: run / "export" / "model.int8.onnx" for name, (run, _) in runs.items()}
    latency = hp.latencies(exports, args.threads, args.rounds, args.calls, 600 if args.quick else 30000)
    teacher_predictions, gold = hp.dev_predictions(ft, exports["teacher"], args.threads)
    rows = []
    for name, (run, _) in runs.items():
        manifest = json.loads((run / "manifest.json").read_text())
        predictions, _ = hp.dev_predictions(run, exports[name], args.threads)
        metrics = json.loads((run / "metrics.json").read_text()) if (run / "metrics.json").exists() else {}
        rows.append({
            "row": name,
            "parameters": manifest.get("parameters", {}).get("after") or json.loads((args.work / "share-all" / "manifest.json").read_text())["parameters"]["before"],
            "fp32 MB": (run / "export" / "model.onnx").stat().st_size / 1e6,
            "int8 MB": exports[name].stat().st_size / 1e6,
            "int8 ms (1x128)": latency[name],
            "dev acc (int8)": float((predictions == gold).mean()),
            "agreement with teacher": float((predictions == teacher_predictions).mean()),
            "train s": metrics.get("train_seconds", "-") if name.startswith("theseus") else "-",
        })
    hp.write(rows, args, load_before, time.time() - started,
             title="Module replacement and cross-layer sharing: size, int8 latency, accuracy", script="compression_methods.py")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    raise SystemExit(main())
