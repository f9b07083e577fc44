"""Helpers of the transformer plugin's tests: 20 real English-German pairs and a tiny config that overfits them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

DEV = Path(__file__).resolve().parents[3] / "data" / "parallel" / "en-de-dev.tsv"

#: A model small enough to overfit 20 short pairs in about 15 s on two CPU cores (250 full-batch
#: steps: BLEU 100, dev loss 0.94, the label-smoothed floor; 350 steps end at 0.94 too).
TINY_TRANSFORMER = [
    "model.vocabulary_size=400",
    "model.min_frequency=1",
    "model.encoder_layers=1",
    "model.decoder_layers=2",
    "model.hidden_dim=64",
    "model.num_heads=4",
    "model.intermediate_dim=128",
    "model.dropout=0.0",
    "model.max_sequence_length=32",
    "model.batch_size=20",
    "model.max_steps=250",
    "model.warmup_steps=50",
    "model.learning_rate_scale=1.0",
    "model.checkpoint_every=125",
    "model.dev_sentences=20",
]


def short_pairs(count: int = 20) -> list[tuple[str, str]]:
    """The first ``count`` pairs of the shipped dev file with at most 5 English and 6 German
    words and no printf placeholder."""
    pairs = []
    for line in DEV.read_text(encoding="utf-8").splitlines()[1:]:
        source, target = line.split("\t")[:2]
        if len(source.split()) <= 5 and len(target.split()) <= 6 and "%" not in source + target:
            pairs.append((source, target))
        if len(pairs) == count:
            break
    return pairs


def write_pairs(path: Path, pairs: list[tuple[str, str]], header: str = "en\tde") -> Path:
    path.write_text("".join(f"{line}\n" for line in [header, *(f"{s}\t{t}" for s, t in pairs)]), encoding="utf-8")
    return path


def check_resume_after_interrupt(argv: Any, resume_argv: list[str], tmp_path: Path, monkeypatch: Any) -> dict[str, Any]:
    """Train ``argv(tmp_path / "whole")`` through; train ``argv(tmp_path / "cut")`` with a Ctrl-C
    after step 6 (two steps past a checkpoint at step 4: exit 130, no manifest, the checkpoint at
    step 4); run ``resume_argv`` (which resumes ``tmp_path / "cut"``); assert the resumed backbone's
    weights equal the uninterrupted run's bit for bit, and return the resumed run's metrics."""
    import json

    import h5py
    import numpy as np

    import ptmkit.api as api
    from ptmkit.testing import main

    def weights(run: Path) -> dict[str, np.ndarray]:
        arrays: dict[str, np.ndarray] = {}
        with h5py.File(run / "backbone.weights.h5", "r") as handle:
            handle.visititems(lambda name, item: arrays.__setitem__(name, item[()]) if isinstance(item, h5py.Dataset) else None)
        return arrays

    assert main(argv(tmp_path / "whole")) == 0
    original = api.ProgressCallback.on_train_batch_end

    def interrupt_after_step_6(self: Any, batch: int, logs: Any = None) -> None:
        original(self, batch, logs)
        if self.step == 6:
            raise KeyboardInterrupt

    monkeypatch.setattr(api.ProgressCallback, "on_train_batch_end", interrupt_after_step_6)
    assert main(argv(tmp_path / "cut")) == 130
    assert json.loads((tmp_path / "cut" / "checkpoints" / "latest.json").read_text())["step"] == 4
    assert not (tmp_path / "cut" / "manifest.json").exists()
    monkeypatch.setattr(api.ProgressCallback, "on_train_batch_end", original)
    assert main(resume_argv) == 0
    whole, resumed = weights(tmp_path / "whole"), weights(tmp_path / "cut")
    assert whole.keys() == resumed.keys() and len(whole) > 10
    for name, value in whole.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)
    metrics = json.loads((tmp_path / "cut" / "metrics.json").read_text())
    assert metrics["resumed_from_step"] == 4
    return metrics
