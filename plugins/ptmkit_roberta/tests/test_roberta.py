"""The roberta family through the core: its tokenizer, the contract's battery (pre-training,
declared inputs and outputs, ONNX parity at unseen shapes, the lean runtime), ``ptmkit config``,
and ``finetune -> export (int8) -> predict`` from the command line on the contract's run."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from inplugins import in_tree_plugins, registered  # noqa: F401 - the fixture

from ptmkit.testing import tiny_texts, write_tiny_labelled

pytestmark = pytest.mark.usefixtures("in_tree_plugins")

#: A RoBERTa small enough to pre-train in seconds.
TINY_ROBERTA = [
    "model.num_layers=2",
    "model.hidden_dim=32",
    "model.num_heads=2",
    "model.intermediate_dim=64",
    "model.vocabulary_size=400",
    "model.max_sequence_length=64",
    "model.min_frequency=1",
]


def test_tokenizer_has_roberta_specials_and_packing() -> None:
    from ptmkit_roberta import RobertaFamily
    from ptmkit_roberta.tokenizer import train_roberta_bpe

    tokenizer = train_roberta_bpe([*tiny_texts(100), "naïve café 中文"], 400, 1)
    assert [tokenizer.token_to_id(t) for t in ("<s>", "<pad>", "</s>", "<unk>", "<mask>")] == [0, 1, 2, 3, 4]
    family = RobertaFamily()
    specials = family.special_tokens(tokenizer)
    assert (specials.cls, specials.pad, specials.sep, specials.unk, specials.mask) == (0, 1, 2, 3, 4)
    first, second = tokenizer.encode("the cat", add_special_tokens=False).ids, tokenizer.encode("a dog", add_special_tokens=False).ids
    # Liu et al. 2019 / fairseq: <s> A </s></s> B </s>, one segment
    pair = tokenizer.encode("the cat", "a dog")
    assert pair.ids == [0, *first, 2, 2, *second, 2] and set(pair.type_ids) == {0}
    assert family.pack(first, second, 64, specials) == (pair.ids, [0] * len(pair.ids))
    assert family.pack(first, None, 64, specials)[0] == tokenizer.encode("the cat").ids == [0, *first, 2]
    assert family.num_special_tokens(True) == 4 and family.num_special_tokens(False) == 2
    text = "Zürich 🙂 中文"  # byte-level: no unknown token, and decoding gives the text back
    assert 3 not in tokenizer.encode(text).ids and tokenizer.decode(tokenizer.encode(text).ids) == text


def test_defaults_are_robertas_and_config_documents_every_key(capsys) -> None:
    from ptmkit.api import get_registry, resolve_config
    from ptmkit.testing import main
    from ptmkit_roberta import RobertaConfig, RobertaFamily

    assert RobertaFamily.default_objectives == ("mlm",)  # no NSP (section 4.2)
    config = resolve_config(get_registry(), "roberta")
    mlm = config.objectives["mlm"]
    assert (mlm.masking, mlm.mask_rate, mlm.mask_token_rate, mlm.random_token_rate) == ("dynamic", 0.15, 0.8, 0.1)  # section 4.1 / 3.1
    assert config.model.layer_norm_epsilon == 1e-5 and config.model.hidden_activation == "gelu"
    assert main(["config", "roberta"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    start = lines.index("[model]")
    for field in dataclasses.fields(RobertaConfig):
        index = next(i for i in range(start, len(lines)) if lines[i].startswith(f"{field.name} = "))
        assert lines[index - 1].startswith("# "), field.name  # a comment documents it
    assert 'family = "roberta"' in text and 'masking = "dynamic"' in text


@pytest.fixture(scope="module")
def contract(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """:func:`~ptmkit.testing.check_family`'s report on a tiny RoBERTa (its pre-training run is
    fine-tuned from the command line below: one pre-training for the module)."""
    from ptmkit.testing import check_family
    from ptmkit_roberta import RobertaFamily

    with registered():
        return check_family(RobertaFamily(), tmp_path_factory.mktemp("contract"), overrides=[*TINY_ROBERTA, "model.dropout=0.0"])


def test_roberta_fits_the_contract(contract: dict) -> None:
    assert contract["outputs"] == {"sequence_output": (2, 7, 32), "pooled_output": (2, 32)}
    assert contract["parity_max_abs_diff"] < 1e-4 and contract["runtime_max_abs_diff"] < 1e-4
    # a masked LM over a 400-token vocabulary starts near ln(400) = 5.99 nats
    assert 3.0 < contract["loss"] < 7.0 and math.isfinite(contract["loss"])


def test_finetune_export_predict_from_the_command_line(contract: dict, tmp_path: Path) -> None:
    from ptmkit.testing import main

    run = contract["run"]
    train, dev = write_tiny_labelled(tmp_path, train=64, dev=16)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["family"] == "roberta" and manifest["objectives"] == ["mlm"] and manifest["inputs"] == ["token_ids", "padding_mask"]
    finetune = ["--set=finetune.epochs=1", "--set=finetune.batch_size=16", "--set=finetune.sequence_length=32", "--set=finetune.learning_rate=1e-3"]
    assert main(["finetune", str(run), "--train", str(train), "--dev", str(dev), "--out", str(tmp_path / "ft"), *finetune]) == 0
    metrics = json.loads((tmp_path / "ft" / "metrics.json").read_text())
    assert 0.0 <= metrics["dev_accuracy"] <= 1.0
    assert main(["export", str(tmp_path / "ft"), "--int8"]) == 0
    export = json.loads((tmp_path / "ft" / "export" / "manifest.json").read_text())
    assert [spec["name"] for spec in export["inputs"]] == ["token_ids", "padding_mask"]
    assert max(export["variants"]["fp32"]["parity_max_abs_diff"].values()) < 1e-4
    int8 = export["variants"]["int8"]
    assert int8["quantization"]["quantized_matmul"] > 0 and 0.0 <= int8["dev_agreement_with_fp32"] <= 1.0
    from ptmkit_export import Predictor

    predictor = Predictor(tmp_path / "ft" / "export", variant="fp32")
    probabilities = np.asarray([list(p.probabilities.values()) for p in predictor.predict(["a wonderful film", "a dull film"])])
    assert probabilities.shape == (2, len(export["labels"])) and np.allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
