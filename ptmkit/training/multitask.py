"""Multi-task fine-tuning (MT-DNN, Liu et al. 2019): one shared encoder, one head per task.

``ptmkit finetune RUN --task NAME=TRAIN:DEV --task NAME=TRAIN:DEV ... --out OUT`` builds the head
of ``finetune.head`` once per task on one backbone (each head sized for its task's labels) and
trains them together: every mini-batch holds examples of one task only, and the task of each
batch is drawn by the rule of ``finetune.task_sampling`` (:func:`task_probabilities`):

- ``proportional`` (the default): ``p_i = n_i / sum_j n_j`` with ``n_i`` task ``i``'s training
  examples. MT-DNN (Liu et al. 2019, algorithm 1) shuffles every task's mini-batches together
  each epoch, which draws the tasks in these shares; here each step's task is drawn
  independently with them (:func:`task_schedule`).
- ``temperature``: ``p_i`` proportional to ``n_i ** (1 / T)``, ``T = finetune.task_temperature``
  (Arivazhagan et al. 2019; XLM's language sampling, Conneau and Lample 2019, with
  ``alpha = 1 / T``): ``T = 1`` is proportional, larger ``T`` moves towards uniform, so that small
  tasks are seen more often.
- ``uniform``: ``p_i = 1 / tasks``.

One optimiser (AdamW, the warm-up and decay of single-task fine-tuning) updates the encoder on
every step and a head only on its task's steps (a head gets no gradient, no moment update and no
weight decay on other tasks' steps, as in MT-DNN's PyTorch code, where those gradients are
None). An epoch is ``sum_i ceil(n_i / batch_size)`` steps: as many batches as all tasks hold.

The run directory holds the tasks' heads in one ``model.weights.h5``; its manifest lists the
tasks (``tasks``: name -> labels, training and dev files, output name ``logits_NAME``) and its
``metrics.json`` each task's dev accuracy and macro-F1. ``ptmkit export`` writes one ONNX graph
with one output per task; ``ptmkit predict --task NAME``, ``ptmkit serve --task NAME`` and
``Predictor(..., task=NAME)`` choose the head.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from ptmkit.config import RunConfig, to_toml
from ptmkit.errors import ConfigError, DataError
from ptmkit.io import atomic_save, atomic_write_text
from ptmkit.plugins import Registry
from ptmkit.rundir import CONFIG, LABELS, METRICS, MODEL_WEIGHTS, TOKENIZER, RunDir, save_model_weights
from ptmkit.training.multitask_model import OUTPUT_PREFIX, build_multitask, load_multitask_weights

#: A task's name: what its ONNX output (``logits_NAME``) and ``--task NAME`` at prediction take.
TASK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def parse_tasks(specs: list[str]) -> dict[str, tuple[Path, Path]]:
    """``--task NAME=TRAIN:DEV`` values as ``{name: (train, dev)}``, in the order given.

    Raises:
        ConfigError: fewer than two tasks; a value not of that form; a name that is not a letter
            then letters, digits or ``_``; a name given twice.
        DataError: a training or dev file that does not exist.
    """
    tasks: dict[str, tuple[Path, Path]] = {}
    for spec in specs:
        name, equals, files = spec.partition("=")
        parts = files.split(":")
        if not equals or len(parts) != 2 or not all(parts):
            raise ConfigError(f"--task {spec!r}: expected NAME=TRAIN:DEV (e.g. polarity=train.txt:dev.txt)")
        name = name.strip()
        if not TASK_NAME.match(name):
            raise ConfigError(f"--task {spec!r}: the task name {name!r} must be a letter then letters, digits or _ (it names the ONNX output logits_{name})")
        if name in tasks:
            raise ConfigError(f"--task {name}: the task name is given twice; each task needs its own name")
        for part, what in zip(parts, ("training", "dev"), strict=True):
            if not Path(part).is_file():
                raise DataError(f"--task {name}: {part}: no such {what} file")
        tasks[name] = (Path(parts[0]), Path(parts[1]))
    if len(tasks) < 2:
        raise ConfigError(f"--task: multi-task fine-tuning needs at least two tasks, got {len(tasks)}; for one task use --train and --dev")
    return tasks


def task_probabilities(sizes: list[int], sampling: str = "proportional", temperature: float = 1.0) -> np.ndarray:
    """Each task's probability of being drawn for a batch (see the module docstring).

    Args:
        sizes: each task's training examples ``n_i`` (> 0).
        sampling: ``proportional``, ``temperature`` or ``uniform``.
        temperature: T of ``temperature`` sampling (> 0).

    Returns:
        ``(tasks,)`` float64 summing to 1: ``n_i / sum n``, ``n_i^(1/T) / sum n^(1/T)`` or ``1 / tasks``.

    Raises:
        ConfigError: an unknown ``sampling``.
    """
    n = np.asarray(sizes, np.float64)
    if sampling == "proportional":
        weights = n
    elif sampling == "temperature":
        weights = n ** (1.0 / temperature)
    elif sampling == "uniform":
        weights = np.ones_like(n)
    else:
        raise ConfigError(f"config key 'finetune.task_sampling' must be proportional, temperature or uniform, got {sampling!r}")
    return weights / weights.sum()


def task_schedule(probabilities: np.ndarray, steps: int, seed: int) -> np.ndarray:
    """The task of every step ``0 .. steps - 1``: ``(steps,)`` int64 drawn i.i.d. from
    ``probabilities`` with NumPy's generator seeded ``[seed, 1]`` (a pure function of its
    arguments)."""
    return np.random.default_rng([seed, 1]).choice(len(probabilities), size=steps, p=probabilities)


def finetune_multitask(
    run_dir: str | Path, specs: list[str], out: str | Path, config_path: str | Path | None = None, overrides: list[str] | None = None,
    console: Console | None = None, registry: Registry | None = None, resume: bool = False,
) -> dict[str, Any]:
    """Fine-tune ``run_dir``'s encoder on several labelled tasks at once into ``out`` (see the
    module docstring).

    Args:
        run_dir: a pre-training, imported or fine-tuned run (whose encoder is taken, as two-stage
            fine-tuning takes it).
        specs: ``--task`` values, ``NAME=TRAIN:DEV`` each (:func:`parse_tasks`).
        config_path, overrides: as :func:`ptmkit.training.finetune.finetune` (``finetune.*`` and
            ``head.*`` keys); ``finetune.max_train_examples`` applies to each task.
        resume: continue the interrupted run in ``out`` from its newest checkpoint (one at each
            epoch's end and every ``finetune.checkpoint_every`` steps): the same parent and
            tasks, the stored config; it ends with the weights the uninterrupted run ends with.

    Returns:
        metrics: ``tasks`` (each task's ``dev_accuracy``, ``dev_macro_f1``, examples, labels,
        ``share`` and ``steps``), ``dev_accuracy_mean``, ``task_sampling``, ``steps``, seconds.

    Raises:
        ConfigError, DataError, RunDirError: one line naming the flag, key or file: see
            :func:`parse_tasks`; a head that trains on word vectors; ``finetune.sparsity`` or ``finetune.qat``; an
            ``out`` that is not empty (without ``resume``); with ``resume``, an ``out`` with
            nothing to resume or other parent or tasks than the interrupted run's.
    """
    from ptmkit.console import default_console
    from ptmkit.plugins import get_registry
    from ptmkit.training.finetune import _check_sources, _check_target, fine_tuning_config, resumed_config
    from ptmkit.training.setup import precision, quiet_tensorflow

    console = console or default_console()
    registry = registry or get_registry()
    tasks = parse_tasks(specs)
    parent, target = RunDir(run_dir), RunDir(out)
    stored = _check_target(target, resume)
    manifest = _check_sources(parent, None, overrides or [])
    quiet_tensorflow()
    family, config = fine_tuning_config(registry, parent, manifest, config_path, overrides)
    inputs = {"parent": str(parent.path.resolve()), "tasks": {name: [str(train.resolve()), str(dev.resolve())] for name, (train, dev) in tasks.items()}}
    if stored is not None:
        config = resumed_config(registry, manifest["family"], target, stored, inputs, config_path, overrides, flags={"parent": "RUN_DIR", "tasks": "--task"})
    from ptmkit.contract import TrainsOnWordVectors

    if isinstance(registry.head(config.finetune.head), TrainsOnWordVectors):
        raise ConfigError(f"--task: the {config.finetune.head} head trains from word vectors in one pass; multi-task fine-tuning trains heads on a shared encoder")
    if config.finetune.sparsity:
        raise ConfigError("finetune.sparsity: magnitude pruning is not available with multi-task fine-tuning (--task); set it to 0")
    if config.finetune.qat:
        raise ConfigError("finetune.qat: quantisation-aware training is not available with multi-task fine-tuning (--task); drop --qat")
    data = {name: _task_data(name, train, dev, config.finetune) for name, (train, dev) in tasks.items()}
    created = not target.path.exists()
    try:
        with precision(config.finetune.mixed_precision):
            return _train(registry, parent, manifest, family, config, data, target, inputs, console)
    except BaseException:
        if created and not (target / "checkpoints" / "latest.json").exists():
            shutil.rmtree(target.path, ignore_errors=True)  # nothing to resume: leave nothing behind
        raise


def _task_data(name: str, train: Path, dev: Path, ft: Any) -> dict[str, Any]:
    """A task's texts and label ids: ``train``, ``dev`` (``(texts, label ids)``), ``labels`` and
    the files; at most ``ft.max_train_examples`` training examples, chosen with ``ft.seed``.

    Raises:
        DataError: an empty file, one label only, a dev label the training file lacks (naming the task).
    """
    from ptmkit.training.finetune import load_labelled

    try:
        texts, labels, y = load_labelled(train)
        dev_texts, _, y_dev = load_labelled(dev, labels)
    except DataError as exc:
        raise DataError(f"--task {name}: {exc}") from None
    if not dev_texts:
        raise DataError(f"--task {name}: {dev}: no labelled examples in it")
    if ft.max_train_examples and len(texts) > ft.max_train_examples:
        keep = np.sort(np.random.default_rng(ft.seed).permutation(len(texts))[: ft.max_train_examples])
        texts, y = [texts[i] for i in keep], y[keep]
    return {"train": (texts, y), "dev": (dev_texts, y_dev), "labels": labels, "files": (str(train.resolve()), str(dev.resolve()))}


def _train(
    registry: Registry, parent: RunDir, manifest: dict[str, Any], family: Any, config: RunConfig, data: dict[str, dict[str, Any]],
    target: RunDir, inputs: dict[str, Any], console: Console,
) -> dict[str, Any]:
    """Build, train and write the multi-task run (see :func:`finetune_multitask`)."""
    from ptmkit.data.tokenization import encode_texts
    from ptmkit.training.finetune import INPUTS, load_encoder, scores, task_chain
    from ptmkit.training.setup import seed_everything
    from ptmkit.training.strategies import parameter_counts

    ft = config.finetune
    seed_everything(ft.seed)
    backbone, tokenizer = load_encoder(registry, parent)
    pad = family.special_tokens(tokenizer).padding_id
    encoded = {
        name: {part: (encode_texts(tokenizer, task[part][0], ft.sequence_length, family.inputs, pad), task[part][1]) for part in ("train", "dev")}
        for name, task in data.items()
    }
    model, heads = build_multitask(registry, config, backbone, {name: len(task["labels"]) for name, task in data.items()})
    counts = {"strategy": ft.strategy, **parameter_counts(model)}
    shares = task_probabilities([len(task["train"][1]) for task in data.values()], ft.task_sampling, ft.task_temperature)
    console.print(
        f"multi-task fine-tuning, {len(data)} tasks (sampling {ft.task_sampling}): "
        + ", ".join(f"{name} {len(task['train'][1]):,} examples, {len(task['labels'])} labels, p={p:.3f}" for (name, task), p in zip(data.items(), shares, strict=True))
    )
    target.path.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target / CONFIG, to_toml(config.to_dict()))
    target.write_json(INPUTS, inputs)
    command = ["ptmkit", "finetune", inputs["parent"], *[a for n, (t, d) in inputs["tasks"].items() for a in ("--task", f"{n}={t}:{d}")], "--out", str(target.path), "--resume"]
    seconds, steps = _fit(model, heads, ft, encoded, shares, target / "checkpoints", command, console)
    metrics: dict[str, Any] = {"tasks": {}}
    for i, (name, task) in enumerate(data.items()):
        x_dev, y_dev = encoded[name]["dev"]
        metrics["tasks"][name] = {
            **scores(heads[name], x_dev, y_dev, len(task["labels"]), "dev"),
            "train_examples": len(task["train"][1]), "dev_examples": len(y_dev), "labels": len(task["labels"]),
            "share": round(float(shares[i]), 6), "steps": int(np.sum(steps == i)),
        }
    metrics |= {
        "dev_accuracy_mean": round(float(np.mean([m["dev_accuracy"] for m in metrics["tasks"].values()])), 4),
        "task_sampling": ft.task_sampling, **({"task_temperature": ft.task_temperature} if ft.task_sampling == "temperature" else {}),
        "steps": len(steps), "epochs": ft.epochs, "train_seconds": round(seconds, 1), **counts,
    }
    atomic_save(target / TOKENIZER, lambda tmp: tokenizer.save(str(tmp)))
    target.write_json(LABELS, {name: task["labels"] for name, task in data.items()})
    atomic_save(target / MODEL_WEIGHTS, lambda tmp: save_model_weights(model, tmp))
    target.write_json(METRICS, metrics)
    tasks = {name: {"labels": task["labels"], "train": task["files"][0], "dev": task["files"][1], "output": OUTPUT_PREFIX + name} for name, task in data.items()}
    target.write_manifest(
        stage="finetune", family=manifest["family"], plugin=manifest.get("plugin"), head=ft.head, tasks=tasks,
        parent=str(parent.path.resolve()), inputs=list(family.input_names), outputs=[t["output"] for t in tasks.values()],
        sequence_length=ft.sequence_length, weights=MODEL_WEIGHTS, start="pretrained" if manifest["stage"] != "finetune" else "encoder",
        chain=[*task_chain(parent, manifest), {"run": str(target.path.resolve()), "head": ft.head, "tasks": {n: t["train"] for n, t in tasks.items()}}],
    )
    shutil.rmtree(target / "checkpoints", ignore_errors=True)  # the finished weights are model.weights.h5
    return metrics


def _fit(
    model: Any, heads: dict[str, Any], ft: Any, encoded: dict[str, Any], shares: np.ndarray, checkpoints: Path, command: list[str], console: Console,
) -> tuple[float, np.ndarray]:
    """Train the heads on the batches of :func:`task_schedule` (task ``i``'s ``k``-th batch is
    :func:`~ptmkit.training.finetune.step_batch` ``k`` of its examples, seed ``finetune.seed + i``),
    from the newest checkpoint in ``checkpoints`` if there is one, saving one at each epoch's end
    and every ``finetune.checkpoint_every`` steps, printing each task's dev accuracy at each epoch's
    end; return ``(seconds, the schedule)``."""
    import types

    import keras

    from ptmkit.training.checkpoint import interrupt_note, latest_step, restore_state, save_state
    from ptmkit.training.finetune import _layer_schedules, step_batch
    from ptmkit.training.schedule import adamw

    names = list(heads)
    per_epoch = sum(-(-len(encoded[name]["train"][1]) // ft.batch_size) for name in names)
    total = per_epoch * ft.epochs
    optimizer = adamw(ft.learning_rate, ft.weight_decay, total, ft.warmup_ratio, ft.adam_epsilon, *_layer_schedules(heads[names[0]], ft, per_epoch),
                      schedule=ft.schedule, ratio=ft.schedule_ratio)
    # What the checkpoint functions read of a compiled model: every head's and the encoder's
    # variables, and the one optimiser (each task's step updates its own subset).
    state = types.SimpleNamespace(variables=model.variables, trainable_variables=model.trainable_variables, optimizer=optimizer)
    start = restore_state(state, checkpoints) if latest_step(checkpoints) else 0  # builds the optimiser
    if start:
        console.print(f"resuming from step {start} of {total} ({checkpoints})")
    else:
        optimizer.build(model.trainable_variables)
    for head in heads.values():
        head.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=ft.jit_compile)
    schedule = task_schedule(shares, total, ft.seed)
    seen = np.bincount(schedule[:start], minlength=len(names)).astype(np.int64)  # each task's batches so far
    every = ft.checkpoint_every or per_epoch
    losses: list[float] = []
    started = time.perf_counter()
    with interrupt_note(checkpoints, total, command):
        for step in range(start, total):
            task = int(schedule[step])
            x, y = encoded[names[task]]["train"]
            batch_x, batch_y = step_batch(x, y, ft.batch_size, ft.seed + task, int(seen[task]))
            seen[task] += 1
            losses.append(float(np.asarray(heads[names[task]].train_on_batch(batch_x, batch_y))))
            if (step + 1) % per_epoch == 0:
                dev = ", ".join(f"{n} {np.mean(np.argmax(heads[n].predict(encoded[n]['dev'][0], batch_size=128, verbose=0), -1) == encoded[n]['dev'][1]):.4f}" for n in names)
                console.print(f"epoch {(step + 1) // per_epoch}/{ft.epochs}: step {step + 1}/{total}, loss {np.mean(losses):.4f}; dev accuracy {dev}")
                losses = []
            if (step + 1) % every == 0 or (step + 1) % per_epoch == 0 or step + 1 == total:
                save_state(state, checkpoints, step + 1)
    return time.perf_counter() - started, schedule


def load_multitask(run_dir: str | Path, registry: Registry | None = None) -> tuple[Any, dict[str, Any], RunConfig, Any, dict[str, Any]]:
    """Rebuild a multi-task run's model and load its weights.

    Returns:
        ``(model, heads, config, tokenizer, manifest)`` as :func:`build_multitask` gives them.

    Raises:
        RunDirError: missing or corrupted files.
    """
    from ptmkit.plugins import get_registry
    from ptmkit.training.finetune import load_backbone

    registry = registry or get_registry()
    run = RunDir(run_dir)
    backbone, config, tokenizer, manifest = load_backbone(registry, run)
    model, heads = load_multitask_weights(registry, run, config, backbone, manifest)
    return model, heads, config, tokenizer, manifest
