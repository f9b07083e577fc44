"""``ptmkit compress --keep-layers``: the smaller backbone computes what the kept blocks of the
larger one compute, chained, and is an ordinary pre-trained run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tinyconfig import TINY


@pytest.fixture(scope="module")
def three_layers(tiny_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ptmkit.training.pretrain import pretrain

    out = tmp_path_factory.mktemp("compress") / "bert3"
    pretrain("bert", tiny_corpus, out, overrides=[*TINY, "model.num_layers=3", "train.max_steps=5"], objectives=["mlm"])
    return out


def test_kept_blocks_compute_what_they_computed_in_the_larger_backbone(three_layers: Path, tmp_path: Path) -> None:
    import keras

    from ptmkit.cli import main
    from ptmkit.plugins import get_registry
    from ptmkit.rundir import RunDir
    from ptmkit.training.finetune import load_backbone

    out = tmp_path / "bert2"
    assert main(["compress", str(three_layers), "--out", str(out), "--keep-layers", "0,2"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stage"] == "pretrain" and manifest["compressed_from"]["layers"] == [0, 2]
    registry = get_registry()
    big, _, tokenizer, _ = load_backbone(registry, RunDir(three_layers))
    small, config, _, _ = load_backbone(registry, RunDir(out))
    assert config.model.num_layers == 2 and manifest["parameters"]["after"] == small.count_params() < manifest["parameters"]["before"]
    rng = np.random.default_rng(0)
    x = {"token_ids": rng.integers(5, 600, (2, 12)).astype("int32"), "segment_ids": np.zeros((2, 12), "int32"),
         "padding_mask": np.array([[1] * 12, [1] * 7 + [0] * 5], "int32")}
    tokens = big.token_embedding(x["token_ids"])  # the big backbone's graph with block 1 skipped
    h = big.embeddings_layer_norm(big.embeddings_add((tokens, big.position_embedding(tokens), big.segment_embedding(x["segment_ids"]))))
    for index in (0, 2):
        h = big.get_layer(f"transformer_layer_{index}")(h, padding_mask=x["padding_mask"])
    got = small(x)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(got["sequence_output"]), keras.ops.convert_to_numpy(h), atol=1e-5)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(got["pooled_output"]), keras.ops.convert_to_numpy(big.pooled_dense(h[:, 0, :])), atol=1e-5)
    assert (out / "tokenizer.json").read_text() == (three_layers / "tokenizer.json").read_text()


@pytest.mark.parametrize(("layers", "message"), [("0,5", "give increasing block indices in [0, 3)"), ("2,1", "give increasing block indices in [0, 3)"),
                                                  ("a", "give comma-separated block indices, e.g. 0,2,4")])
def test_bad_layer_lists_are_refused_in_one_line(three_layers: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], layers: str, message: str) -> None:
    from ptmkit.cli import main

    assert main(["compress", str(three_layers), "--out", str(tmp_path / "x"), "--keep-layers", layers]) == 2
    assert capsys.readouterr().err.strip().endswith(message)
    assert not (tmp_path / "x").exists()


def test_head_specs_parse_and_the_fraction_ranks_layer_normalised_scores_never_emptying_a_layer() -> None:
    from ptmkit.compress import choose_heads, parse_head_spec
    from ptmkit.errors import ConfigError

    assert parse_head_spec("0:1,3;2:0") == {0: [1, 3], 2: [0]} and parse_head_spec(" 1:2 ; ") == {1: [2]}
    for bad in ("a:1", "0:1;0:2", "0:", "", " ; "):
        with pytest.raises(ConfigError):
            parse_head_spec(bad)
    # layer 1 / ||(4, 3, 2, 40)|| = (0.099, 0.074, 0.050, 0.991); layer 0 / ||(1, 2, 3, 4)|| = (0.183, 0.365, 0.548, 0.730)
    scores = [np.array([1.0, 2.0, 3.0, 4.0]), np.array([4.0, 3.0, 2.0, 40.0])]
    assert choose_heads(scores, fraction=0.5) == {0: [0], 1: [0, 1, 2]}
    assert choose_heads(scores, fraction=0.875) == {0: [0, 1, 2], 1: [0, 1, 2]}  # the 7th would empty a layer
    assert choose_heads(scores, per_layer=2) == {0: [0, 1], 1: [1, 2]}


def test_a_pretrained_run_prunes_named_heads_but_has_no_scores(tiny_pretrained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ptmkit.cli import main
    from ptmkit.plugins import get_registry
    from ptmkit.rundir import RunDir
    from ptmkit.training.finetune import load_backbone

    out = tmp_path / "pruned"
    assert main(["compress", str(tiny_pretrained), "--out", str(out), "--prune-heads-spec", "0:1"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    _, config, _, _ = load_backbone(get_registry(), RunDir(out))
    assert manifest["stage"] == "pretrain" and config.model.attention_heads == [1]
    hidden, head_dim = 32, 16  # tinyconfig: hidden 32, two heads
    assert manifest["parameters"]["before"] - manifest["parameters"]["after"] == 3 * (hidden * head_dim + head_dim) + head_dim * hidden
    assert main(["compress", str(tiny_pretrained), "--out", str(tmp_path / "x"), "--prune-heads", "0.5"]) == 2
    assert "head importance needs a fine-tuned run" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "message"), [
    (["--heads-per-layer", "-1"], "error: --heads-per-layer -1: give the number of heads to remove from every layer, >= 0"),
    (["--prune-heads-spec", ""], "error: --prune-heads-spec '': names no head; give BLOCK:HEAD,HEAD items separated by ';', e.g. 0:1,3;2:0"),
    (["--prune-heads-spec", "0:1", "--data", "dev.tsv"], "error: --data scores head importance; --prune-heads-spec names the heads itself: drop one of them"),
    (["--keep-layers", "0", "--data", "dev.tsv"], "error: --data scores head importance for --prune-heads / --heads-per-layer; --keep-layers takes none"),
])
def test_head_options_that_would_be_misread_are_refused_in_one_line(
    tiny_pretrained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str,
) -> None:
    """A negative count was told as "at least one must remain", an empty spec copied the run, and a
    --data the option ignores was silently dropped."""
    from ptmkit.cli import main

    assert main(["compress", str(tiny_pretrained), "--out", str(tmp_path / "x"), *args]) == 2
    assert capsys.readouterr().err.strip() == message
    assert not (tmp_path / "x").exists()
