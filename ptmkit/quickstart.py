"""``ptmkit quickstart``: the main job end to end on the data shipped in ``data/``.

1. Pre-train a small BERT (4 layers, hidden 256) with masked LM on 106 Wikipedia articles.
2. Fine-tune it on WordNet supersenses (45 classes; 8,000 of the 20,000 shipped training glosses)
   and on sentence polarity (160 train / 40 dev sentences).
3. Export both to ONNX fp32 and int8, checked against Keras.
4. Predict a few texts through ONNX Runtime.

About ten minutes on two CPU cores. Prints where every artefact went and the measured numbers,
and writes them to ``OUT/summary.json``.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ptmkit.console import default_console
from ptmkit.errors import DataError
from ptmkit.io import atomic_write_json

PRETRAIN_STEPS = 300
SUPERSENSE_EXAMPLES = 8000


def default_data_dir() -> Path:
    """The repository's ``data/`` (beside the ``ptmkit`` package in a source checkout), else ``./data``."""
    here = Path(__file__).resolve().parent.parent / "data"
    return here if here.is_dir() else Path("data")


def run_quickstart(out: Path, data: Path | None = None, console: Console | None = None, pretrain_steps: int = PRETRAIN_STEPS) -> dict[str, Any]:
    """Run the quickstart; return the summary it prints and writes to ``OUT/summary.json``.

    Finished stages are kept: running it again resumes where it stopped.

    Raises:
        DataError: the data directory lacks a file the quickstart needs.
    """
    from ptmkit.exporting import export_run
    from ptmkit.training.finetune import finetune
    from ptmkit.training.pretrain import pretrain

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
    started = time.perf_counter()
    summary: dict[str, Any] = {"data": str(data.resolve()), "runs": {}}

    pretrain_dir = out / "pretrain"
    console.rule("1/4 pre-training BERT (masked LM) on Wikipedia paragraphs")
    if (pretrain_dir / "manifest.json").exists():
        console.print(f"{pretrain_dir}: already pre-trained, reusing it")
        metrics = json.loads((pretrain_dir / "metrics.json").read_text())
    else:
        metrics = pretrain(
            "bert",
            files["corpus"],
            pretrain_dir,
            overrides=[f"train.max_steps={pretrain_steps}", "train.checkpoint_every=50", "train.learning_rate=1e-3"],
            resume=(pretrain_dir / "config.toml").exists(),
            console=console,
        )
    summary["runs"]["pretrain"] = {"dir": str(pretrain_dir), **metrics}

    # Five minutes of pre-training leave a weak encoder: fine-tuning it wants a larger learning
    # rate than a fully pre-trained checkpoint does (the [finetune] default, 5e-5).
    tasks = {
        "supersense": (
            files["supersense_train"],
            files["supersense_dev"],
            [f"finetune.max_train_examples={SUPERSENSE_EXAMPLES}", "finetune.epochs=3", "finetune.sequence_length=32", "finetune.learning_rate=5e-4"],
        ),
        "polarity": (
            files["polarity_train"],
            files["polarity_dev"],
            ["finetune.epochs=5", "finetune.sequence_length=64", "finetune.batch_size=16", "finetune.learning_rate=5e-4"],
        ),
    }
    for step, (name, (train_file, dev_file, overrides)) in enumerate(tasks.items(), 2):
        run_dir = out / name
        console.rule(f"{step}/4 fine-tuning on {name}, then ONNX export (fp32 + int8)")
        if (run_dir / "export" / "manifest.json").exists():
            console.print(f"{run_dir}: already fine-tuned and exported, reusing it")
            export_manifest = json.loads((run_dir / "export" / "manifest.json").read_text())
            ft_metrics = json.loads((run_dir / "metrics.json").read_text())
        else:
            if (run_dir / "manifest.json").exists():
                ft_metrics = json.loads((run_dir / "metrics.json").read_text())
            else:
                shutil.rmtree(run_dir, ignore_errors=True)  # an interrupted fine-tune restarts
                ft_metrics = finetune(pretrain_dir, train_file, dev_file, run_dir, overrides=overrides, console=console)
            export_manifest = export_run(run_dir, int8=True, console=console)
        variants = export_manifest["variants"]
        summary["runs"][name] = {
            "dir": str(run_dir),
            "export_dir": str(run_dir / "export"),
            **ft_metrics,
            "onnx_parity_max_abs_diff": max(variants["fp32"]["parity_max_abs_diff"].values()),
            "fp32_dev_accuracy": variants["fp32"].get("dev_accuracy"),
            "int8_dev_accuracy": variants["int8"].get("dev_accuracy"),
            "int8_agreement_with_fp32": variants["int8"].get("dev_agreement_with_fp32"),
            "fp32_latency_ms_b1x128": variants["fp32"]["latency_ms_b1x128"],
            "int8_latency_ms_b1x128": variants["int8"]["latency_ms_b1x128"],
            "int8_ok": variants["int8"]["ok"],
        }

    console.rule("4/4 predicting with ONNX Runtime (no TensorFlow on this path)")
    from ptmkit_export import Predictor

    examples = {
        "supersense": ["a large carnivorous feline of Africa and Asia", "move quickly on foot", "having a pleasant taste"],
        "polarity": ["a gorgeous , witty , seductive movie .", "dull , plodding and utterly forgettable ."],
    }
    summary["predictions"] = {}
    for name, texts in examples.items():
        predictor = Predictor(out / name / "export")
        predictions = predictor.predict(texts)
        summary["predictions"][name] = [{"text": t, "label": p.label, "variant": predictor.variant} for t, p in zip(texts, predictions, strict=True)]
        for text, prediction in zip(texts, predictions, strict=True):
            console.print(f"  [{name}, {predictor.variant}] {text!r} -> {prediction.label} ({max(prediction.probabilities.values()):.2f})")
    summary["seconds"] = round(time.perf_counter() - started, 1)
    atomic_write_json(out / "summary.json", summary)
    _print_summary(summary, out, console)
    return summary


def _print_summary(summary: dict[str, Any], out: Path, console: Console) -> None:
    pre = summary["runs"]["pretrain"]
    console.rule("summary")
    console.print(
        f"pre-training: {pre['steps']} steps, held-out masked-LM accuracy {pre.get('heldout_mlm_accuracy')}, "
        f"perplexity {pre.get('heldout_mlm_perplexity')}, {pre.get('tokens_per_second')} tokens/s -> {pre['dir']}"
    )
    table = Table(title="fine-tuning and export (dev set)")
    for column in ("task", "dev acc (Keras)", "macro-F1", "dev acc fp32 ONNX", "dev acc int8", "int8 agree", "ONNX parity", "fp32 ms", "int8 ms", "int8 ok"):
        table.add_column(column)
    for name in ("supersense", "polarity"):
        r = summary["runs"][name]
        table.add_row(
            name,
            f"{r['dev_accuracy']:.3f}",
            f"{r['dev_macro_f1']:.3f}",
            f"{r['fp32_dev_accuracy']:.3f}",
            f"{r['int8_dev_accuracy']:.3f}",
            f"{r['int8_agreement_with_fp32']:.3f}",
            f"{r['onnx_parity_max_abs_diff']:.1e}",
            f"{r['fp32_latency_ms_b1x128']:.2f}",
            f"{r['int8_latency_ms_b1x128']:.2f}",
            str(r["int8_ok"]),
        )
    console.print(table)
    console.print(f"artefacts under {out}/; numbers in {out / 'summary.json'}; total {summary['seconds']:.0f}s")
    console.print(f"next: ptmkit predict {out / 'polarity' / 'export'} --text \"your sentence\"")
