"""ULMFiT's ablation in small (Howard and Ruder 2018, tables 4 and 5) on WordNet supersenses.

The same AWD-LSTM and the same classifier budget, with each LM stage on and off:

* ``random``: no LM at all (the backbone's random initialisation) -> classifier;
* ``no_pretraining``: no general-domain LM; an LM trained from scratch on the task's own texts
  (the budget of stage 2) -> classifier (the paper's "without pretraining", table 4);
* ``no_target_lm``: the general-domain LM on ``data/corpus/enwiki-106.txt`` -> classifier (table
  5's "no LM fine-tuning");
* ``full``: general-domain LM -> target-LM fine-tuning on the task's texts (``ptmkit train ulmfit
  --init``) -> classifier;
* ``full_plain_finetune``: as ``full``, with the classifier's discriminative rates, slanted
  triangular schedule and gradual unfreezing switched off (one rate, linear warm-up and decay,
  every layer from the start);
* ``full_no_unfreezing``: as ``full``, with gradual unfreezing alone switched off (discriminative
  rates and the slanted triangular schedule kept): which of the three switches the budget feels.

Classifiers: ``ptmkit finetune`` with the family's recipe (lr / 2.6 per layer, STLR cut_frac 0.1
ratio 32, gradual unfreezing), on ``data/classify/wordnet-supersense-train-20k.tsv`` (its first
``--train-examples`` rows), model selection none: the last epoch's dev and test accuracy. The task's
texts for stage 2 are the training split's (labels dropped). Everything runs in this process
through the core's ``pretrain`` and ``finetune``.

Run::

    python benchmarks/ulmfit_supersense.py --out benchmarks/results/ulmfit_supersense.md   # ~20-40 min on 2 cores
    python benchmarks/ulmfit_supersense.py --quick                                         # a smoke test, minutes
    python benchmarks/ulmfit_supersense.py --quick --rows no_target_lm,full                # some rows (and the LMs they need)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO, REPO / "plugins", REPO / "export"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
CORPUS = REPO / "data" / "corpus" / "enwiki-106.txt"
CLASSIFY = REPO / "data" / "classify"
SPLITS = {"train": "wordnet-supersense-train-20k.tsv", "dev": "wordnet-supersense-dev.tsv", "test": "wordnet-supersense-test.tsv"}

FULL = {
    "model": ["model.vocabulary_size=12000", "model.embedding_dim=64", "model.hidden_dim=192", "model.num_layers=2", "model.lowercase=true"],
    "general": ["train.max_steps=400", "train.batch_size=32", "train.sequence_length=48", "train.learning_rate=3e-3", "train.schedule=slanted_triangular",
                "train.checkpoint_every=200", "train.heldout_lines=200"],
    "target": ["train.max_steps=150", "train.batch_size=32", "train.sequence_length=48", "train.learning_rate=2e-3", "train.schedule=slanted_triangular",
               "train.checkpoint_every=150", "train.heldout_lines=200"],
    "finetune": ["finetune.epochs=4", "finetune.batch_size=32", "finetune.sequence_length=32", "finetune.learning_rate=5e-3"],
    "sizes": {"train": 8000, "dev": 5000, "test": 5000, "corpus": 0},
}
QUICK = {
    "model": ["model.vocabulary_size=800", "model.embedding_dim=8", "model.hidden_dim=12", "model.num_layers=2", "model.lowercase=true"],
    "general": ["train.max_steps=3", "train.batch_size=8", "train.sequence_length=24", "train.heldout_lines=10", "train.schedule=slanted_triangular"],
    "target": ["train.max_steps=2", "train.batch_size=8", "train.sequence_length=24", "train.heldout_lines=10", "train.schedule=slanted_triangular"],
    "finetune": ["finetune.epochs=1", "finetune.batch_size=32", "finetune.sequence_length=16"],
    "sizes": {"train": 300, "dev": 100, "test": 100, "corpus": 150},
}
#: The LM run each row's classifier starts from.
SOURCES = {"random": "random", "no_pretraining": "scratch", "no_target_lm": "general", "full": "target", "full_plain_finetune": "target",
           "full_no_unfreezing": "target"}
#: What a row switches off of the family's fine-tuning recipe.
SWITCHED_OFF = {
    "full_plain_finetune": ["finetune.layer_lr_decay=1.0", "finetune.schedule=linear", "finetune.gradual_unfreezing=false"],
    "full_no_unfreezing": ["finetune.gradual_unfreezing=false"],
}
ROWS = {
    "random": "no LM: random initialisation -> classifier",
    "no_pretraining": "no general-domain LM: LM from scratch on the task's texts -> classifier",
    "no_target_lm": "general-domain LM -> classifier (no target-LM fine-tuning)",
    "full": "general-domain LM -> target-LM fine-tuning -> classifier",
    "full_plain_finetune": "full, classifier without discriminative rates / STLR / gradual unfreezing",
    "full_no_unfreezing": "full, classifier without gradual unfreezing (discriminative rates and STLR kept)",
}


def prepare_data(work: Path, sizes: dict[str, int]) -> dict[str, Path]:
    """The corpus (its first ``sizes["corpus"]`` lines; 0: all) and the splits (their first rows;
    dev and test keep the labels the training rows have), and ``texts``: the training split's texts."""
    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    files = {"corpus": CORPUS}
    if sizes["corpus"]:
        files["corpus"] = data / "corpus.txt"
        files["corpus"].write_text("".join(CORPUS.read_text(encoding="utf-8").splitlines(keepends=True)[: sizes["corpus"]]), encoding="utf-8")
    labels: set[str] = set()
    for name, file in SPLITS.items():
        header, *rows = (CLASSIFY / file).read_text(encoding="utf-8").splitlines(keepends=True)
        if name != "train":
            rows = [row for row in rows if row.split("\t", 1)[0] in labels]
        rows = rows[: sizes[name]]
        if name == "train":
            labels = {row.split("\t", 1)[0] for row in rows}
            (data / "texts.txt").write_text("".join(row.split("\t", 1)[1] for row in rows), encoding="utf-8")
        files[name] = data / file
        files[name].write_text(header + "".join(rows), encoding="utf-8")
    files["texts"] = data / "texts.txt"
    return files


def registry_with_ulmfit() -> Any:
    """The plugin registry, with this checkout's ``ptmkit_ulmfit`` registered if the installed
    metadata lacks it (``PTMKIT_PLUGINS``)."""
    from ptmkit.plugins import get_registry

    if "ulmfit" not in get_registry().families:
        os.environ["PTMKIT_PLUGINS"] = ",".join(filter(None, [os.environ.get("PTMKIT_PLUGINS"), "ptmkit_ulmfit"]))
        get_registry.cache_clear()
    return get_registry()


def language_models(files: dict[str, Path], work: Path, plan: dict[str, Any], rows: list[str]) -> dict[str, dict[str, Any]]:
    """Those of stage 1 (general), stage 2 (target, ``--init general``), the LM from scratch on the
    task's texts and a random (0 learning rate, 1 step) backbone that ``rows`` need (``general``
    always): ``{name: {"run", "metrics", "seconds"}}``."""
    from ptmkit.training.pretrain import pretrain

    model = plan["model"]
    jobs = {
        "general": (files["corpus"], [*model, *plan["general"]], {}),
        "target": (files["texts"], plan["target"], {"init": work / "general"}),
        "scratch": (files["texts"], [*model, *plan["target"]], {}),
        "random": (files["texts"], [*model, *plan["target"], "train.max_steps=1", "train.learning_rate=0.0"], {"tokenizer": work / "general" / "tokenizer.json"}),
    }
    needed = {"general", *(SOURCES[row] for row in rows)}
    out = {}
    for name, (corpus, overrides, extra) in jobs.items():
        if name not in needed:
            continue
        run = work / name
        if not (run / "manifest.json").exists():
            shutil.rmtree(run, ignore_errors=True)
            started = time.perf_counter()
            pretrain("ulmfit", corpus, run, overrides=overrides, **extra)
            (run / "bench_seconds.txt").write_text(f"{time.perf_counter() - started:.1f}")
        out[name] = {"run": run, "metrics": json.loads((run / "metrics.json").read_text()), "seconds": float((run / "bench_seconds.txt").read_text())}
    return out


def classifiers(files: dict[str, Path], work: Path, plan: dict[str, Any], names: list[str]) -> dict[str, dict[str, Any]]:
    """The classifier of each row of ``names`` (cached as ``WORK/NAME-clf/metrics.json``)."""
    from ptmkit.training.finetune import finetune

    rows = {}
    for row in names:
        source = SOURCES[row]
        out = work / f"{row}-clf"
        if not (out / "manifest.json").exists():
            shutil.rmtree(out, ignore_errors=True)
            overrides = [*plan["finetune"], *SWITCHED_OFF.get(row, [])]
            started = time.perf_counter()
            finetune(work / source, files["train"], files["dev"], out, overrides=overrides, test_file=files["test"])
            (out / "bench_seconds.txt").write_text(f"{time.perf_counter() - started:.1f}")
        metrics = json.loads((out / "metrics.json").read_text())
        rows[row] = {**metrics, "seconds": float((out / "bench_seconds.txt").read_text()), "source": source}
        print(f"{row}: dev {metrics['dev_accuracy']:.4f} test {metrics.get('test_accuracy', float('nan')):.4f}", flush=True)
    return rows


def page(lms: dict[str, dict[str, Any]], rows: dict[str, dict[str, Any]], plan: dict[str, Any], quick: bool, command: str) -> str:
    """The results page: the LM stages' perplexities, the ablation table, and how it was run."""
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    first = next(iter(rows.values()))
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else ["?"]
    lines = [
        "# ULMFiT ablation on WordNet supersense (`benchmarks/ulmfit_supersense.py`)",
        "",
        *(["**`--quick`: tiny models, a smoke test; the numbers say nothing about ULMFiT.**", ""] if quick else []),
        f"Run: {datetime.date.today()}, commit {commit}, load average {' '.join(load)} at the end (2 cores shared with other sessions: seconds are not timings).",
        f"Command: `{command}`.",
        f"Model: {' '.join(plan['model'])}. Stage 1: {' '.join(plan['general'])}. Stage 2 (and the LM from scratch): {' '.join(plan['target'])}.",
        f"Classifiers: {' '.join(plan['finetune'])} with the family's recipe (lr / 2.6 per layer, STLR, gradual unfreezing); "
        f"{first['train_examples']:,} training / {first['dev_examples']:,} dev glosses, {first['labels']} labels.",
        "",
        "| LM | corpus | steps | held-out word perplexity | unigram | seconds |",
        "|---|---|---|---|---|---|",
    ]
    for name in [n for n in ("general", "target", "scratch") if n in lms]:
        m = lms[name]["metrics"]
        lines.append(f"| {name} | {Path(json.loads((lms[name]['run'] / 'manifest.json').read_text())['corpus']).name} | {m['steps']} | "
                     f"{m.get('heldout_word_perplexity', float('nan')):.1f} | {m.get('heldout_unigram_word_perplexity', float('nan')):.1f} | {lms[name]['seconds']:.0f} |")
    lines += ["", "| row | stages | dev acc | test acc | dev macro-F1 | fine-tune s |", "|---|---|---|---|---|---|"]
    for row, r in rows.items():
        description = ROWS[row]
        lines.append(f"| {row} | {description} | {r['dev_accuracy']:.4f} | {r.get('test_accuracy', float('nan')):.4f} | {r['dev_macro_f1']:.4f} | {r['seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny models on a few hundred rows: a smoke test")
    parser.add_argument("--work", type=Path, default=Path("/tmp/ptmkit-ulmfit-supersense"), help="runs (cached: a second run resumes)")
    parser.add_argument("--out", type=Path, default=None, help="write the results page here")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated rows of {', '.join(ROWS)} (default: all)")
    args = parser.parse_args(argv)
    names = [row.strip() for row in args.rows.split(",") if row.strip()]
    unknown = [row for row in names if row not in ROWS]
    if unknown or not names:
        parser.error(f"--rows: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(ROWS)}")
    plan = QUICK if args.quick else FULL
    work = args.work / ("quick" if args.quick else "full")
    registry_with_ulmfit()
    files = prepare_data(work, plan["sizes"])
    lms = language_models(files, work, plan, names)
    rows = classifiers(files, work, plan, names)
    command = "python benchmarks/ulmfit_supersense.py" + (" --quick" if args.quick else "") + (f" --rows {args.rows}" if names != list(ROWS) else "")
    command += f" --out {args.out}" if args.out else ""
    text = page(lms, rows, plan, args.quick, command)
    (work / "results.json").write_text(json.dumps({"rows": rows, "lms": {k: v["metrics"] for k, v in lms.items()}}, indent=1, default=str))
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
