"""Multi-task fine-tuning (``ptmkit finetune RUN --task NAME=TRAIN:DEV ...``,
:mod:`ptmkit.training.multitask`): the task-sampling rule against its formula over many draws; a
two-task run on the tiny BERT run (polarity and WordNet supersenses), its per-task dev metrics
against the saved model's, its one ONNX export against Keras head by head, the lean Predictor's
choice of task; and the bad inputs' one-line errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from test_two_stage import POLARITY_DEV, POLARITY_TRAIN, TINY_FINETUNE, supersense_files


@pytest.mark.parametrize(
    ("sampling", "temperature", "weights"),
    [
        ("proportional", 1.0, [160, 40, 800]),  # MT-DNN: p_i = n_i / sum n
        ("temperature", 2.0, [math.sqrt(160), math.sqrt(40), math.sqrt(800)]),  # p_i ~ n_i^(1/T)
        ("temperature", 5.0, [160 ** 0.2, 40 ** 0.2, 800 ** 0.2]),
        ("uniform", 1.0, [1, 1, 1]),
    ],
)
def test_task_shares_over_many_draws_follow_the_sampling_formula(sampling: str, temperature: float, weights: list[float]) -> None:
    from ptmkit.training.multitask import task_probabilities, task_schedule

    expected = np.asarray(weights) / sum(weights)
    probabilities = task_probabilities([160, 40, 800], sampling, temperature)
    np.testing.assert_allclose(probabilities, expected, rtol=1e-12)
    draws = 20_000
    counts = np.bincount(task_schedule(probabilities, draws, seed=7), minlength=3)
    standard_errors = np.sqrt(draws * expected * (1 - expected))
    assert np.all(np.abs(counts - draws * expected) < 4 * standard_errors), (counts, draws * expected)
    assert np.array_equal(task_schedule(probabilities, 50, seed=7), task_schedule(probabilities, 50, seed=7))  # resumable: pure


@pytest.fixture(scope="module")
def multitask_run(tiny_pretrained: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object], Path]:
    from ptmkit.training.multitask import finetune_multitask

    directory = tmp_path_factory.mktemp("multitask")
    train, dev, _ = supersense_files(directory)
    out = directory / "run"
    specs = [f"polarity={POLARITY_TRAIN}:{POLARITY_DEV}", f"supersense={train}:{dev}"]
    metrics = finetune_multitask(tiny_pretrained, specs, out, overrides=[*TINY_FINETUNE, "finetune.epochs=2", "finetune.task_sampling=uniform"])
    return out, metrics, dev


def test_a_two_task_run_reports_each_head_on_its_dev_set(multitask_run: tuple[Path, dict[str, object], Path]) -> None:
    from ptmkit.data.tokenization import encode_texts
    from ptmkit.plugins import get_registry
    from ptmkit.training.finetune import load_labelled
    from ptmkit.training.multitask import load_multitask

    out, metrics, _ = multitask_run
    model, heads, config, tokenizer, manifest = load_multitask(out)
    assert list(manifest["tasks"]) == ["polarity", "supersense"] and manifest["outputs"] == ["logits_polarity", "logits_supersense"]
    family = get_registry().family(manifest["family"])
    tasks = metrics["tasks"]
    assert isinstance(tasks, dict) and json.loads((out / "metrics.json").read_text())["tasks"] == tasks
    steps = 0
    for name, task in manifest["tasks"].items():
        texts, _, y = load_labelled(task["dev"], task["labels"])
        x = encode_texts(tokenizer, texts, config.finetune.sequence_length, family.inputs, family.special_tokens(tokenizer).padding_id)
        accuracy = float(np.mean(np.argmax(heads[name].predict(x, verbose=0), -1) == y))
        assert tasks[name]["dev_accuracy"] == round(accuracy, 4) and tasks[name]["dev_examples"] == len(y)
        assert heads[name].output.shape[-1] == len(task["labels"]) == tasks[name]["labels"]
        assert tasks[name]["share"] == 0.5 and tasks[name]["steps"] > 0  # uniform
        steps += tasks[name]["steps"]
    from ptmkit.rundir import RunDir
    from ptmkit.training.finetune import load_encoder

    encoder, _ = load_encoder(get_registry(), RunDir(out))  # a multi-task run as the intermediate run of a later fine-tuning
    import keras

    shared = next(layer for layer in heads["polarity"].layers if isinstance(layer, keras.Model))  # the backbone both heads share
    assert shared is next(layer for layer in heads["supersense"].layers if isinstance(layer, keras.Model))
    assert all(np.array_equal(a, b) for a, b in zip(encoder.get_weights(), shared.get_weights(), strict=True))
    from ptmkit.compress import prune_heads_run
    from ptmkit.console import default_console
    from ptmkit.errors import RunDirError

    with pytest.raises(RunDirError, match=r"is a multi-task run \(polarity, supersense\); attention-head pruning works on a run with one head"):
        prune_heads_run(out, out.parent / "pruned", default_console(), fraction=0.5)
    assert steps == metrics["steps"] == 2 * (3 + 3)  # 2 epochs of ceil(48 / 16) batches of each task (max_train_examples=48)


def test_one_export_serves_every_head(multitask_run: tuple[Path, dict[str, object], Path], tmp_path: Path) -> None:
    import onnxruntime as ort

    from ptmkit.exporting import export_run
    from ptmkit.training.finetune import load_classifier
    from ptmkit_export import Predictor

    out, _, dev = multitask_run
    manifest = export_run(out, tmp_path / "export")
    assert list(manifest["tasks"]) == ["polarity", "supersense"] and manifest["default_task"] == "polarity"
    texts = ["a good film", "genus of fungi forming continuous hyaline spores", "in a legible manner", "bad"]
    polarity, supersense = Predictor(tmp_path / "export"), Predictor(tmp_path / "export", task="supersense")
    assert polarity.task == "polarity" and polarity.labels == ["neg", "pos"] and supersense.labels == manifest["tasks"]["supersense"]["labels"]
    model = load_classifier(out)[0]
    feeds = polarity.encode(texts)
    keras_logits = [np.asarray(values) for values in model(feeds, training=False)]
    session = ort.InferenceSession(str(tmp_path / "export" / "model.onnx"))
    onnx_logits = session.run(["logits_polarity", "logits_supersense"], feeds)
    for expected, actual in zip(keras_logits, onnx_logits, strict=True):
        assert actual.shape == expected.shape and np.max(np.abs(actual - expected)) <= 1e-4
    np.testing.assert_allclose(polarity.logits(texts), keras_logits[0], atol=1e-4)
    np.testing.assert_allclose(supersense.logits(texts), keras_logits[1], atol=1e-4)
    assert not np.allclose(keras_logits[0][:, :1], keras_logits[1][:, :1])  # two heads, not one twice
    with pytest.raises(ValueError, match="has no task 'sentiment'; its tasks: polarity, supersense"):
        Predictor(tmp_path / "export", task="sentiment")
    from ptmkit_export.server import ModelService

    served = ModelService(supersense, "multi")  # the server answers with the chosen head's labels
    result = served.run_batch("text", [texts[:2]])[0]
    np.testing.assert_allclose(result["logits"], keras_logits[1][:2], atol=1e-4)
    expected = {"labels": supersense.labels, "tasks": ["polarity", "supersense"], "served_task": "supersense"}
    assert served.metadata()["parameters"].items() >= expected.items()


def _refusal(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    from ptmkit.cli import main

    assert main(list(args)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_bad_tasks_are_refused_in_one_line(tiny_pretrained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty, header = tmp_path / "empty.tsv", tmp_path / "header.tsv"
    empty.write_text("", encoding="utf-8")
    header.write_text("label\ttext\n", encoding="utf-8")
    run, out = str(tiny_pretrained), str(tmp_path / "out")
    polarity = f"polarity={POLARITY_TRAIN}:{POLARITY_DEV}"
    cases = [
        ([polarity, polarity], "--task polarity: the task name is given twice"),
        ([polarity, f"topic={tmp_path / 'missing.tsv'}:{POLARITY_DEV}"], f"--task topic: {tmp_path / 'missing.tsv'}: no such training file"),
        ([polarity, f"topic={POLARITY_TRAIN}:{tmp_path / 'missing.tsv'}"], "no such dev file"),
        ([polarity, f"topic={empty}:{POLARITY_DEV}"], f"--task topic: {empty}: no text to read (it is empty)"),
        ([polarity, f"topic={header}:{POLARITY_DEV}"], f"--task topic: {header}: no text to read (1 line(s), 1 not blank, but no records: a header only?)"),
        ([polarity, f"topic={POLARITY_TRAIN}:{empty}"], f"--task topic: {empty}: no text to read (it is empty)"),
        ([polarity], "multi-task fine-tuning needs at least two tasks, got 1"),
        ([polarity, f"topic={POLARITY_TRAIN}"], "expected NAME=TRAIN:DEV"),
        ([polarity, f"2x={POLARITY_TRAIN}:{POLARITY_DEV}"], "must be a letter then letters, digits or _"),
    ]
    for tasks, message in cases:
        err = _refusal(capsys, "finetune", run, "--out", out, *[arg for task in tasks for arg in ("--task", task)])
        assert message in err, err
        assert not Path(out).exists()
    err = _refusal(capsys, "finetune", run, "--out", out, "--task", polarity, "--task", polarity.replace("polarity=", "other="), "--train", str(POLARITY_TRAIN))
    assert "--train: multi-task fine-tuning reads each task's files from --task NAME=TRAIN:DEV" in err
    assert "give --train FILE and --dev FILE" in _refusal(capsys, "finetune", run, "--out", out)


def test_a_head_changes_only_on_its_own_tasks_steps(tmp_path: Path) -> None:
    """MT-DNN's update: a step of task a moves the encoder and a's head; b's head gets no gradient,
    no Adam moment and no weight decay (AdamW's decay alone would shrink its kernel)."""
    import keras

    from ptmkit.config import FinetuneConfig
    from ptmkit.console import default_console
    from ptmkit.training.multitask import _fit

    keras.utils.set_random_seed(0)
    inputs = {"x": keras.Input((3,), name="x")}
    backbone = keras.Model(inputs, keras.layers.Dense(4, name="encoder")(inputs["x"]), name="backbone")
    heads = {}
    for name, labels in (("a", 2), ("b", 3)):
        x = {"x": keras.Input((3,), name="x")}
        heads[name] = keras.Model(x, keras.layers.Dense(labels, name="logits")(backbone(x)), name=f"classifier_{name}")
    model = keras.Model(inputs, [heads["a"](inputs), heads["b"](inputs)])
    rng = np.random.default_rng(0)
    data = {name: {part: ({"x": rng.normal(size=(8, 3)).astype("float32")}, rng.integers(0, labels, 8).astype("int32")) for part in ("train", "dev")}
            for name, labels in (("a", 2), ("b", 3))}
    before = {name: [np.asarray(w).copy() for w in head.get_layer("logits").weights] for name, head in heads.items()}
    encoder = np.asarray(backbone.get_layer("encoder").kernel).copy()
    ft = FinetuneConfig(epochs=2, batch_size=4, learning_rate=0.1, warmup_ratio=0.0, weight_decay=0.5)
    _, schedule = _fit(model, heads, ft, data, np.array([1.0, 0.0]), tmp_path / "checkpoints", ["ptmkit"], default_console())
    assert schedule.tolist() == [0] * 8  # 2 epochs of 2 + 2 batches, all drawn from a
    assert all(np.array_equal(w0, np.asarray(w)) for w0, w in zip(before["b"], heads["b"].get_layer("logits").weights, strict=True))
    assert not np.array_equal(before["a"][0], np.asarray(heads["a"].get_layer("logits").kernel))
    assert not np.array_equal(encoder, np.asarray(backbone.get_layer("encoder").kernel))


def test_an_interrupted_run_resumes_to_the_uninterrupted_weights(
    multitask_run: tuple[Path, dict[str, object], Path], tiny_pretrained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The module's run again, stopped by Ctrl-C right after its first epoch's checkpoint, then
    continued with ``--resume``: the same weights, bit for bit, as the run that was not stopped."""
    import ptmkit.training.checkpoint as checkpoint
    from ptmkit.errors import ConfigError, Interrupted
    from ptmkit.training.multitask import finetune_multitask, load_multitask

    whole = multitask_run[0]
    config = json.loads((whole / "manifest.json").read_text())
    specs = [f"{name}={task['train']}:{task['dev']}" for name, task in config["tasks"].items()]
    overrides = [*TINY_FINETUNE, "finetune.epochs=2", "finetune.task_sampling=uniform"]
    out, save_state, saved = tmp_path / "run", checkpoint.save_state, []

    def save_then_stop(model: object, directory: Path, step: int) -> Path:
        saved.append(step)
        save_state(model, directory, step)
        raise KeyboardInterrupt  # as Ctrl-C would, after the first checkpoint

    monkeypatch.setattr(checkpoint, "save_state", save_then_stop)
    with pytest.raises(Interrupted, match="holds step 6 of 12; `ptmkit finetune .* --resume` continues"):
        finetune_multitask(tiny_pretrained, specs, out, overrides=overrides)
    monkeypatch.setattr(checkpoint, "save_state", save_state)
    assert saved == [6] and not (out / "manifest.json").exists()  # 3 + 3 batches an epoch (48 examples each, batch 16)
    with pytest.raises(ConfigError, match="--resume: --task .* differs from the interrupted run's"):
        finetune_multitask(tiny_pretrained, specs[::-1], out, overrides=overrides, resume=True)
    finetune_multitask(tiny_pretrained, specs, out, overrides=overrides, resume=True)
    assert "resuming from step 6 of 12" in capsys.readouterr().err and not (out / "checkpoints").exists()
    # the weights (a loaded model's dropout seeds are drawn afresh, not read from the file)
    expected, actual = ([v for v in load_multitask(run)[0].variables if "seed_generator" not in v.path] for run in (whole, out))
    assert len(expected) == len(actual) > 10
    for want, got in zip(expected, actual, strict=True):
        assert np.array_equal(want.numpy(), got.numpy()), f"{want.path}: the resumed run differs from the uninterrupted one"
