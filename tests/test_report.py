"""``ptmkit report``: the step and dev logs training writes, and the HTML file drawn from them.

The logs are checked against what they record (the learning-rate schedule, the final dev accuracy,
the model's parameter count); the report against the run's files (every metric named, every figure
a real image).
"""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from tinyconfig import DATA

from ptmkit.cli import main

DEV = DATA / "classify" / "polarity-200-dev.txt"
TRAIN = DATA / "classify" / "polarity-200-train.txt"


@pytest.fixture(scope="module")
def finetuned(tiny_pretrained: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ptmkit.training.finetune import finetune

    out = tmp_path_factory.mktemp("report") / "polarity"
    finetune(tiny_pretrained, TRAIN, DEV, out, overrides=["finetune.epochs=2", "finetune.sequence_length=32"])
    return out


def images(page: str) -> dict[str, np.ndarray]:
    """``{caption: RGBA pixels}`` of every inlined PNG."""
    import matplotlib.image

    found = re.findall(r"<img alt='([^']*)' src='data:image/png;base64,([^']*)'>", page)
    return {alt: matplotlib.image.imread(io.BytesIO(base64.b64decode(data)), format="png") for alt, data in found}


def test_the_step_log_records_the_schedule_and_the_metrics(tiny_pretrained: Path) -> None:
    from ptmkit.config import read_toml
    from ptmkit.report import read_json_lines
    from ptmkit.training.schedule import WarmupLinearDecay

    steps = read_json_lines(tiny_pretrained / "logs" / "steps.jsonl", "step")
    train = read_toml(tiny_pretrained / "config.toml")["train"]
    assert [s["step"] for s in steps] == list(range(1, train["max_steps"] + 1))  # max_steps < 100: every step
    schedule = WarmupLinearDecay(train["learning_rate"], int(round(train["warmup_ratio"] * train["max_steps"])), train["max_steps"])
    for record in steps:  # the rate the step after it uses: the optimizer has counted `step` iterations
        assert record["learning_rate"] == pytest.approx(float(schedule(record["step"])), rel=1e-6)
        assert np.isfinite(record["loss"]) and record["loss"] > 0
    assert all(s["tokens_per_second"] > 0 for s in steps[1:])  # the first step pays for tracing: none


def test_the_dev_log_ends_at_the_runs_dev_accuracy(finetuned: Path) -> None:
    from ptmkit.report import read_json_lines

    dev = read_json_lines(finetuned / "logs" / "dev.jsonl", "epoch")
    metrics = json.loads((finetuned / "metrics.json").read_text())
    assert [d["epoch"] for d in dev] == [1, 2]
    assert dev[-1]["dev_accuracy"] == pytest.approx(metrics["dev_accuracy"], abs=1e-4)


def test_parameters_per_block_add_up_to_the_models_count(tiny_pretrained: Path) -> None:
    from ptmkit.report import parameters_per_block

    blocks = dict(parameters_per_block(tiny_pretrained / "backbone.weights.h5"))
    metrics = json.loads((tiny_pretrained / "metrics.json").read_text())
    assert sum(blocks.values()) == metrics["parameters"]
    assert not any(name.startswith("optimizer") for name in blocks)


def test_a_report_of_two_runs_names_every_metric_and_draws_real_figures(tiny_pretrained: Path, finetuned: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert main(["report", str(tiny_pretrained), str(finetuned), "--output", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    for run in (tiny_pretrained, finetuned):
        for key in json.loads((run / "metrics.json").read_text()):
            assert f"<td>{key}</td>" in page, key
    drawn = images(page)
    for caption in ("loss", "learning rate", "throughput (tokens/s)", "dev accuracy per epoch", f"{finetuned.name}: parameters per block"):
        assert caption in drawn, sorted(drawn)
    for caption, pixels in drawn.items():
        assert pixels.shape[0] > 100 and pixels.shape[1] > 100, caption
        assert float(np.var(pixels[..., :3])) > 1e-3, f"{caption}: a blank image"


def test_a_word_vector_report_lists_neighbours_and_a_projection(tmp_path: Path, tiny_corpus: Path) -> None:
    from ptmkit.wordvectors.commands import load_vectors
    from ptmkit.wordvectors.similarity import most_similar

    run = tmp_path / "sgns"
    assert main(["train", "word2vec", "--corpus", str(tiny_corpus), "--out", str(run), "--set", "model.min_count=1", "--set", "model.vector_size=16"]) == 0
    _, vectors = load_vectors(run)
    word = next(w for w in vectors.words if w.isalpha() and len(w) >= 3)
    assert main(["report", str(run), "--words", word, "nosuchword"]) == 0
    page = (run / "report.html").read_text(encoding="utf-8")
    best, score = most_similar(vectors, [word], topn=8)[0]
    assert f"<td>{word}</td><td>{best} ({score:.3f})" in page
    assert "<td>nosuchword</td><td>no vector (out of the vocabulary, or no n-gram)</td>" in page
    assert f"{run.name}: word vectors" in images(page)


@pytest.mark.parametrize("target", ["/nonexistent/run", "README.md"])
def test_report_on_what_is_no_run_exits_2_in_one_line(target: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", target]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and target in err, err
