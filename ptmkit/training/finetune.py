"""``ptmkit finetune RUN_DIR``: a head on a pre-trained backbone, trained on labelled text.

Reads the parent run's config, tokenizer and backbone weights; adds the head named by
``finetune.head`` (sequence classification by default); trains with AdamW, linear warm-up and
decay; reports dev accuracy and macro-F1 after each epoch and at the end; writes a run directory
that ``ptmkit export`` reads.

A head that trains itself on static word vectors (:class:`ptmkit.contract.TrainsOnWordVectors`, e.g.
fastText's classifier) gets the parent run's word vectors instead of a backbone and writes a run of
its :attr:`~ptmkit.contract.Head.run_family`; when ``finetune.head`` is not given and the default
head does not fit the parent's family, the one installed head that fits is used.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from ptmkit.config import RunConfig, choose_head, read_toml, to_toml
from ptmkit.console import default_console
from ptmkit.contract import ClassifiesRows, ProvidesWordVectors, TrainsOnWordVectors
from ptmkit.errors import ConfigError, DataError, RunDirError
from ptmkit.io import atomic_save, atomic_write_text
from ptmkit.plugins import Registry, get_registry
from ptmkit.rundir import (
    CONFIG,
    DEV_LOG,
    LABELS,
    METRICS,
    MODEL_WEIGHTS,
    STEP_LOG,
    TOKENIZER,
    RunDir,
    check_weights_file,
    load_weights,
    save_model_weights,
)
from ptmkit.training.setup import precision

#: What a fine-tuning run read (parent run, train and dev files), for --resume to compare.
INPUTS = "inputs.json"


def macro_f1(labels: np.ndarray, predictions: np.ndarray, num_classes: int) -> float:
    """Unweighted mean of per-class F1 over the classes present in ``labels`` or ``predictions``.

    Matches ``sklearn.metrics.f1_score(average="macro")`` (classes absent from both are skipped).
    """
    scores = []
    for c in range(num_classes):
        tp = np.sum((predictions == c) & (labels == c))
        fp = np.sum((predictions == c) & (labels != c))
        fn = np.sum((predictions != c) & (labels == c))
        if tp + fp + fn == 0:
            continue
        scores.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(scores)) if scores else 0.0


def majority_accuracy(train_labels: np.ndarray, dev_labels: np.ndarray) -> float:
    """The dev accuracy of always predicting the most frequent training label: the baseline a
    classifier that learned nothing from the text reaches (ties go to the lowest label id).

    Args:
        train_labels: int label ids of the training examples, shape ``(n_train,)``.
        dev_labels: int label ids of the dev examples, shape ``(n_dev,)``.
    """
    train = np.asarray(train_labels)
    known = train[train >= 0]
    if len(known) == 0 or len(dev_labels) == 0:
        return 0.0
    return float(np.mean(np.asarray(dev_labels) == np.bincount(known).argmax()))


def dev_scores(train_labels: np.ndarray, dev_labels: np.ndarray, predictions: np.ndarray, num_classes: int) -> dict[str, float]:
    """A fine-tuning's dev metrics: ``dev_accuracy``, ``dev_macro_f1`` (:func:`macro_f1`) and
    ``dev_majority_accuracy`` (:func:`majority_accuracy`), each rounded to 4 places."""
    return {
        "dev_accuracy": round(float(np.mean(predictions == dev_labels)), 4),
        "dev_macro_f1": round(macro_f1(dev_labels, predictions, num_classes), 4),
        "dev_majority_accuracy": round(majority_accuracy(train_labels, dev_labels), 4),
    }


def top1_gold(predicted: np.ndarray, label_sets: list[tuple[str, ...]], names: list[str]) -> np.ndarray:
    """The gold label id to score each top-1 prediction against when a line may have several
    labels: the predicted id when it is one of the line's labels (fastText's ``test``: precision
    at 1), else the line's first label known to the model, else -1.

    Args:
        predicted: ``(examples,)`` int predicted label ids.
        label_sets: each example's labels.
        names: the model's label names (id = position).

    Returns:
        ``(examples,)`` int64.
    """
    index = {name: i for i, name in enumerate(names)}
    gold = []
    for p, labels in zip(predicted.tolist(), label_sets, strict=True):
        ids = [index[label] for label in labels if label in index]
        gold.append(p if p in ids else (ids[0] if ids else -1))
    return np.asarray(gold, np.int64)


def load_labelled(path: str | Path, labels: list[str] | None = None) -> tuple[list[str], list[str], np.ndarray]:
    """Read a labelled file; return ``(texts, label_names, label_ids)``.

    Args:
        labels: the label names to map onto (the training set's); None builds them (sorted).

    Raises:
        DataError: a label that the training set does not have (naming file and line).
    """
    from ptmkit.data.readers import read_records

    records = list(read_records(path, labelled=True))
    if labels is None:
        labels = sorted({r.label for r in records if r.label is not None})
        if len(labels) < 2:
            raise DataError(f"{path}: needs at least two labels to train a classifier, found {labels}")
    index = {name: i for i, name in enumerate(labels)}
    for r in records:
        if r.label not in index:
            raise DataError(f"{path}:{r.line}: label {r.label!r} does not occur in the training set ({len(labels)} labels)")
    return [r.text for r in records], labels, np.asarray([index[r.label or ""] for r in records], np.int32)


@dataclasses.dataclass(frozen=True)
class LabelledData:
    """A fine-tuning's labelled files, read (and checked) before TensorFlow is imported.

    Attributes:
        texts, y_train: the training texts and their label ids (int32, ``(n,)``).
        labels: the label names (sorted; the training file's).
        dev_texts, y_dev: the dev file's, mapped onto ``labels``.
        test_texts, y_test: the test file's (empty without one); ``test_file`` its path or None.
    """

    texts: list[str]
    labels: list[str]
    y_train: np.ndarray
    dev_texts: list[str]
    y_dev: np.ndarray
    test_texts: list[str]
    y_test: np.ndarray
    test_file: str | Path | None

    @classmethod
    def read(cls, train_file: str | Path, dev_file: str | Path, test_file: str | Path | None) -> LabelledData:
        """Raises: DataError: a malformed line or a label the training file lacks (file and line named)."""
        texts, labels, y_train = load_labelled(train_file)
        dev_texts, _, y_dev = load_labelled(dev_file, labels)
        test_texts, _, y_test = load_labelled(test_file, labels) if test_file is not None else ([], labels, np.zeros(0, np.int32))
        return cls(texts, labels, y_train, dev_texts, y_dev, test_texts, y_test, test_file)


def load_backbone(registry: Registry, run: RunDir) -> tuple[Any, RunConfig, Any, dict[str, Any]]:
    """Build the backbone of a finished pre-training run and load its weights.

    Returns:
        ``(backbone, config, tokenizer, manifest)``.

    Raises:
        RunDirError: missing manifest, config, tokenizer or weights, or corrupted weights.
    """
    from ptmkit.training.pretrain import resolve_config

    manifest = run.manifest()
    config = resolve_config(registry, manifest["family"], None, None, base=read_toml(run.require(CONFIG)))
    family = registry.family(manifest["family"])
    backbone = family.build_backbone(config.model)
    weights = run.require(manifest.get("weights", MODEL_WEIGHTS))
    if manifest["stage"] == "pretrain":
        load_weights(backbone, weights)
    return backbone, config, run.load_tokenizer(), manifest


def fine_tuning_config(
    registry: Registry, parent: RunDir, manifest: dict[str, Any], config_path: str | Path | None, overrides: list[str] | None
) -> tuple[Any, RunConfig]:
    """``(family, config)`` of a fine-tuning of ``parent``: its config under ``config_path`` and
    ``overrides`` (the head chosen for the family; a changed pre-training key refused)."""
    from ptmkit.training.pretrain import resolve_config

    family = registry.family(manifest["family"])
    parent_config = read_toml(parent.require(CONFIG))
    if config_path is not None:
        _refuse_changed_pretraining_keys(read_toml(config_path), parent_config, str(config_path))
    overrides = choose_head(registry, family, config_path, list(overrides or []))
    return family, resolve_config(registry, manifest["family"], config_path, overrides, base=_head_base(parent_config, config_path, overrides))


def _head_base(parent_config: dict[str, Any], config_path: str | Path | None, overrides: list[str]) -> dict[str, Any]:
    """The parent run's config as the base of a fine-tuning config: its ``[head]`` section holds the
    keys of the parent's ``finetune.head`` (a pre-training run records the default head's), so it
    is dropped when another head is chosen (by ``--set finetune.head``, ``--config`` or
    :func:`~ptmkit.config.choose_head`)."""
    chosen = None
    for override in overrides:
        key, _, value = override.partition("=")
        if key.strip() == "finetune.head":
            chosen = value.strip().strip('"')
    if chosen is None and config_path is not None:
        section = read_toml(config_path).get("finetune")
        chosen = section.get("head") if isinstance(section, dict) else None
    parent_head = (parent_config.get("finetune") or {}).get("head")
    if chosen is None or chosen == parent_head:
        return parent_config
    return {key: value for key, value in parent_config.items() if key != "head"}


def build_classifier(registry: Registry, config: RunConfig, backbone: Any, num_labels: int) -> Any:
    """The head model of ``config.finetune.head`` on ``backbone``, with what
    ``config.finetune.strategy`` adds to the backbone and only what it trains left trainable
    (:mod:`ptmkit.training.strategies`).

    Raises:
        ConfigError: a strategy the backbone cannot take (no transformer blocks for adapters, a
            LoRA target that names no layer).
    """
    from ptmkit.training.strategies import apply_strategy, prepare_backbone

    added = prepare_backbone(backbone, config.finetune, config.head)
    model = registry.head(config.finetune.head).build(backbone, num_labels, config.head)
    apply_strategy(backbone, config.finetune, added)
    return model


def epoch_order(examples: int, seed: int, epoch: int) -> np.ndarray:
    """The order of the training examples in ``epoch`` (0-based): a permutation of
    ``range(examples)``, new each epoch and a pure function of ``(seed, epoch)``.

    A pure function, so that a run resumed at any step takes the batches the uninterrupted run
    took. Keras' ``fit(..., shuffle=True)`` on arrays would repeat the first epoch's order once
    ``keras.utils.set_random_seed`` has run; Hugging Face's Trainer (and PyTorch's
    ``RandomSampler``) draw a new one each epoch, as SGD assumes.
    """
    return np.random.default_rng([seed, epoch]).permutation(examples)


def step_batch(x: dict[str, np.ndarray], y: np.ndarray, batch_size: int, seed: int, step: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The ``(x, y)`` batch of global ``step`` (0-based): epochs of ``ceil(examples / batch_size)``
    steps, each in :func:`epoch_order`; an epoch's last batch may be smaller.

    Args:
        x: model inputs, each ``(examples, sequence_length)`` int32 (``token_ids``, ...).
        y: ``(examples,)`` int32 label ids.
    """
    steps_per_epoch = -(-len(y) // batch_size)
    epoch, index = divmod(step, steps_per_epoch)
    rows = epoch_order(len(y), seed, epoch)[index * batch_size : (index + 1) * batch_size]
    return {name: values[rows] for name, values in x.items()}, y[rows]


def finetune(
    run_dir: str | Path,
    train_file: str | Path,
    dev_file: str | Path,
    out: str | Path,
    config_path: str | Path | None = None,
    overrides: list[str] | None = None,
    console: Console | None = None,
    registry: Registry | None = None,
    test_file: str | Path | None = None,
    resume: bool = False,
    teacher: str | Path | None = None,
) -> dict[str, Any]:
    """Fine-tune the backbone of pre-training run ``run_dir`` with a head; write the run to ``out``.

    ``run_dir`` is a run that ptmkit pre-trained or one imported from a Hugging Face checkpoint
    (``ptmkit import-hf``). The defaults are those that work for pre-trained encoders (Devlin et
    al. 2019, appendix A.3): AdamW with learning rate 5e-5, linear warm-up over the first 10% of
    steps then linear decay, weight decay 0.01 excluding LayerNorm parameters and biases.

    The training state is saved in ``out/checkpoints/`` every ``finetune.checkpoint_every`` steps
    (and each epoch's end); batches are a pure function of ``(seed, step)`` (:func:`step_batch`),
    so ``resume`` continues an interrupted run to the weights the uninterrupted run ends with.

    Args:
        test_file: a labelled file evaluated once after training (never used for selection).
        resume: continue the interrupted run in ``out``; ``config_path`` and ``overrides`` may be
            given again when they say what the run's ``config.toml`` says.
        teacher: a fine-tuned run with the same labels to distil from: the loss mixes its soft
            targets with the gold labels (:mod:`ptmkit.training.distillation`), and the metrics
            add the teacher's dev accuracy and the student's agreement with it.

    Returns:
        metrics: dev (and test) accuracy and macro-F1, examples, labels, seconds.

    Raises:
        ConfigError, DataError, RunDirError: with one-line messages naming the file or key.
    """
    from ptmkit.training.setup import quiet_tensorflow

    console = console or default_console()
    registry = registry or get_registry()
    parent, target = RunDir(run_dir), RunDir(out)
    stored = _check_target(target, resume)
    manifest = _check_sources(parent, teacher, overrides or [])
    # The config and the labelled files are checked before TensorFlow is imported (seconds): a
    # wrong key or a malformed line is refused at once.
    family, config = fine_tuning_config(registry, parent, manifest, config_path, overrides)
    head = registry.head(config.finetune.head)
    if config.finetune.distill != "logits" and teacher is None:
        raise ConfigError(f"--distill {config.finetune.distill} (finetune.distill) distils a teacher's layers into the student; give --teacher FINE_TUNED_RUN")
    if isinstance(head, TrainsOnWordVectors):
        if teacher is not None:
            raise ConfigError(f"--teacher: the {config.finetune.head} head trains from word vectors in one pass; distillation needs a head trained by Keras")
        if resume:
            raise ConfigError(f"--resume: the {config.finetune.head} head trains in one pass without checkpoints; drop --resume")
        quiet_tensorflow()
        return _finetune_word_vectors(registry, parent, manifest, head, config, overrides, train_file, dev_file, test_file, target, console)
    inputs = {"parent": str(parent.path.resolve()), "train": str(Path(train_file).resolve()), "dev": str(Path(dev_file).resolve())}
    if teacher is not None:
        inputs["teacher"] = str(Path(teacher).resolve())
    if stored is not None:
        config = resumed_config(registry, manifest["family"], target, stored, inputs, config_path, overrides)
    data = LabelledData.read(inputs["train"], inputs["dev"], test_file)
    if manifest["stage"] != "finetune":
        check_weights_file(parent / manifest.get("weights", MODEL_WEIGHTS))
    quiet_tensorflow()
    created = not target.path.exists()
    try:
        with precision(config.finetune.mixed_precision):
            return _finetune_backbone(registry, parent, manifest, family, config, inputs, data, target, console)
    except BaseException:
        if created and not (target / "checkpoints" / "latest.json").exists():
            shutil.rmtree(target.path, ignore_errors=True)  # nothing to resume: leave nothing behind
        raise


def _check_sources(parent: RunDir, teacher: str | Path | None, overrides: list[str]) -> dict[str, Any]:
    """``parent``'s manifest, after checking that it is a pre-training run, that ``teacher`` (if
    any) is a fine-tuned run, and that ``overrides`` set only ``finetune.*`` and ``head.*`` keys.

    Raises:
        RunDirError, ConfigError: one line naming the run or the key.
    """
    if not parent.path.exists():
        raise RunDirError(f"{parent.path}: no such run directory; fine-tuning starts from a finished pre-training run: ptmkit train FAMILY --corpus CORPUS --out {parent.path}")
    if parent.path.is_dir() and not (parent / "manifest.json").exists():
        _refuse_unfinished(parent)
    manifest = parent.manifest()
    if manifest["stage"] not in ("pretrain", "import", "finetune"):
        raise RunDirError(f"{parent.path}: is a {manifest['stage']} run; fine-tune a pre-training run or a fine-tuned one")
    if manifest["stage"] == "finetune":
        _check_fine_tuned_parent(parent, manifest)
    if teacher is not None:
        try:
            stage = RunDir(teacher).manifest().get("stage")
        except RunDirError as exc:
            raise RunDirError(f"--teacher {exc}; the teacher is a fine-tuned run (ptmkit finetune ... --out DIR)") from None
        if stage != "finetune":
            raise RunDirError(f"--teacher {teacher}: is a {stage} run; the teacher is a fine-tuned run (one with a head)")
        if "tasks" in RunDir(teacher).manifest():
            raise RunDirError(f"--teacher {teacher}: is a multi-task run; the teacher is a fine-tuned run with one head and the student's labels")
    for override in overrides:
        section = override.partition("=")[0].strip().split(".")[0]
        if section not in ("finetune", "head"):
            raise ConfigError(f"--set {override!r}: fine-tuning keeps the pre-trained run's [{section}]; set finetune.* or head.* keys")
    return manifest


def _check_fine_tuned_parent(parent: RunDir, manifest: dict[str, Any]) -> None:
    """Refuse a fine-tuned parent whose encoder two-stage fine-tuning cannot take over: one whose
    head trained on word vectors (no encoder), or one fine-tuned with ``adapters`` or ``lora``
    (its encoder is the base weights plus added layers the new head's strategy would add again).

    Raises:
        RunDirError, ConfigError: one line naming the run.
    """
    registry = get_registry()
    head = registry.heads.get(str(manifest.get("head")))
    if isinstance(head, TrainsOnWordVectors) or isinstance(registry.family(manifest["family"]), ClassifiesRows):
        raise RunDirError(f"{parent.path}: is a finetune run whose {manifest.get('head')} head trained on word vectors, with no encoder to fine-tune further; fine-tune its parent {manifest.get('parent')}")
    strategy = (read_toml(parent.require(CONFIG)).get("finetune") or {}).get("strategy", "full")
    if strategy in ("adapters", "lora"):
        raise ConfigError(
            f"{parent.path}: was fine-tuned with finetune.strategy = {strategy!r}; two-stage fine-tuning continues the encoder of a run "
            f"fine-tuned with 'full' or 'features'"
        )


def load_encoder(registry: Registry, run: RunDir) -> tuple[Any, Any]:
    """``(backbone, tokenizer)`` to fine-tune from ``run``: a pre-training (or imported) run's
    backbone (:func:`load_backbone`), or, for a fine-tuned run (two-stage fine-tuning, Phang et
    al. 2018's STILTs), a new backbone holding the weights of that run's encoder, without its head.

    Raises:
        RunDirError: missing or corrupted files.
    """
    manifest = run.manifest()
    if manifest["stage"] != "finetune":
        backbone, _, tokenizer, _ = load_backbone(registry, run)
        return backbone, tokenizer
    import keras

    trained, config, tokenizer, _ = load_classifier(run.path, registry)
    if "tasks" in manifest:  # a multi-task run: the encoder inside its first head's model
        trained = next(layer for layer in trained.layers if isinstance(layer, keras.Model))
    old = next(layer for layer in trained.layers if isinstance(layer, keras.Model))
    backbone = registry.family(manifest["family"]).build_backbone(config.model)
    backbone.set_weights(old.get_weights())
    del trained, old
    return backbone, tokenizer


def _refuse_unfinished(parent: RunDir) -> None:
    """Raise RunDirError for a run directory without a manifest, naming the stage to finish first
    (the family's name for it when ``config.toml`` says which family,
    :attr:`~ptmkit.contract.ModelFamily.stage_names`)."""
    from ptmkit.training.pretrain import stage_name

    family_name = read_toml(parent / CONFIG).get("family") if (parent / CONFIG).exists() else None
    if family_name is None:
        raise RunDirError(f"{parent.path}: no finished pre-training run (no manifest.json); pre-train one first: ptmkit train FAMILY --corpus CORPUS --out {parent.path}")
    family = get_registry().family(str(family_name))
    wanted = stage_name(family, "pretrain", f"{family_name} pre-training run")
    raise RunDirError(f"{parent.path}: the {wanted} has not finished (no manifest.json); finish it first: ptmkit train {family_name} --corpus CORPUS --out {parent.path} --resume")


def _check_target(target: RunDir, resume: bool) -> dict[str, Any] | None:
    """The stored config of the run to resume in ``target`` (``resume``), else None.

    Raises:
        RunDirError: ``target`` is a file; is not empty (without ``resume``); holds a finished run,
            or nothing to resume (with ``resume``).
    """
    if target.path.exists() and not target.path.is_dir():
        raise RunDirError(f"{target.path}: exists and is not a directory; choose another --out")
    if not resume:
        if target.path.exists() and any(target.path.iterdir()):
            raise RunDirError(f"{target.path}: exists and is not empty; use --resume to continue it, or another --out")
        return None
    if (target / "manifest.json").exists():
        raise RunDirError(f"{target.path}: already holds a finished run; choose another --out")
    if not (target / CONFIG).exists():
        raise RunDirError(f"{target.path}: nothing to resume (no {CONFIG}); start the fine-tuning without --resume")
    return read_toml(target / CONFIG)


#: What a resumed fine-tuning reads again, as ``inputs.json`` keys and the flags that give them.
RESUME_INPUTS = {"parent": "RUN_DIR", "train": "--train", "dev": "--dev", "teacher": "--teacher"}


def resumed_config(
    registry: Registry, family_name: str, target: RunDir, stored: dict[str, Any], inputs: dict[str, Any], config_path: str | Path | None,
    overrides: list[str] | None, flags: dict[str, str] = RESUME_INPUTS,
) -> RunConfig:
    """The interrupted fine-tuning's config (``stored``), once ``--resume`` is found to change
    nothing it trained with: no stored key changed by ``--config`` or ``--set``, and for each key
    of ``flags`` (``inputs.json`` key -> the flag that gives it) the input it read
    (``target/inputs.json``); a mapping's entries in the same order (a multi-task run's heads).

    Raises:
        ConfigError: the first setting or input that differs, naming its flag and both values.
    """
    from ptmkit.training.pretrain import check_resume_flags, resolve_config

    check_resume_flags(registry, family_name, target / CONFIG, stored, config_path, overrides)
    previous = target.read_json(INPUTS) if (target / INPUTS).exists() else inputs
    for key, flag in flags.items():
        if _in_order(previous.get(key)) != _in_order(inputs.get(key)):
            raise ConfigError(f"--resume: {flag} {_shown(inputs.get(key))} differs from the interrupted run's {_shown(previous.get(key))} ({target / INPUTS})")
    return resolve_config(registry, family_name, None, None, base=stored)


def _in_order(value: Any) -> Any:
    """``value`` as JSON stores it; a mapping as its ``[key, value]`` pairs, in order."""
    return json.loads(json.dumps(list(value.items()) if isinstance(value, dict) else value))


def _shown(value: Any) -> str:
    """An input as its flags give it: a path, ``NAME=TRAIN:DEV ...`` for tasks, ``(none)``."""
    if isinstance(value, dict):
        return " ".join(f"{name}={':'.join(map(str, files))}" for name, files in value.items()) or "(none)"
    return str(value) if value else "(none)"


def _finetune_backbone(
    registry: Registry, parent: RunDir, manifest: dict[str, Any], family: Any, config: RunConfig, inputs: dict[str, str],
    data: LabelledData, target: RunDir, console: Console,
) -> dict[str, Any]:
    """Fine-tune a head on ``parent``'s backbone into ``target`` (see :func:`finetune`)."""
    from ptmkit.data.tokenization import encode_texts
    from ptmkit.training.setup import seed_everything

    ft = config.finetune
    texts, labels, y_train = data.texts, data.labels, data.y_train
    dev_texts, y_dev, test_texts, y_test, test_file = data.dev_texts, data.y_dev, data.test_texts, data.y_test, data.test_file
    if ft.max_train_examples and len(texts) > ft.max_train_examples:
        keep = np.sort(np.random.default_rng(ft.seed).permutation(len(texts))[: ft.max_train_examples])
        texts, y_train = [texts[i] for i in keep], y_train[keep]
    if "teacher" in inputs:
        _check_teacher(registry, family, parent, inputs, labels, ft.distill)
    console.print(f"fine-tuning on {len(texts):,} examples, {len(labels)} labels; dev {len(dev_texts):,} examples")

    teacher = _teacher_logits(inputs["teacher"], [texts, dev_texts], console) if "teacher" in inputs else None
    seed_everything(ft.seed)
    backbone, tokenizer = load_encoder(registry, parent)
    specials = family.special_tokens(tokenizer)
    x_train = encode_texts(tokenizer, texts, ft.sequence_length, family.inputs, specials.padding_id)
    x_dev = encode_texts(tokenizer, dev_texts, ft.sequence_length, family.inputs, specials.padding_id)
    model, counts, qat = _classifier_to_train(registry, config, backbone, len(labels), console)
    start = _stage_start(parent, manifest, config, labels, model, console)
    target.path.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target / CONFIG, to_toml(config.to_dict()))
    target.write_json(INPUTS, inputs)
    command = ["ptmkit", "finetune", inputs["parent"], "--train", inputs["train"], "--dev", inputs["dev"], "--out", str(target.path), "--resume"]
    command += ["--teacher", inputs["teacher"]] if teacher is not None else []
    distilled = None
    if teacher is None:
        seconds = _fit_classifier(model, ft, x_train, y_train, x_dev, y_dev, target, console, command, qat=qat)
    else:
        trainer = model if ft.distill == "logits" else _layer_distillation(registry, family, backbone, model, ft, inputs["teacher"], console)
        seconds, distilled = _fit_distilled(trainer, model, ft, x_train, y_train, teacher[0], x_dev, y_dev, target, console, command, qat)
    predictions = np.argmax(model.predict(x_dev, batch_size=128, verbose=0), axis=-1)
    metrics = {
        **dev_scores(y_train, y_dev, predictions, len(labels)),
        "train_examples": len(texts),
        "dev_examples": len(dev_texts),
        "labels": len(labels),
        "epochs": ft.epochs,
        "train_seconds": round(seconds, 1),
        **counts,
    }
    if teacher is not None:
        teacher_dev = np.argmax(teacher[1], axis=-1)
        metrics["teacher_dev_accuracy"] = round(float(np.mean(teacher_dev == y_dev)), 4)
        metrics["dev_agreement_with_teacher"] = round(float(np.mean(teacher_dev == predictions)), 4)
    metrics.update({"intermediate_losses": distilled} if distilled else {})
    if test_file is not None:
        x_test = encode_texts(tokenizer, test_texts, ft.sequence_length, family.inputs, specials.padding_id)
        metrics |= {**scores(model, x_test, y_test, len(labels), "test"), "test_examples": len(test_texts)}
    atomic_save(target / TOKENIZER, lambda tmp: tokenizer.save(str(tmp)))
    target.write_json(LABELS, labels)
    atomic_save(target / MODEL_WEIGHTS, lambda tmp: save_model_weights(model, tmp))
    target.write_json(METRICS, metrics)
    target.write_manifest(
        stage="finetune",
        family=manifest["family"],
        plugin=manifest.get("plugin"),
        head=ft.head,
        labels=labels,
        parent=inputs["parent"],
        train=inputs["train"],
        dev=inputs["dev"],
        test=str(Path(test_file).resolve()) if test_file is not None else None,
        inputs=list(family.input_names),
        outputs=["logits"],
        sequence_length=ft.sequence_length,
        weights=MODEL_WEIGHTS, **({"qat": qat.summary()} if qat is not None else {}),
        start=start,
        chain=[*task_chain(parent, manifest), {"run": str(target.path.resolve()), "train": inputs["train"], "head": ft.head, "labels": len(labels)}],
    )
    shutil.rmtree(target / "checkpoints", ignore_errors=True)  # the finished weights are model.weights.h5
    return metrics


def scores(model: Any, x: dict[str, np.ndarray], y: np.ndarray, num_labels: int, prefix: str) -> dict[str, float]:
    """``{PREFIX_accuracy, PREFIX_macro_f1}`` (4 decimals) of ``model``'s top-1 predictions on
    inputs ``x`` against label ids ``y`` (``(examples,)`` int; batches of 128)."""
    predictions = np.argmax(model.predict(x, batch_size=128, verbose=0), axis=-1)
    return {f"{prefix}_accuracy": round(float(np.mean(predictions == y)), 4), f"{prefix}_macro_f1": round(macro_f1(y, predictions, num_labels), 4)}


def _stage_start(parent: RunDir, manifest: dict[str, Any], config: RunConfig, labels: list[str], model: Any, console: Console) -> str:
    """What the fine-tuning starts from, for the manifest's ``start``: ``"pretrained"`` (a
    pre-training or imported run), ``"encoder"`` (a fine-tuned run's encoder with a new head, the
    head's weights freshly drawn, sized for ``labels``) or ``"encoder+head"`` (a fine-tuned run with
    the same labels, head and head settings: its head's weights too, loaded into ``model``)."""
    if manifest["stage"] != "finetune":
        return "pretrained"
    parent_config = read_toml(parent.require(CONFIG))
    same = (
        "tasks" not in manifest  # a multi-task parent's heads are not one head to continue
        and list(parent.read_json(LABELS)) == list(labels)
        and manifest.get("head") == config.finetune.head
        and (parent_config.get("finetune") or {}).get("strategy", "full") == config.finetune.strategy
        and read_toml_section(parent_config, "head") == config.to_dict().get("head", {})
    )
    if same:
        load_weights(model, parent.require(manifest.get("weights", MODEL_WEIGHTS)))
        console.print(f"two-stage fine-tuning: {parent.path}'s encoder and head (the same {len(labels)} labels)")
        return "encoder+head"
    console.print(f"two-stage fine-tuning: {parent.path}'s encoder, a new {config.finetune.head} head for {len(labels)} labels")
    return "encoder"


def read_toml_section(data: dict[str, Any], section: str) -> dict[str, Any]:
    """``data[section]`` when it is a table, else ``{}``."""
    value = data.get(section)
    return value if isinstance(value, dict) else {}


def task_chain(parent: RunDir, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The labelled tasks a fine-tuned ``parent`` was trained on, first to last (its manifest's
    ``chain``; a fine-tuned run written before chains were recorded gives one entry), each
    ``{"run", "train", "head", "labels"}`` (``labels``: how many); ``[]`` for a pre-training run.
    A multi-task parent's entry has ``tasks`` (name -> training file) instead of ``train``."""
    if manifest["stage"] != "finetune":
        return []
    if "chain" in manifest:
        return list(manifest["chain"])
    if "tasks" in manifest:
        return [{"run": str(parent.path.resolve()), "head": manifest.get("head"), "tasks": {t: v["train"] for t, v in manifest["tasks"].items()}}]
    return [{"run": str(parent.path.resolve()), "train": manifest.get("train"), "head": manifest.get("head"), "labels": len(manifest.get("labels") or [])}]


def _fit_distilled(
    trainer: Any, model: Any, ft: Any, x_train: dict[str, np.ndarray], y_train: np.ndarray, teacher_logits: np.ndarray, x_dev: dict[str, np.ndarray],
    y_dev: np.ndarray, target: RunDir, console: Console, command: list[str], qat: Any = None,
) -> tuple[float, dict[str, Any] | None]:
    """Train ``model`` (through ``trainer``, layer distillation's training model, or itself) on the
    teacher's soft targets; return the seconds and, for layer distillation, the intermediate
    losses on the first 64 dev examples before and after training (the metrics'
    ``intermediate_losses``). With ``finetune.distill_intermediate_epochs`` the steps of those
    epochs train on the intermediate losses alone, the later ones on the prediction loss alone
    (:class:`~ptmkit.training.distillation.DistillationStages`). ``qat``: as :func:`_fit_classifier`."""
    from ptmkit.training.distillation import DistillationLoss, distillation_targets, label_accuracy

    soft = "mse" if ft.distill_loss == "mse" else "ce" if ft.distill == "tinybert" else "kl"
    loss = DistillationLoss(ft.distill_temperature, ft.distill_alpha, soft=soft)
    probe = {name: values[:64] for name, values in x_dev.items()}
    before = trainer.measure(probe) if trainer is not model else None
    targets = distillation_targets(y_train, teacher_logits)
    boundary = ft.distill_intermediate_epochs * -(-len(targets) // ft.batch_size) if before is not None else 0
    if boundary:
        console.print(f"two stages: intermediate losses alone for steps 1..{boundary}, then the prediction layer alone")

    def stages(start: int) -> list[Any]:
        from ptmkit.training.distillation import DistillationStages

        return [DistillationStages(trainer, boundary, start)] if boundary else []

    seconds = _fit_classifier(trainer, ft, x_train, targets, x_dev, y_dev, target, console, command, loss, label_accuracy, stages, student=model, qat=qat)
    if before is None:
        return seconds, None
    examples = len(next(iter(probe.values())))
    return seconds, {"method": ft.distill, "dev_examples": examples, "before": before, "after": trainer.measure(probe)}


def _classifier_to_train(registry: Registry, config: RunConfig, backbone: Any, num_labels: int, console: Console) -> tuple[Any, dict[str, Any], Any]:
    """:func:`build_classifier`, its strategy and parameter counts (printed, and returned for the
    metrics: ``strategy``, ``parameters``, ``trainable_parameters``, ``trainable_share``, and
    ``qat``: true with ``finetune.qat``), and the fake quantisation's handle (None without)."""
    from ptmkit.training.strategies import parameter_counts

    model = build_classifier(registry, config, backbone, num_labels)
    counts = {"strategy": config.finetune.strategy, **parameter_counts(model)}
    share = f"{100 * counts['trainable_share']:.2f}%"
    console.print(f"strategy {counts['strategy']}: {counts['trainable_parameters']:,} of {counts['parameters']:,} parameters train ({share})")
    qat = _fake_quantisation(model, config.finetune, console)
    return model, {**counts, **({"qat": True} if qat is not None else {})}, qat


def _check_teacher_labels(teacher_dir: str, labels: list[str], train_file: str) -> None:
    """Refuse a teacher whose label list (ids in order) is not the training file's.

    Raises:
        ConfigError: naming up to five labels in one and not the other.
    """
    teacher_labels = RunDir(teacher_dir).read_json(LABELS)
    if list(teacher_labels) != list(labels):
        extra = sorted(set(teacher_labels) ^ set(labels))
        detail = f"{', '.join(map(repr, extra[:5]))} in one and not the other" if extra else "the same labels in another order"
        raise ConfigError(f"--teacher {teacher_dir}: its labels differ from {train_file}'s ({detail})")


def _check_teacher(registry: Registry, family: Any, parent: RunDir, inputs: dict[str, str], labels: list[str], method: str) -> None:
    """:func:`_check_teacher_labels`, then for a layer method (``finetune.distill``) :func:`_check_layer_teacher`."""
    _check_teacher_labels(inputs["teacher"], labels, inputs["train"])
    if method != "logits":
        _check_layer_teacher(registry, family, parent, inputs["teacher"], method)


def _check_layer_teacher(registry: Registry, family: Any, parent: RunDir, teacher_dir: str, method: str) -> None:
    """Refuse layer-to-layer distillation (``method``) between these runs before anything is built:
    a family (the student's or the teacher's) that does not expose its attention, a teacher input
    the student's inputs cannot feed, or another vocabulary (the teacher reads the student's ids).

    Raises:
        ConfigError: one line naming the run and what is missing.
    """
    from ptmkit.contract import ExposesAttention

    teacher_run = RunDir(teacher_dir)
    teacher_family = registry.family(teacher_run.manifest()["family"])
    for role, candidate in (("student", family), ("teacher", teacher_family)):
        if not isinstance(candidate, ExposesAttention):
            raise ConfigError(
                f"--distill {method}: the {role}'s family {candidate.name!r} does not expose its blocks' states and attention "
                f"(it does not implement ExposesAttention.attention_internals); --distill logits works with any family"
            )
    fields = {spec.field for spec in family.inputs}
    missing = [spec.name for spec in teacher_family.inputs if spec.field not in fields]
    if missing:
        raise ConfigError(f"--distill {method}: the teacher {teacher_dir} reads {', '.join(missing)}, which the {family.name} student's inputs do not provide")
    student_vocabulary, teacher_vocabulary = parent.load_tokenizer().get_vocab(), teacher_run.load_tokenizer().get_vocab()
    if student_vocabulary != teacher_vocabulary:
        raise ConfigError(
            f"--teacher {teacher_dir}: its vocabulary ({len(teacher_vocabulary):,} tokens) differs from the student's "
            f"({len(student_vocabulary):,}); --distill {method} runs the teacher on the student's token ids, so both need one "
            f"tokenizer (--distill logits takes any)"
        )


def _layer_distillation(registry: Registry, family: Any, backbone: Any, model: Any, ft: Any, teacher_dir: str, console: Console) -> Any:
    """The :class:`~ptmkit.training.distillation.LayerDistillation` training model of ``model`` (the
    student classifier on ``backbone``) and the teacher run's frozen backbone.

    Raises:
        ConfigError: the teacher's positions fewer than ``ft.sequence_length``, its blocks not a
            multiple of the student's, or matched blocks with different head counts.
    """
    import keras

    from ptmkit.training.distillation import LayerDistillation, teacher_layer_step

    teacher_model, teacher_config, _, manifest = load_classifier(teacher_dir, registry)
    teacher_family = registry.family(manifest["family"])
    limit = teacher_family.limits(teacher_config.model).max_sequence_length
    if limit is not None and ft.sequence_length > limit:
        raise ConfigError(f"finetune.sequence_length = {ft.sequence_length}: the teacher {teacher_dir} holds {limit} positions; --distill {ft.distill} runs it on the student's sequences")
    teacher_backbone = next(layer for layer in teacher_model.layers if isinstance(layer, keras.Model))
    student_internals, teacher_internals = family.attention_internals(backbone), teacher_family.attention_internals(teacher_backbone)
    heads = [[int(scores.shape[1]) for scores in m.output["attention_scores"]] for m in (student_internals, teacher_internals)]
    step = teacher_layer_step(len(heads[0]), len(heads[1]), ft.distill)
    pairs = [(m, (m + 1) * step - 1) for m in range(len(heads[0]))] if ft.distill == "tinybert" else [(len(heads[0]) - 1, len(heads[1]) - 1)]
    for m, t in pairs:
        if heads[0][m] != heads[1][t]:
            raise ConfigError(
                f"--distill {ft.distill}: student block {m} has {heads[0][m]} attention heads and teacher block {t} {heads[1][t]}; "
                f"{ft.distill} compares attention head by head, so they must match"
            )
    teacher_inputs = {spec.name: family.input(spec.field).name for spec in teacher_family.inputs}
    mapped = ", ".join(f"{m}->{t}" for m, t in pairs)
    console.print(f"distilling layers ({ft.distill}, weight {ft.distill_intermediate_weight}): student block -> teacher block {mapped}")
    return LayerDistillation(model, student_internals, teacher_internals, ft.distill, teacher_inputs, step, ft.distill_intermediate_weight)


def _teacher_logits(teacher_dir: str, text_sets: list[list[str]], console: Console) -> list[np.ndarray]:
    """The fine-tuned teacher's ``(texts, classes)`` float32 logits on each list of ``text_sets``,
    through its own tokenizer and sequence length (Keras, batches of 128)."""
    import gc

    from ptmkit.data.tokenization import encode_texts

    model, config, tokenizer, manifest = load_classifier(teacher_dir)
    family = get_registry().family(manifest["family"])
    pad = family.special_tokens(tokenizer).padding_id
    console.print(f"teacher {teacher_dir}: its logits on {sum(len(t) for t in text_sets):,} texts")
    outputs = []
    for texts in text_sets:
        x = encode_texts(tokenizer, texts, config.finetune.sequence_length, family.inputs, pad)
        outputs.append(np.asarray(model.predict(x, batch_size=128, verbose=0), np.float32))
    del model
    gc.collect()
    return outputs


def _fit_classifier(
    model: Any, ft: Any, x_train: dict[str, np.ndarray], y_train: np.ndarray, x_dev: dict[str, np.ndarray], y_dev: np.ndarray,
    target: RunDir, console: Console, command: list[str], loss: Any = None, accuracy: Any = None, extra: Any = None, student: Any = None, qat: Any = None,
) -> float:
    """Compile and train ``model`` over ``ft.epochs`` epochs from the newest checkpoint in
    ``target/checkpoints`` (if any), printing dev accuracy at each epoch's end; return the seconds.
    ``loss`` and ``accuracy`` (a function of ``y_true, y_pred``) replace the cross-entropy on label
    ids and its accuracy (distillation's targets are rows of label and teacher logits); ``extra``,
    a function of the start step, returns callbacks to run first (module replacement's schedule);
    ``student``, the classifier inside a training model that wraps it (layer distillation's), is
    the one whose backbone gets the layer-wise schedules and whose kernels magnitude pruning prunes.
    ``qat``, :mod:`ptmkit.training.qat`'s handle, has the weights put on their int8 grid at the end
    (what is saved and evaluated)."""
    import keras

    from ptmkit.training.checkpoint import CheckpointCallback, interrupt_note, latest_step, restore_state
    from ptmkit.training.pretrain import fit_steps
    from ptmkit.training.progress import DevAccuracyCallback, ProgressCallback
    from ptmkit.training.schedule import adamw

    steps_per_epoch = -(-len(y_train) // ft.batch_size)
    total = steps_per_epoch * ft.epochs
    model.compile(
        optimizer=adamw(
            ft.learning_rate, ft.weight_decay, total, ft.warmup_ratio, ft.adam_epsilon, *_layer_schedules(student or model, ft, steps_per_epoch),
            schedule=ft.schedule, ratio=ft.schedule_ratio,
        ),
        loss=loss or keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.MeanMetricWrapper(accuracy, name="accuracy") if accuracy else keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        jit_compile=ft.jit_compile,
    )
    checkpoints = target / "checkpoints"
    start = restore_state(model, checkpoints) if latest_step(checkpoints) else 0
    if start:
        console.print(f"resuming from step {start} of {total} ({checkpoints})")
    pruning = _magnitude_pruning(student or model, ft, start, total)
    first = [*(extra(start) if extra else []), *pruning]
    started = time.perf_counter()
    if start < total:
        every = ft.checkpoint_every or steps_per_epoch
        with interrupt_note(checkpoints, total, command):
            fit_steps(model, lambda step: step_batch(x_train, y_train, ft.batch_size, ft.seed, step), start, total, [
                *first,  # first: the checkpoints and the dev accuracy see the pruned weights
                CheckpointCallback(checkpoints, start, total, every, epoch_steps=steps_per_epoch),
                ProgressCallback("fine-tuning", start, total, ft.batch_size * ft.sequence_length, console, step_log=target / STEP_LOG),
                DevAccuracyCallback(x_dev, y_dev, start, steps_per_epoch, console, dev_log=target / DEV_LOG),
                keras.callbacks.TensorBoard(log_dir=str(target / "logs")),
            ])
    for callback in pruning:
        console.print(f"magnitude pruning: {callback.sparsity():.1%} of {len(callback.kernels)} kernels' weights are zero")
    if qat is not None:
        qat.snap_weights()
    return time.perf_counter() - started


def _layer_schedules(model: Any, ft: Any, steps_per_epoch: int) -> tuple[dict[str, float] | None, dict[str, int] | None]:
    """``(learning-rate factors, unfreezing steps)`` of ``model``'s backbone for ``adamw``, each
    None when ``finetune.layer_lr_decay`` is 1 / ``finetune.gradual_unfreezing`` is off."""
    import keras

    from ptmkit.training.strategies import layer_lr_multipliers, unfreeze_steps

    backbone = next(layer for layer in model.layers if isinstance(layer, keras.Model))
    multipliers = layer_lr_multipliers(backbone, ft.layer_lr_decay) if ft.layer_lr_decay < 1 else None
    return multipliers, unfreeze_steps(backbone, steps_per_epoch) if ft.gradual_unfreezing else None


def _fake_quantisation(model: Any, ft: Any, console: Console) -> Any:
    """``finetune.qat``'s handle on ``model`` (:mod:`ptmkit.training.qat`), None when it is off."""
    if not ft.qat:
        return None
    from ptmkit.training.qat import apply_fake_quantisation

    handle = apply_fake_quantisation(model, ft.qat_ema_decay, 64 if ft.qat_reduce_range else 127)
    console.print(f"quantisation-aware training: {len(handle.products)} dense layers (inputs and weights) and {len(handle.tables)} embedding tables fake-quantised to int8")
    return handle


def _magnitude_pruning(model: Any, ft: Any, start: int, total: int) -> list[Any]:
    """The gradual magnitude pruning callback of ``finetune.sparsity`` (none when it is 0)."""
    from ptmkit.training.sparsity import MagnitudePruning, prunable_kernels

    if not ft.sparsity:
        return []
    begin, end = round(ft.sparsity_begin * total), max(1, round(ft.sparsity_end * total))
    return [MagnitudePruning(prunable_kernels(model), ft.sparsity, begin, end, ft.sparsity_every, start)]


def _refuse_changed_pretraining_keys(data: dict[str, Any], stored: dict[str, Any], source: str, prefix: str = "") -> None:
    """Fine-tuning keeps the pre-trained run's sections: a ``--config`` key outside ``[finetune]``
    and ``[head]`` must equal the run's (one config file may serve both commands), else ConfigError."""
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if not prefix and key in ("finetune", "head", "family"):
            continue
        if isinstance(value, dict):
            inner = stored.get(key)
            _refuse_changed_pretraining_keys(value, inner if isinstance(inner, dict) else {}, source, f"{dotted}.")
        elif stored.get(key) != value:
            was = "unset" if key not in stored else repr(stored[key])
            raise ConfigError(
                f"{source}: config key '{dotted}' = {value!r} differs from the pre-trained run's ({was}); fine-tuning keeps the "
                f"run's [{dotted.split('.')[0]}]: drop it, and set finetune.* or head.* keys"
            )


def _finetune_word_vectors(
    registry: Registry, parent: RunDir, manifest: dict[str, Any], head: Any, config: RunConfig, overrides: list[str],
    train_file: str | Path, dev_file: str | Path, test_file: str | Path | None, target: RunDir, console: Console,
) -> dict[str, Any]:
    """Fine-tune with a head that trains itself on the parent's word vectors (see the module
    docstring); the run it writes belongs to ``head.run_family``."""
    for override in overrides:
        key = override.partition("=")[0].strip()
        if key == "finetune.strategy":  # --strategy arrives as this override
            raise ConfigError(
                f"--strategy / finetune.strategy = {override.partition('=')[2].strip()!r}: the {head.name} head trains on the run's "
                f"word vectors, with no backbone to adapt or freeze; drop it (strategies apply to transformer runs)"
            )
        if key == "finetune.qat":  # --qat arrives as this override
            raise ConfigError(f"--qat / finetune.qat: the {head.name} head trains on the run's word vectors in one pass, outside Keras' fit; drop it")
        if key.startswith("finetune.") and key != "finetune.head":
            raise ConfigError(f"--set {override!r}: the {head.name} head trains with its own settings; set head.* keys (e.g. head.epochs)")
    family = registry.family(manifest["family"])
    if not isinstance(family, ProvidesWordVectors):
        raise ConfigError(f"finetune.head = {head.name!r} trains on static word vectors; {family.name} runs have none")
    run_family = registry.family(head.run_family)
    if not isinstance(run_family, ClassifiesRows):
        raise ConfigError(f"head {head.name!r} writes {run_family.name} runs, which are not bag-of-rows classifiers (no load_row_classifier; a plugin bug)")
    texts, labels, y_train = load_labelled(train_file)
    dev_texts, _, y_dev = load_labelled(dev_file, labels)
    test_texts, _, y_test = load_labelled(test_file, labels) if test_file is not None else ([], labels, np.zeros(0, np.int32))
    console.print(f"fine-tuning the {head.name} head on {family.name} vectors: {len(texts):,} examples, {len(labels)} labels; dev {len(dev_texts):,} examples")
    vectors = family.load_word_vectors(parent.path)
    created = not target.path.exists()
    target.path.mkdir(parents=True, exist_ok=True)
    try:
        started = time.perf_counter()
        trained = head.train(vectors, config.model, texts, y_train, labels, config.head, target.path, console)
        seconds = time.perf_counter() - started
        predictions = np.argmax(trained.logits(dev_texts), axis=-1)
        metrics: dict[str, Any] = {
            **dev_scores(y_train, y_dev, predictions, len(labels)),
            "train_examples": len(texts),
            "dev_examples": len(dev_texts),
            "labels": len(labels),
            "train_seconds": round(seconds, 1),
        }
        if test_file is not None:
            test_predictions = np.argmax(trained.logits(test_texts), axis=-1)
            metrics["test_accuracy"] = round(float(np.mean(test_predictions == y_test)), 4)
            metrics["test_macro_f1"] = round(macro_f1(y_test, test_predictions, len(labels)), 4)
            metrics["test_examples"] = len(test_texts)
        atomic_write_text(target / CONFIG, to_toml({
            "family": run_family.name, "model": trained.model_config, "finetune": {"head": head.name}, "head": dataclasses.asdict(config.head),
        }))
        target.write_json(LABELS, labels)
        target.write_json(METRICS, metrics)
    except BaseException:
        if created:
            shutil.rmtree(target.path, ignore_errors=True)
        raise
    plugin = registry.owner("head", head.name)
    target.write_manifest(
        stage="finetune",
        family=run_family.name,
        plugin={"name": plugin.name, "distribution": plugin.distribution, "version": plugin.version},
        head=head.name,
        labels=labels,
        parent=str(parent.path.resolve()),
        parent_family=family.name,
        train=str(Path(train_file).resolve()),
        dev=str(Path(dev_file).resolve()),
        test=str(Path(test_file).resolve()) if test_file is not None else None,
        inputs=list(run_family.input_names),
        outputs=["logits"],
    )
    return metrics


def load_classifier(run_dir: str | Path, registry: Registry | None = None) -> tuple[Any, RunConfig, Any, dict[str, Any]]:
    """Rebuild a fine-tuned run's model and load its weights (a multi-task run's model returns a
    list of logits, one per task in its manifest's ``tasks`` order).

    Returns:
        ``(model, config, tokenizer, manifest)``.

    Raises:
        RunDirError: the run has no head (a pre-training run), or missing/corrupted files.
    """
    from ptmkit.training.setup import quiet_tensorflow

    quiet_tensorflow()
    registry = registry or get_registry()
    run = RunDir(run_dir)
    manifest = run.manifest()
    if not manifest.get("head"):
        raise RunDirError(f"{run.path}: this {manifest['stage']} run has no head; fine-tune it first (`ptmkit finetune {run.path} ...`)")
    if "tasks" in manifest:  # multi-task: the model of every head, one output per task
        from ptmkit.training.multitask_model import load_multitask_weights

        backbone, config, tokenizer, manifest = load_backbone(registry, run)
        model, _ = load_multitask_weights(registry, run, config, backbone, manifest)
        return model, config, tokenizer, manifest
    backbone, config, tokenizer, _ = load_backbone(registry, run)
    labels = run.read_json(LABELS)
    model = build_classifier(registry, config, backbone, len(labels))
    load_weights(model, run.require(MODEL_WEIGHTS))
    return model, config, tokenizer, manifest
