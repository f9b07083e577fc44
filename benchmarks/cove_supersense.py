"""CoVe on WordNet supersenses, the comparison of McCann et al. 2017 (table 2) in small: GloVe
alone, GloVe + CoVe, and GloVe + a random-init CoVe, each read by the same classifier with the
same budget.

Stages (``--work`` keeps each stage's output; a stage whose output is there is not run again):

1. ``glove``: ``ptmkit train glove`` (100 dimensions, lower-cased, 10 epochs, min count 2) on
   ``data/corpus/enwiki-106.txt``, the English side of the training pairs and the supersense
   training glosses (texts only); or ``--glove PATH`` (a run or a GloVe text file).
2. ``cove``: ``ptmkit train cove`` on ``data/parallel/en-de-train-10k.tsv`` (dev: ``en-de-dev.tsv``)
   with the family's defaults and ``model.lowercase = true``; or ``--cove RUN``.
3. ``classify``: for each arm, the encoder frozen inside a Keras model whose head is a biLSTM
   (``--head-dim`` units a direction) over the arm's token features, max-pooled over the words,
   dropout 0.2 and a dense softmax over the 45 supersenses: Adam 1e-3, batch 64, ``--epochs``
   epochs over the first ``--train-rows`` training glosses (each cut to 32 words; the budget
   fits two shared CPU cores), scored on the 5,000 dev and 5,000 test glosses, the same seed for each arm;
   the test accuracy is taken at the epoch of best dev accuracy. The arms' token features:

   - ``glove``: GloVe(w) (the backbone's ``glove_output``);
   - ``glove+cove``: [GloVe(w); CoVe(w)] (``sequence_output``), CoVe trained on translation;
   - ``glove+random-cove``: the same with the biLSTM at its initialisation (same config and seed
     as the trained run, the same GloVe table).

Run: ``python benchmarks/cove_supersense.py`` (about 15 minutes on two shared CPU cores; 22 with
``--cove-steps 1600``, the measured run), writes
``benchmarks/results/cove_supersense.md``; ``--quick`` runs every stage on 64 training and 32 dev and test glosses
with tiny models, and writes nothing under ``benchmarks/results`` unless ``--out`` says so.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data"
TRAIN, DEV, TEST = (DATA / "classify" / f"wordnet-supersense-{split}.tsv" for split in ("train-20k", "dev", "test"))
PAIRS, DEV_PAIRS = DATA / "parallel" / "en-de-train-10k.tsv", DATA / "parallel" / "en-de-dev.tsv"
ARMS = ("glove", "glove+cove", "glove+random-cove")
LENGTH, BATCH, SEED = 32, 64, 7


def read_tsv(path: Path, limit: int | None = None) -> tuple[list[str], list[str]]:
    """``(texts, labels)`` of a ``label<TAB>text`` file with a header."""
    texts, labels = [], []
    with open(path, encoding="utf-8") as handle:
        next(handle)
        for line in handle:
            label, text = line.rstrip("\n").split("\t", 1)
            labels.append(label)
            texts.append(text)
            if limit is not None and len(texts) == limit:
                break
    return texts, labels


def with_cove_plugin(env: dict[str, str]) -> dict[str, str]:
    """``env`` with ``ptmkit_cove`` in ``PTMKIT_PLUGINS`` (for an install whose metadata predates
    the plugin; an entry point that already registers it is not doubled)."""
    names = [n for n in env.get("PTMKIT_PLUGINS", "").split(",") if n]
    return {**env, "PTMKIT_PLUGINS": ",".join(names if "ptmkit_cove" in names else [*names, "ptmkit_cove"])}


def ptmkit(*args: str) -> None:
    """``ptmkit ARGS`` in a child process, this checkout's packages (and the cove plugin) first."""
    env = with_cove_plugin(dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "plugins"), str(REPO / "export"), os.environ.get("PYTHONPATH", "")])))
    print("$ ptmkit " + shlex.join(args), flush=True)
    subprocess.run([sys.executable, "-m", "ptmkit.cli", *args], check=True, env=env)


def train_glove(work: Path, quick: bool) -> Path:
    """Stage 1 (module docstring): the GloVe run's directory."""
    run = work / "glove"
    if (run / "manifest.json").exists():
        return run
    corpus = work / "glove-corpus.txt"
    english = [line.split("\t")[0] for line in PAIRS.read_text(encoding="utf-8").splitlines()[1:]]
    lines = [*DATA.joinpath("corpus", "enwiki-106.txt").read_text(encoding="utf-8").splitlines(), *english, *read_tsv(TRAIN)[0]]
    corpus.write_text("\n".join(lines[:3000] if quick else lines) + "\n", encoding="utf-8")
    size, epochs = ("16", "2") if quick else ("100", "10")
    ptmkit("train", "glove", "--corpus", str(corpus), "--out", str(run), "--set", f"model.vector_size={size}", "--set", f"model.epochs={epochs}",
           "--set", "model.min_count=2", "--set", "model.lowercase=true")
    return run


def glove_dim(glove: Path) -> int:
    """The dimension of a GloVe run or text file."""
    if glove.is_dir():
        return int(np.load(glove / "vectors.npy", mmap_mode="r").shape[1])
    with open(glove, encoding="utf-8") as handle:
        first = handle.readline().split()
        return int(first[1]) if len(first) == 2 else len(first) - 1


def train_cove(work: Path, glove: Path, quick: bool, steps: int | None = None) -> Path:
    """Stage 2 (module docstring): the CoVe run's directory (``steps``: ``model.max_steps``, else the family's default)."""
    run = work / "cove"
    if (run / "manifest.json").exists():
        return run
    sets = [f"model.glove={glove}", f"model.glove_dim={glove_dim(glove)}", "model.lowercase=true", *([f"model.max_steps={steps}"] if steps else [])]
    if quick:
        sets += ["model.hidden_dim=8", "model.decoder_dim=16", "model.max_steps=20", "model.target_vocabulary_size=500"]
    args = ["train", "cove", "--parallel", str(PAIRS), "--dev", str(DEV_PAIRS), "--out", str(run)]
    for item in sets:
        args += ["--set", item]
    ptmkit(*args)
    return run


def encoders(run: Path) -> dict[str, tuple[Any, str]]:
    """``{arm: (frozen backbone, output name)}``: the trained run's backbone, and one built from
    the same config and seed with the same GloVe table but untrained LSTMs."""
    import keras

    from ptmkit.plugins import get_registry
    from ptmkit.rundir import RunDir
    from ptmkit.training.finetune import load_backbone

    registry = get_registry()
    trained, config, _, _ = load_backbone(registry, RunDir(run))
    keras.utils.set_random_seed(config.model.seed)
    random_init = registry.family("cove").build_backbone(config.model)
    random_init.get_layer("glove").set_weights(trained.get_layer("glove").get_weights())
    for backbone in (trained, random_init):
        backbone.trainable = False
    return {"glove": (trained, "glove_output"), "glove+cove": (trained, "sequence_output"), "glove+random-cove": (random_init, "sequence_output")}


def encode(tokenizer: Any, texts: list[str]) -> dict[str, np.ndarray]:
    """``token_ids`` and ``padding_mask``, ``(len(texts), LENGTH)`` int32, each gloss cut to ``LENGTH`` words."""
    ids = np.zeros((len(texts), LENGTH), np.int32)
    for row, encoding in enumerate(tokenizer.encode_batch(texts, add_special_tokens=False)):
        kept = encoding.ids[:LENGTH]
        ids[row, : len(kept)] = kept
    mask = np.zeros_like(ids)
    for row, text in enumerate(texts):
        mask[row, : min(len(text.split()), LENGTH)] = 1
    return {"token_ids": ids, "padding_mask": mask}


def classifier(backbone: Any, output: str, labels: int, head_dim: int, eager: bool = False) -> Any:
    """The arm's model: frozen ``backbone``'s ``output`` -> biLSTM -> max over words -> dropout ->
    softmax (``eager``: not traced, for ``--quick``'s single batch)."""
    import keras
    from keras import ops

    inputs = {name: keras.Input((LENGTH,), dtype="int32", name=name) for name in ("token_ids", "padding_mask")}
    features = backbone(inputs, training=False)[output]
    mask = ops.not_equal(inputs["padding_mask"], 0)
    states = keras.layers.Bidirectional(keras.layers.LSTM(head_dim, return_sequences=True), name="head_bilstm")(features, mask=mask)
    states = states + (1.0 - ops.cast(ops.expand_dims(mask, -1), states.dtype)) * -1e4  # padding never wins the max
    pooled = ops.max(states, axis=1)
    logits = keras.layers.Dense(labels, name="logits")(keras.layers.Dropout(0.2)(pooled))
    model = keras.Model(inputs, logits)
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"], run_eagerly=eager)
    return model


def run_arm(model: Any, data: dict[str, tuple[dict[str, np.ndarray], np.ndarray]], epochs: int) -> dict[str, Any]:
    """Train ``epochs`` epochs; the dev accuracy of each and the test accuracy at the best one."""
    started, best, curve = time.perf_counter(), (-1.0, 0.0, 0), []
    x, y = data["train"]
    for epoch in range(1, epochs + 1):
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=True, verbose=0)
        dev = float(np.mean(np.argmax(model.predict(data["dev"][0], batch_size=256, verbose=0), -1) == data["dev"][1]))
        curve.append(round(dev, 4))
        if dev > best[0]:
            test = float(np.mean(np.argmax(model.predict(data["test"][0], batch_size=256, verbose=0), -1) == data["test"][1]))
            best = (dev, test, epoch)
        print(f"  epoch {epoch}: dev {dev:.4f}", flush=True)
    return {"dev_accuracy": round(best[0], 4), "test_accuracy": round(best[1], 4), "best_epoch": best[2], "dev_curve": curve, "seconds": round(time.perf_counter() - started, 1)}


def classify(run: Path, work: Path, sizes: tuple[int | None, int | None], epochs: int, head_dim: int) -> dict[str, Any]:
    """Stage 3 (module docstring): ``{arm: row}``, each row cached in ``work/rows``."""
    import keras

    from ptmkit.rundir import RunDir

    tokenizer = RunDir(run).load_tokenizer()
    splits = {"train": read_tsv(TRAIN, sizes[0]), "dev": read_tsv(DEV, sizes[1]), "test": read_tsv(TEST, sizes[1])}
    names = sorted(set(splits["train"][1]))
    index = {name: i for i, name in enumerate(names)}
    data = {split: (encode(tokenizer, texts), np.asarray([index.get(label, -1) for label in labels])) for split, (texts, labels) in splits.items()}
    words = [w for text in splits["train"][0] for w in tokenizer.encode(text, add_special_tokens=False).ids[:LENGTH]]
    coverage = 1.0 - float(np.mean(np.asarray(words) == 1))
    rows, models = {}, encoders(run)
    for arm in ARMS:
        cached = work / "rows" / f"{arm}.json"
        if cached.exists():
            rows[arm] = json.loads(cached.read_text())
            print(f"{arm}: cached", flush=True)
            continue
        print(f"{arm}:", flush=True)
        keras.utils.set_random_seed(SEED)
        backbone, output = models[arm]
        model = classifier(backbone, output, len(names), head_dim, eager=sizes[1] is not None)
        row = {"features": int(backbone.output[output].shape[-1]), **run_arm(model, data, epochs), "train": len(data["train"][1]), "dev": len(data["dev"][1])}
        row["glove_coverage"] = round(coverage, 4)
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(row))
        rows[arm] = row
    return rows


def report(rows: dict[str, Any], cove_metrics: dict[str, Any], args: argparse.Namespace, argv: list[str]) -> str:
    """The results page (markdown)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip() or "?"
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "?"
    lines = [
        "# CoVe on WordNet supersenses: GloVe, GloVe + CoVe, GloVe + random-init CoVe", "",
        f"Date: {time.strftime('%Y-%m-%d', time.gmtime())}. Commit: {commit}. Load average at the end: {load} (2 CPU cores, shared).", "",
        "```bash", "python benchmarks/cove_supersense.py " + shlex.join(argv), "```", "",
        f"CoVe run: {cove_metrics.get('steps')} steps of {cove_metrics.get('train_pairs')} en-de pairs in {cove_metrics.get('train_seconds')} s; "
        f"dev loss {cove_metrics.get('dev_loss_before')} -> {cove_metrics.get('dev_loss')} nats per target word; "
        f"GloVe: {cove_metrics.get('glove_words')} words, {cove_metrics.get('glove_dim')} dimensions. "
        f"Gloss words with a GloVe vector: {next(iter(rows.values()))['glove_coverage']:.1%}.", "",
        f"Classifier (the same for each arm): biLSTM of {args.head_dim} units a direction over the frozen token features, max over words, "
        f"dropout 0.2, softmax; Adam 1e-3, batch {BATCH}, {args.epochs} epoch(s), seed {SEED}; test at the best dev epoch.", "",
        "| features | dim | dev accuracy | test accuracy | best epoch | dev by epoch | seconds |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    for arm in ARMS:
        row = rows[arm]
        lines.append(f"| {arm} | {row['features']} | {row['dev_accuracy']:.4f} | {row['test_accuracy']:.4f} | {row['best_epoch']} | {', '.join(f'{v:.3f}' for v in row['dev_curve'])} | {row['seconds']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny models on a few hundred glosses (a smoke test)")
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "cove_supersense")
    parser.add_argument("--glove", type=Path, help="a GloVe run or text file (default: train one, stage 1)")
    parser.add_argument("--cove", type=Path, help="a CoVe run (default: train one, stage 2)")
    parser.add_argument("--cove-steps", type=int, default=None, help="translation steps of stage 2 (default: the family's model.max_steps)")
    parser.add_argument("--epochs", type=int, default=None, help="classifier epochs (default 2; --quick: 1)")
    parser.add_argument("--train-rows", type=int, default=10000, help="the first N training glosses each arm trains on (default 10,000 of 20,000)")
    parser.add_argument("--head-dim", type=int, default=None, help="classifier biLSTM units a direction (default 64; --quick: 8)")
    parser.add_argument("--out", type=Path, default=None, help="results page (default benchmarks/results/cove_supersense.md; --quick: none)")
    args = parser.parse_args(argv)
    os.environ.update(with_cove_plugin(dict(os.environ)))  # before the registry is first read
    args.epochs = args.epochs or (1 if args.quick else 2)
    args.head_dim = args.head_dim or (8 if args.quick else 64)
    args.work.mkdir(parents=True, exist_ok=True)
    run = args.cove or train_cove(args.work, args.glove or train_glove(args.work, args.quick), args.quick, args.cove_steps)
    from ptmkit.training.setup import quiet_tensorflow

    quiet_tensorflow()
    rows = classify(run, args.work, (64, 32) if args.quick else (args.train_rows, None), args.epochs, args.head_dim)
    page = report(rows, json.loads((run / "metrics.json").read_text()), args, argv)
    print(page)
    out = args.out or (None if args.quick else REPO / "benchmarks" / "results" / "cove_supersense.md")
    if out is not None:
        out.write_text(page, encoding="utf-8")
    return rows


if __name__ == "__main__":
    main()
