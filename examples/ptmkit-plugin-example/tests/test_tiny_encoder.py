"""The ``tiny-encoder`` family against ptmkit's contract. Run with the distribution installed
(``pip install -e .``, or on ``PYTHONPATH`` with its ``.dist-info``): ``python -m pytest tests``."""

from __future__ import annotations

import dataclasses
import json

import pytest
from ptmkit_example import TinyEncoder, TinyEncoderConfig, train_wordpiece

from ptmkit.api import ConfigError, get_registry
from ptmkit.testing import check_family

pytest_plugins = ["ptmkit.testing"]  # tiny_corpus, tiny_labelled, tiny_run, ptmkit_cli

TINY = ("model.vocabulary_size=200", "model.hidden_dim=16", "model.intermediate_dim=32", "model.max_sequence_length=32")


def test_the_family_is_installed_and_matched_by_capability() -> None:
    registry = get_registry()
    plugin = {p.name: p for p in registry.plugins}["example"]
    assert (plugin.distribution, plugin.families, plugin.ok) == ("ptmkit-plugin-example", ["tiny-encoder"], True)
    family = registry.family("tiny-encoder")
    assert "mlm" in registry.objectives_for(family)  # sequence_output + token_embedding
    assert "classification" in registry.heads_for(family)  # pooled_output


def test_config_validation_names_the_key() -> None:
    TinyEncoderConfig().validate()
    with pytest.raises(ConfigError, match=r"^config key 'model.hidden_dim' \(64\) must be a multiple of 'model.num_heads' \(3\)$"):
        TinyEncoderConfig(num_heads=3).validate()
    with pytest.raises(ConfigError, match=r"^config key 'model.dropout' must be in \[0, 1\], got 1.5$"):
        dataclasses.replace(TinyEncoderConfig(), dropout=1.5).validate()


def test_tokenizer_adds_cls_and_sep_as_pack_does() -> None:
    family = TinyEncoder()
    tokenizer = train_wordpiece(["the cat sat on the mat", "a dog sat on a log"] * 20, 100)
    specials = family.special_tokens(tokenizer)
    encoding = tokenizer.encode("the cat", "a dog")
    words = lambda text: tokenizer.encode(text, add_special_tokens=False).ids  # noqa: E731
    assert family.pack(words("the cat"), words("a dog"), 32, specials) == (encoding.ids, encoding.type_ids)
    assert encoding.tokens == ["[CLS]", "the", "cat", "[SEP]", "a", "dog", "[SEP]"]
    assert family.num_special_tokens(pair=True) == 3 and family.num_special_tokens(pair=False) == 2


def test_the_family_passes_check_family(tmp_path) -> None:  # type: ignore[no-untyped-def]
    report = check_family(TinyEncoder(), tmp_path, overrides=TINY)
    assert report["outputs"] == {"sequence_output": (2, 7, 16), "pooled_output": (2, 16)}
    assert report["parity_max_abs_diff"] < 1e-4 and report["runtime_max_abs_diff"] < 1e-4


def test_finetune_export_predict(tiny_run, tiny_labelled, ptmkit_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    run = tiny_run("tiny-encoder", *TINY)
    train, dev = tiny_labelled
    tuned = tmp_path / "tuned"
    result = ptmkit_cli("finetune", str(run), "--train", str(train), "--dev", str(dev), "--out", str(tuned), "--set", "finetune.epochs=2")
    assert result.returncode == 0, result.stderr
    assert 0.0 <= json.loads((tuned / "metrics.json").read_text())["dev_accuracy"] <= 1.0
    assert ptmkit_cli("export", str(tuned)).returncode == 0
    predicted = ptmkit_cli("predict", str(tuned / "export"), "--text", "a dull, tedious film")
    assert json.loads(predicted.stdout.splitlines()[0])["label"] in {"pos", "neg"}
