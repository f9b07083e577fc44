"""``ptmkit train bert`` with each new objective, tiny and short, and its bad inputs.

An untrained masked-LM head predicts about uniformly over the 600-token vocabulary (loss
``ln 600 = 6.40``, the mean over real predictions); 40 steps at a learning rate of 3e-3 bring the
held-out loss of every token-level objective 0.4-0.6 below that (measured: span 5.97, SBO 5.97,
MLM beside SOP 6.07, whole-word static MLM 5.79), so the bound ``ln 600 - 0.25`` says it fell.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
from pathlib import Path

import numpy as np
import pytest
from tinyconfig import TINY

from ptmkit import hookimpl
from ptmkit.cli import main
from ptmkit.contract import InputSpec, ModelFamily, OutputSpec
from ptmkit.errors import ConfigError
from ptmkit.plugins import PluginInfo, Registry
from ptmkit.training.pretrain import pretrain, resolve_config

UNTRAINED = math.log(600)


@pytest.mark.parametrize(
    ("objectives", "overrides", "losses"),
    [
        (["span"], [], ["span", "sbo"]),
        (["mlm", "sop"], [], ["mlm"]),
        (["mlm"], ["objectives.mlm.whole_word=true", "objectives.mlm.masking=static"], ["mlm"]),
    ],
    ids=["span+sbo", "mlm+sop", "whole-word-static"],
)
def test_pretraining_with_each_objective(tiny_corpus: Path, tmp_path: Path, objectives: list[str], overrides: list[str], losses: list[str]) -> None:
    out = tmp_path / "run"
    metrics = pretrain("bert", tiny_corpus, out, overrides=[*TINY, "train.max_steps=40", "train.checkpoint_every=20", "train.learning_rate=3e-3", *overrides], objectives=objectives)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["objectives"] == objectives
    values = [v for v in metrics.values() if isinstance(v, float)]
    assert all(np.isfinite(values))
    for name in losses:  # the objective's own held-out loss, reported and lower than untrained
        assert 3.0 < metrics[f"heldout_{name}_loss"] < UNTRAINED - 0.25, (name, metrics)
        assert 0.0 <= metrics[f"heldout_{name}_accuracy"] <= 1.0
    assert metrics[f"heldout_{objectives[0]}_perplexity"] == pytest.approx(math.exp(metrics[f"heldout_{objectives[0]}_loss"]), rel=1e-2)
    # The run's last checkpoint loads into the training model its config builds (what --resume does).
    from ptmkit.config import read_toml
    from ptmkit.plugins import get_registry
    from ptmkit.training.checkpoint import restore_state
    from ptmkit.training.pretrain import build_pretraining_model

    registry = get_registry()
    _, model, _ = build_pretraining_model(registry, resolve_config(registry, "bert", base=read_toml(out / "config.toml")))
    assert restore_state(model, out / "checkpoints") == 40
    if "sop" in objectives:  # two classes: about ln 2 after forty steps
        assert 0.5 < metrics["heldout_sop_loss"] < 0.9 and 0.0 <= metrics["heldout_sop_accuracy"] <= 1.0


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--objective", "mlm,span"], "error: --objective: objectives 'mlm' and 'span' both corrupt the input tokens of a batch; keep one of them"),
        (["--objective", "mlm,nsp,mlm"], "error: --objective: objective 'mlm' is listed twice; give each objective once"),
        (["--set", "train.objectives=mlm,mlm"], "error: --set: objective 'mlm' is listed twice; give each objective once"),
        (["--set", "train.objectives=nsp,sop"], "error: --set: objectives 'nsp' and 'sop' both build the segment pairs of a batch; keep one of them"),
        (["--set", "objectives.mlm.masking=sometimes"], "error: --set: config key 'objectives.mlm.masking' must be one of dynamic, static, got 'sometimes'"),
        (["--set", "objectives.mlm.dupe_factor=0"], "error: --set: config key 'objectives.mlm.dupe_factor' must be >= 1, got 0"),
        (["--set", "objectives.span.geometric_p=0"], "error: --set: config key 'objectives.span.geometric_p' must be in (0, 1], got 0.0"),
        (["--set", "objectives.sop.swap_rate=1"], "error: --set: config key 'objectives.sop.swap_rate' must be in (0, 1), got 1.0"),
    ],
)
def test_bad_objective_settings_are_refused_in_one_line(tiny_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str) -> None:
    out = tmp_path / "run"
    assert main(["train", "bert", "--corpus", str(tiny_corpus), "--out", str(out), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err == message
    assert not out.exists()


def test_objective_flag_on_a_family_with_its_own_objective_is_refused(tiny_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["train", "word2vec", "--corpus", str(tiny_corpus), "--out", str(out), "--objective", "mlm"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --objective: the word2vec family trains with its own objective; choose it with its [model] keys (ptmkit config word2vec) and drop --objective"
    )
    assert not out.exists()


def test_whole_words_need_a_tokenizer_that_marks_them(tiny_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = sorted({w for line in tiny_corpus.read_text().split("\n")[:50] for w in line.lower().split()})[:500]
    vocabulary = {token: i for i, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words])}
    tokenizer = Tokenizer(models.WordLevel(vocabulary, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "words.json"))
    out = tmp_path / "run"
    sets = [a for s in TINY for a in ("--set", s)]
    argv = ["train", "bert", "--corpus", str(tiny_corpus), "--out", str(out), "--tokenizer", str(tmp_path / "words.json"), *sets]
    assert main([*argv, "--objective", "span"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: objective 'span' masks whole words, but the tokenizer's WordLevel model marks no word continuations "
        "(a WordPiece '##' continuing_subword_prefix, or a Metaspace '▁' before words); use token-level masking or such a tokenizer"
    )
    assert not out.exists()  # nothing was trained: the half-made run directory is gone


@dataclasses.dataclass
class _Size:
    hidden_dim: int = 8


class _EncoderWithoutHeads(ModelFamily):
    """An encoder with hidden states only: no pooled output, no token embedding to tie to."""

    name = "bare-encoder"
    config_class = _Size
    inputs = (InputSpec("token_ids"),)
    outputs = (OutputSpec("sequence_output", ("batch", "sequence", "hidden")),)


@pytest.mark.parametrize(
    ("objective", "needs"),
    [("span", "['sequence_output', 'token_embedding']"), ("sop", "['pooled_output']"), ("mlm", "['sequence_output', 'token_embedding']")],
)
def test_an_objective_the_backbone_cannot_serve(objective: str, needs: str) -> None:
    plugin = types.ModuleType("ptmkit_test_bare")

    @hookimpl
    def ptmkit_model_families() -> list[ModelFamily]:
        return [_EncoderWithoutHeads()]

    plugin.ptmkit_model_families = ptmkit_model_families  # type: ignore[attr-defined]
    registry = Registry.load()
    registry.register(plugin, PluginInfo("bare", "ptmkit-test-bare", "0", plugin.__name__))
    with pytest.raises(ConfigError) as info:
        resolve_config(registry, "bare-encoder", None, [f"train.objectives={objective}"])
    assert str(info.value) == (
        f"--set: objective {objective!r} needs {needs}, which the bare-encoder backbone does not provide "
        "(it provides ['sequence_output']); it supports []"
    )


@pytest.mark.parametrize("objectives", ["mlm", "mlm,nsp", "mlm,sop"])
def test_objectives_on_the_same_inputs_share_one_forward_pass(objectives: str) -> None:
    """Masked LM and a sentence objective read one call of the backbone (its sequence and pooled
    outputs), not one call each: each call of a functional backbone is computed at every step."""
    from ptmkit.plugins import get_registry
    from ptmkit.training.pretrain import build_pretraining_model

    registry = get_registry()
    backbone, model, _ = build_pretraining_model(registry, resolve_config(registry, "bert", None, [*TINY, f"train.objectives={objectives}"]))
    calls = [node for nodes in model._nodes_by_depth.values() for node in nodes if node.operation is backbone]
    assert len(calls) == 1
    assert set(model.output) == set(objectives.split(","))
