"""ULMFiT's three stages through the core: the LM's per-word perplexity, target-LM fine-tuning
with --init, the classifier with the paper's fine-tuning recipe, its ONNX export against Keras on
padded rows, and the one-line refusals of a stage run out of order."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from inplugins import in_tree_plugins  # noqa: F401 - the fixture

pytestmark = pytest.mark.usefixtures("in_tree_plugins")


def test_the_three_stages_chain(ulmfit_stages: dict[str, Path]) -> None:
    general = json.loads((ulmfit_stages["general"] / "metrics.json").read_text())
    assert math.isfinite(general["heldout_word_perplexity"]) and general["heldout_words"] > 0
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(ulmfit_stages["general"] / "tokenizer.json"))
    lines = [line for line in ulmfit_stages["corpus"].read_text(encoding="utf-8").splitlines() if line.split()][-general["heldout_lines"] :]
    unknown = sum(e.ids.count(tokenizer.token_to_id("<unk>")) for e in tokenizer.encode_batch(lines, add_special_tokens=False))
    assert general["heldout_unknown_tokens"] == unknown  # the held-out words outside the vocabulary, counted by hand
    target = json.loads((ulmfit_stages["target"] / "manifest.json").read_text())
    assert target["init"] == str(ulmfit_stages["general"].resolve())
    assert target["corpora"] == [str(ulmfit_stages["corpus"].resolve()), str(ulmfit_stages["train"].resolve())]
    assert (ulmfit_stages["target"] / "tokenizer.json").read_text() == (ulmfit_stages["general"] / "tokenizer.json").read_text()
    config = (ulmfit_stages["classifier"] / "config.toml").read_text()
    for line in ('schedule = "slanted_triangular"', "layer_lr_decay = 0.384615", "gradual_unfreezing = true"):
        assert line in config  # the family's [finetune] recipe, recorded
    assert json.loads((ulmfit_stages["classifier"] / "metrics.json").read_text())["dev_accuracy"] >= 0.0


def test_onnx_export_matches_keras_on_padded_rows(ulmfit_stages: dict[str, Path], tmp_path: Path) -> None:
    """``ptmkit export`` of the classifier; ONNX Runtime's logits equal Keras' within 1e-4 on rows
    of 1, 4 and 9 tokens padded to 12, and on a row of padding only."""
    import onnxruntime

    from ptmkit.testing import export_run, load_classifier

    manifest = export_run(ulmfit_stages["classifier"], tmp_path / "export")
    assert max(manifest["variants"]["fp32"]["parity_max_abs_diff"].values()) < 1e-4
    assert manifest["recurrence"]["kind"] == "fused" and manifest["recurrence"]["Loop"] == 0, manifest["recurrence"]
    model, _, _, _ = load_classifier(ulmfit_stages["classifier"])
    rng = np.random.default_rng(0)
    ids = rng.integers(4, 100, (4, 12)).astype(np.int32)
    mask = np.zeros((4, 12), np.int32)
    for row, length in enumerate((1, 4, 9, 0)):
        mask[row, :length] = 1
    ids[mask == 0] = 0
    feeds = {"token_ids": ids, "padding_mask": mask}
    expected = np.asarray(model(feeds, training=False))
    session = onnxruntime.InferenceSession(str(tmp_path / "export" / "model.onnx"), providers=["CPUExecutionProvider"])
    (actual,) = session.run(None, feeds)
    assert np.abs(actual - expected).max() < 1e-4


def _refusal(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    from ptmkit.testing import main

    assert main(list(args)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_stages_out_of_order_name_the_missing_stage(ulmfit_stages: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus, train, dev = (str(ulmfit_stages[k]) for k in ("corpus", "train", "dev"))
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "config.toml").write_text('family = "ulmfit"\n')
    # target-LM fine-tuning without a general-domain LM
    for missing in (tmp_path / "none", unfinished):
        err = _refusal(capsys, "train", "ulmfit", "--init", str(missing), "--corpus", corpus, "--out", str(tmp_path / "out"))
        assert "general-domain language model (ULMFiT stage 1)" in err and str(missing) in err
    assert not (tmp_path / "out").exists()
    err = _refusal(capsys, "train", "ulmfit", "--init", str(ulmfit_stages["classifier"]), "--corpus", corpus, "--out", str(tmp_path / "out"))
    assert "is a finetune run" in err and "general-domain language model" in err
    # a classifier without a language model
    err = _refusal(capsys, "finetune", str(unfinished), "--train", train, "--dev", dev, "--out", str(tmp_path / "clf"))
    assert "general-domain language model (ULMFiT stage 1) has not finished" in err
    err = _refusal(capsys, "finetune", str(tmp_path / "none"), "--train", train, "--dev", dev, "--out", str(tmp_path / "clf"))
    assert "no such run directory; fine-tuning starts from a finished pre-training run" in err


def test_a_fresh_lm_starts_its_decoder_bias_at_the_unigram_prior(ulmfit_stages: dict[str, Path]) -> None:
    """Stage 1 starts the tied decoder's bias at the log unigram prior of its training tokens
    (:class:`ptmkit.api.InitialisesOutputBias`) and moves it by at most a few Adam steps' worth
    (3 steps); stage 2 (``--init``) keeps stage 1's bias rather than starting again."""
    import numpy as np

    from ptmkit.api import RunDir, get_registry, load_weights, resolve_config, train_token_counts, unigram_log_prior

    def bias(run: str) -> np.ndarray:
        registry = get_registry()
        config = resolve_config(registry, "ulmfit", ulmfit_stages[run] / "config.toml", [])
        backbone = registry.family("ulmfit").build_backbone(config.model)
        load_weights(backbone, ulmfit_stages[run] / "backbone.weights.h5")
        return np.asarray(backbone.token_embedding.bias, np.float64)

    general, target = bias("general"), bias("target")
    prior = unigram_log_prior(train_token_counts(RunDir(ulmfit_stages["general"]), general.size)).astype(np.float64)
    assert prior.max() - prior.min() > 3.0  # a real spread of word frequencies, not a flat start
    assert np.abs(general - prior).max() < 0.1  # 3 steps at lr <= 0.01 move a bias by about 0.03
    assert np.abs(target - general).max() < 0.1
    target_prior = unigram_log_prior(train_token_counts(RunDir(ulmfit_stages["target"]), general.size))
    assert np.abs(target_prior - general).max() > 0.5  # had stage 2 started again, it would sit here
