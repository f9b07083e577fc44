"""The xlnet family through the core: its unigram tokenizer and packing (specials at the end),
the contract's battery (pre-training with the permutation LM, declared inputs and outputs, ONNX
parity at unseen shapes through the relative attention, the lean runtime), ``ptmkit config``,
bad input refused in one line, and ``finetune -> export -> predict`` from the command line on
the contract's run."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from inplugins import in_tree_plugins, registered  # noqa: F401 - the fixture

from ptmkit.testing import tiny_texts

pytestmark = pytest.mark.usefixtures("in_tree_plugins")

#: An XLNet small enough to pre-train in seconds.
TINY_XLNET = [
    "model.num_layers=2",
    "model.hidden_dim=32",
    "model.num_heads=2",
    "model.intermediate_dim=64",
    "model.vocabulary_size=400",
]


def test_tokenizer_has_xlnet_specials_and_packing() -> None:
    from ptmkit_xlnet import XLNetFamily
    from ptmkit_xlnet.tokenizer import train_xlnet_unigram

    tokenizer = train_xlnet_unigram([*tiny_texts(100), "naïve café", "The Naive Tale"], 400)
    names = ("<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>")
    assert [tokenizer.token_to_id(t) for t in names] == list(range(9))  # XLNet's spiece.model order
    family = XLNetFamily()
    specials = family.special_tokens(tokenizer)
    assert (specials.unk, specials.cls, specials.sep, specials.pad, specials.mask) == (0, 3, 4, 5, 6)
    first = tokenizer.encode("The cat", add_special_tokens=False).ids
    second = tokenizer.encode("a dog", add_special_tokens=False).ids
    pair = tokenizer.encode("The cat", "a dog")  # A <sep> B <sep> <cls>, segments 0, 1, and 2 for <cls>
    assert pair.ids == [*first, 4, *second, 4, 3]
    assert pair.type_ids == [0] * (len(first) + 1) + [1] * (len(second) + 1) + [2]
    assert family.pack(first, second, 64, specials) == (pair.ids, pair.type_ids)
    single = tokenizer.encode("The cat")
    assert (
        family.pack(first, None, 64, specials)
        == (single.ids, single.type_ids)
        == ([*first, 4, 3], [0] * (len(first) + 1) + [2])
    )
    assert family.num_special_tokens(True) == 3 and family.num_special_tokens(False) == 2
    assert tokenizer.decode(tokenizer.encode("The Naïve cat").ids) == "The Naive cat"  # cased, accents stripped


def test_defaults_are_xlnets_and_config_documents_every_key(capsys) -> None:
    from ptmkit.api import get_registry, resolve_config
    from ptmkit.testing import main
    from ptmkit_xlnet import XLNetConfig, XLNetFamily

    assert XLNetFamily.default_objectives == ("plm",)
    config = resolve_config(get_registry(), "xlnet")
    assert (config.model.hidden_activation, config.model.dropout, config.model.clamp_len) == ("gelu", 0.1, -1)
    assert (config.objectives["plm"].partial_prediction, config.objectives["plm"].perm_size) == (6.0, 0)
    assert main(["config", "xlnet"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    for section, fields in (
        ("[model]", dataclasses.fields(XLNetConfig)),
        ("[objectives.plm]", ("partial_prediction", "perm_size")),
    ):
        start = lines.index(section)
        for field in fields:
            name = getattr(field, "name", field)
            index = next(i for i in range(start, len(lines)) if lines[i].startswith(f"{name} = "))
            assert lines[index - 1].startswith("# "), name  # a comment documents it
    assert 'family = "xlnet"' in text and "partial_prediction = 6.0" in text


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("objectives.plm.perm_size=12", "'objectives.plm.perm_size' = 12 must divide 'train.sequence_length' = 32"),
        ("model.num_heads=3", "'model.num_heads' = 3 must divide 'model.hidden_dim' = 32"),
        ("model.hidden_activation=swish", "'model.hidden_activation' must be one of gelu, gelu_approximate, relu"),
        ("objectives.plm.partial_prediction=0.5", "'objectives.plm.partial_prediction' must be >= 1"),
    ],
)
def test_bad_keys_are_refused_in_one_line(tmp_path: Path, capsys, override: str, needle: str) -> None:
    from ptmkit.testing import main, write_tiny_corpus

    corpus = write_tiny_corpus(tmp_path / "corpus.txt", lines=10)
    argv = ["train", "xlnet", "--corpus", str(corpus), "--out", str(tmp_path / "run"), "--set=train.sequence_length=32"]
    assert main([*argv, *(f"--set={item}" for item in (*TINY_XLNET, override))]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], lines
    assert not (tmp_path / "run").exists()


def test_plm_on_a_backbone_without_two_streams_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    from ptmkit.api import get_registry
    from ptmkit.testing import main, write_tiny_corpus

    registry = get_registry()
    assert "plm" in registry.objectives_for(registry.family("xlnet"))
    assert "plm" not in registry.objectives_for(registry.family("bert"))
    corpus = write_tiny_corpus(tmp_path / "corpus.txt", lines=10)
    assert main(["train", "bert", "--corpus", str(corpus), "--out", str(tmp_path / "run"), "--objective", "plm"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "objective 'plm' needs" in lines[0] and "'two_stream_attention'" in lines[0], lines
    assert "bert backbone does not provide" in lines[0] and not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def contract(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """:func:`~ptmkit.testing.check_family`'s report on a tiny XLNet (its pre-training run is
    fine-tuned from the command line below: one pre-training for the module)."""
    from ptmkit.testing import check_family
    from ptmkit_xlnet import XLNetFamily

    with registered():
        return check_family(XLNetFamily(), tmp_path_factory.mktemp("contract"), overrides=TINY_XLNET)


def test_xlnet_fits_the_contract(contract: dict) -> None:
    """Pre-training with plm through the core, the declared inputs and outputs, ONNX parity at
    shapes other than the trace's (the relative attention's rel_shift and the segment matrix
    survive export) and the lean runtime."""
    assert contract["outputs"] == {"sequence_output": (2, 7, 32), "pooled_output": (2, 32)}
    assert contract["parity_max_abs_diff"] < 1e-4 and contract["runtime_max_abs_diff"] < 1e-4
    # a permutation LM over a 400-piece vocabulary starts near ln(400) = 5.99 nats
    assert 4.0 < contract["loss"] < 7.0 and math.isfinite(contract["loss"])


def test_finetune_export_predict_from_the_command_line(contract: dict, tmp_path: Path) -> None:
    """The permutation-LM run fine-tuned with the core's classification head on ``pooled_output``
    (the last real token, ``<cls>``), at a sequence length longer than pre-training's; ONNX export
    with parity at unseen shapes, and the lean runtime (right-padded batches)."""
    import json

    import numpy as np

    from ptmkit.testing import main, write_tiny_labelled

    run = contract["run"]
    train, dev = write_tiny_labelled(tmp_path, train=64, dev=16)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["family"] == "xlnet" and manifest["objectives"] == ["plm"]
    assert 3.0 < json.loads((run / "metrics.json").read_text())["heldout_plm_loss"] < 7.0
    finetune = [
        "--set=finetune.epochs=1",
        "--set=finetune.batch_size=16",
        "--set=finetune.sequence_length=24",
        "--set=finetune.learning_rate=1e-3",
    ]
    assert (
        main(
            [
                "finetune",
                str(run),
                "--train",
                str(train),
                "--dev",
                str(dev),
                "--out",
                str(tmp_path / "ft"),
                *finetune,
            ]
        )
        == 0
    )
    assert 0.0 <= json.loads((tmp_path / "ft" / "metrics.json").read_text())["dev_accuracy"] <= 1.0
    assert main(["export", str(tmp_path / "ft"), "--int8", "--dev", str(dev)]) == 0
    export = json.loads((tmp_path / "ft" / "export" / "manifest.json").read_text())
    assert [spec["name"] for spec in export["inputs"]] == ["token_ids", "segment_ids", "padding_mask"]
    assert max(export["variants"]["fp32"]["parity_max_abs_diff"].values()) < 1e-4
    int8 = export["variants"]["int8"]  # the relative-segment einsums stay float, one per layer
    assert int8["quantization"]["batched_weight_matmul"] == 2
    assert all(p.startswith("slower than fp32") for p in int8["problems"])  # a tiny model's timing gate is noise
    from ptmkit_export import Predictor

    predictor = Predictor(tmp_path / "ft" / "export", variant="fp32")
    probabilities = np.asarray(
        [
            list(p.probabilities.values())
            for p in predictor.predict(["a wonderful film", "a dull and tiresome film indeed"])
        ]
    )
    assert probabilities.shape == (2, len(export["labels"])) and np.allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
