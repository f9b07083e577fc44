"""UniLM (Dong et al. 2019, section 2.3): the four self-attention masks, the modes' shares over
many sequences (1/3, 1/3, 1/6, 1/6 within ~4 standard errors), and a short pre-training run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from test_objective_variants import SPECIALS, VOCAB, within
from tinyconfig import TINY

from ptmkit.objectives.unilm import MODES, UnifiedLM, UniLMConfig, attention_masks


def test_each_mode_attends_as_the_paper_says() -> None:
    segments = np.array([[0, 0, 0, 1, 1, 1, 0]] * 4)  # [CLS] a [SEP] b c [SEP] pad
    masks = attention_masks(np.arange(4), segments)
    bidirectional, seq2seq, left, right = masks
    assert masks.shape == (4, 7, 7) and masks.dtype == np.int32
    assert bidirectional.all()
    assert (left == np.tril(np.ones((7, 7)))).all() and (right == np.triu(np.ones((7, 7)))).all()
    source, target = [0, 1, 2, 6], [3, 4, 5]
    assert seq2seq[np.ix_(source, source)].all() and not seq2seq[np.ix_(source, target)].any()  # source: itself only
    assert seq2seq[np.ix_(target, source)].all()  # target: all of the source ...
    assert (seq2seq[np.ix_(target, target)] == np.tril(np.ones((3, 3)))).all()  # ... and itself up to now


def test_modes_are_drawn_in_the_papers_proportions_and_masks_follow_them() -> None:
    rng = np.random.default_rng(0)
    n, length = 3000, 16
    token_ids = rng.integers(5, VOCAB, (n, length)).astype(np.int32)
    token_ids[:, 0], token_ids[:, 7], token_ids[:, -1] = SPECIALS.cls, SPECIALS.sep, SPECIALS.sep
    segments = np.zeros((n, length), np.int32)
    segments[:, 8:] = 1
    batch = {"token_ids": token_ids, "segment_ids": segments, "padding_mask": np.ones((n, length), np.int32)}
    inputs, targets, weights = UnifiedLM().prepare(batch, np.random.default_rng(1), UniLMConfig(), SPECIALS, VOCAB)
    masks = inputs["self_attention_mask"]
    reference = attention_masks(np.arange(4), segments[:4])
    kinds = np.array([[np.array_equal(mask, ref) for ref in reference] for mask in masks])
    assert (kinds.sum(axis=1) == 1).all()  # every sequence has exactly one of the four masks
    for mode, expected in zip(MODES, (1 / 3, 1 / 3, 1 / 6, 1 / 6), strict=True):
        assert within(float(kinds[:, MODES.index(mode)].mean()), expected, n), mode
    share = weights["unilm"].sum() / ((token_ids >= 5).sum())  # the cloze: 15% of the real tokens
    assert abs(share - 0.15) < 0.01


@pytest.mark.parametrize(
    ("value", "message"),
    [("objectives.unilm.seq2seq_rate=0.5", "config keys 'objectives.unilm.*_rate' must sum to 1, got 1.16667"),
     ("objectives.unilm.left_to_right_rate=-1", "config key 'objectives.unilm.left_to_right_rate' must be in [0, 1], got -1.0")],
)
def test_bad_mode_rates_are_refused_in_one_line(tiny_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, message: str) -> None:
    from ptmkit.cli import main

    out = tmp_path / "run"
    assert main(["train", "bert", "--corpus", str(tiny_corpus), "--out", str(out), "--objective", "unilm", "--set", value]) == 2
    assert capsys.readouterr().err.strip() == f"error: --set: {message}"
    assert not out.exists()


def test_unilm_pretrains_and_its_backbone_fine_tunes_as_an_encoder(tiny_corpus: Path, tmp_path: Path) -> None:
    """40 steps bring the held-out cloze loss below ln 600 - 0.25 (untrained: ln 600 = 6.40,
    the uniform prediction over the tiny config's 600 tokens); the backbone saved is BERT's."""
    from ptmkit.training.finetune import finetune
    from ptmkit.training.pretrain import pretrain

    out = tmp_path / "run"
    metrics = pretrain("bert", tiny_corpus, out, overrides=[*TINY, "train.max_steps=40", "train.checkpoint_every=40", "train.learning_rate=3e-3"], objectives=["unilm"])
    assert json.loads((out / "manifest.json").read_text())["objectives"] == ["unilm"]
    assert 3.0 < metrics["heldout_unilm_loss"] < math.log(600) - 0.25, metrics
    data = Path(__file__).resolve().parents[1] / "data" / "classify"
    tuned = finetune(out, data / "polarity-200-train.txt", data / "polarity-200-dev.txt", tmp_path / "polarity", overrides=["finetune.epochs=1", "finetune.sequence_length=32"])
    assert tuned["dev_examples"] == 40 and 0.0 <= tuned["dev_accuracy"] <= 1.0
