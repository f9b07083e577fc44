"""``ptmkit train elmo ... --resume``: a recurrent family the core pre-trains resumes through the
core's checkpoints to the weights of the uninterrupted run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from inplugins import in_tree_plugins  # noqa: F401 - the fixture
from test_resume import weights

pytestmark = pytest.mark.usefixtures("in_tree_plugins")

TINY_ELMO = [
    "model.vocabulary_size=200",
    "model.min_frequency=1",
    "model.char_embedding_dim=4",
    "model.filter_widths=[1,2,3]",
    "model.filter_counts=[4,4,8]",
    "model.projection_dim=8",
    "model.lstm_dim=12",
    "train.sequence_length=24",
    "train.batch_size=8",
    "train.max_steps=4",
    "train.checkpoint_every=2",
    "train.heldout_lines=12",
    "train.learning_rate=3e-3",
]


def test_elmo_resumes_to_the_uninterrupted_weights(tiny_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopped at the end of step 3 (the checkpoint is step 2's), then resumed: the same weights."""
    from ptmkit.cli import main
    from ptmkit.training import progress
    from ptmkit.training.pretrain import pretrain

    pretrain("elmo", tiny_corpus, tmp_path / "whole", overrides=TINY_ELMO)
    original = progress.ProgressCallback.on_train_batch_end

    def stop_after_step_3(self: progress.ProgressCallback, batch: int, logs: dict | None = None) -> None:
        original(self, batch, logs)
        if self.step == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(progress.ProgressCallback, "on_train_batch_end", stop_after_step_3)
    with pytest.raises(KeyboardInterrupt):
        pretrain("elmo", tiny_corpus, tmp_path / "cut", overrides=TINY_ELMO)
    monkeypatch.setattr(progress.ProgressCallback, "on_train_batch_end", original)
    assert not (tmp_path / "cut" / "manifest.json").exists()
    assert main(["train", "elmo", "--corpus", str(tiny_corpus), "--out", str(tmp_path / "cut"), "--resume"]) == 0
    expected, actual = weights(tmp_path / "whole" / "backbone.weights.h5"), weights(tmp_path / "cut" / "backbone.weights.h5")
    assert expected.keys() == actual.keys() and len(expected) > 20
    for name, value in expected.items():
        np.testing.assert_allclose(actual[name], value, atol=1e-6, err_msg=name)
