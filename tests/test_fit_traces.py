"""One trace of the train step per ``fit``: the optimizer's slots and the compiled metrics' state
are built before it (``ptmkit.training.pretrain.build_training_state``). Left to Keras (3.15, no
``tf.distribute`` strategy), they are created inside the first trace, and TensorFlow then traces
the step a second time: every run's first step took twice as long."""

from __future__ import annotations

from pathlib import Path

import pytest
from tinyconfig import DATA, TINY

from ptmkit.training.finetune import finetune
from ptmkit.training.pretrain import pretrain


@pytest.fixture
def traces(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The Python calls of Keras' ``train_step``: one per trace (a traced step runs as a graph)."""
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer

    calls: list[str] = []
    original = TensorFlowTrainer.train_step

    def train_step(self: TensorFlowTrainer, data: object) -> object:
        calls.append(self.name)
        return original(self, data)

    monkeypatch.setattr(TensorFlowTrainer, "train_step", train_step)
    return calls


def test_pretraining_then_fine_tuning_trace_their_train_step_once_each(tiny_corpus: Path, tmp_path: Path, traces: list[str]) -> None:
    metrics = pretrain("bert", tiny_corpus, tmp_path / "pre", overrides=[*TINY, "train.max_steps=3"])
    assert metrics["steps"] == 3 and traces == ["bert_pretraining"]
    traces.clear()
    scores = finetune(tmp_path / "pre", DATA / "classify" / "polarity-200-train.txt", DATA / "classify" / "polarity-200-dev.txt", tmp_path / "ft",
                      overrides=["finetune.epochs=1", "finetune.max_train_examples=16", "finetune.batch_size=8", "finetune.sequence_length=16"])
    assert scores["train_examples"] == 16 and len(traces) == 1, traces
