"""The albert family through the core: its unigram tokenizer and packing, its parameter count
against the paper's factorisation, the contract's battery (pre-training with MLM + SOP, declared
inputs and outputs, ONNX parity at unseen shapes, the lean runtime), ``ptmkit config``, and
``finetune -> export -> predict`` from the command line on the contract's run."""

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

#: An ALBERT small enough to pre-train in seconds: 3 layers over 1 group of 1 shared layer.
TINY_ALBERT = [
    "model.num_layers=3",
    "model.hidden_dim=32",
    "model.embedding_dim=16",
    "model.num_heads=2",
    "model.intermediate_dim=64",
    "model.vocabulary_size=400",
    "model.max_sequence_length=64",
]


def test_tokenizer_has_albert_specials_and_packing() -> None:
    from ptmkit_albert import AlbertFamily
    from ptmkit_albert.tokenizer import train_albert_unigram

    tokenizer = train_albert_unigram([*tiny_texts(100), "naïve café"], 400)
    assert [tokenizer.token_to_id(t) for t in ("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]")] == [0, 1, 2, 3, 4]
    family = AlbertFamily()
    specials = family.special_tokens(tokenizer)
    assert (specials.pad, specials.unk, specials.cls, specials.sep, specials.mask) == (0, 1, 2, 3, 4)
    first, second = (
        tokenizer.encode("The cat", add_special_tokens=False).ids,
        tokenizer.encode("a dog", add_special_tokens=False).ids,
    )
    pair = tokenizer.encode("The cat", "a dog")  # BERT's template: [CLS] A [SEP] B [SEP], segments 0 then 1
    assert pair.ids == [2, *first, 3, *second, 3] and pair.type_ids == [0] * (len(first) + 2) + [1] * (len(second) + 1)
    assert family.pack(first, second, 64, specials) == (pair.ids, pair.type_ids)
    assert family.num_special_tokens(True) == 3 and family.num_special_tokens(False) == 2
    assert tokenizer.decode(tokenizer.encode("The Naïve cat").ids) == "the naive cat"  # lower-cased, accents stripped


def albert_parameters(v: int, e: int, h: int, i: int, p: int, s: int, groups: int, inner: int) -> int:
    """Lan et al. 2020, section 3.1: V x E + E x H for the embeddings instead of V x H, and the
    transformer weights held once per shared layer, not once per layer applied."""
    embeddings = (v + p + s) * e + 2 * e + e * h + h
    layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 2 * 2 * h
    return embeddings + groups * inner * layer + h * h + h


@pytest.mark.parametrize(("groups", "inner"), [(1, 1), (2, 1), (4, 1), (1, 2)])
def test_parameters_are_the_papers_factorisation(groups: int, inner: int) -> None:
    from ptmkit.api import get_registry, resolve_config

    registry = get_registry()
    config = resolve_config(
        registry, "albert", None, [f"model.num_groups={groups}", f"model.inner_group_num={inner}"]
    ).model
    backbone = registry.family("albert").build_backbone(config)
    assert backbone.count_params() == albert_parameters(8000, 128, 256, 1024, 512, 2, groups, inner)
    # one Keras layer per shared weight set, called num_layers / num_groups times in the graph
    assert sum(len(group) for group in backbone.transformer_layers) == groups * inner
    bert = resolve_config(registry, "bert").model
    assert registry.family("bert").build_backbone(bert).count_params() == 5_404_928  # the docs page's table
    assert (groups, inner) != (1, 1) or backbone.count_params() == 1_978_624


def test_defaults_are_alberts_and_config_documents_every_key(capsys) -> None:
    from ptmkit.api import get_registry, resolve_config
    from ptmkit.testing import main
    from ptmkit_albert import AlbertConfig, AlbertFamily

    assert AlbertFamily.default_objectives == ("mlm", "sop")  # section 3.1 / 4.1
    config = resolve_config(get_registry(), "albert")
    assert (config.model.embedding_dim, config.model.num_groups, config.model.inner_group_num) == (128, 1, 1)
    assert config.model.hidden_activation == "gelu_approximate" and config.model.dropout == 0.0
    assert config.objectives["sop"].swap_rate == 0.5
    mlm = config.objectives["mlm"]  # section 4.1: n-gram masking, N = 3, whole words
    assert (mlm.max_ngram, mlm.whole_word, mlm.mask_rate) == (3, True, 0.15)
    assert resolve_config(get_registry(), "bert").objectives["mlm"].max_ngram == 1  # BERT keeps single words
    assert main(["config", "albert"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    start = lines.index("[model]")
    for field in dataclasses.fields(AlbertConfig):
        index = next(i for i in range(start, len(lines)) if lines[i].startswith(f"{field.name} = "))
        assert lines[index - 1].startswith("# "), field.name  # a comment documents it
    assert 'family = "albert"' in text


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("model.num_groups=2", "'model.num_groups' = 2 must divide 'model.num_layers' = 3"),
        ("model.embedding_dim=0", "model.embedding_dim"),
        ("model.hidden_activation=swish", "'model.hidden_activation' must be one of gelu_approximate, gelu, relu"),
    ],
)
def test_bad_model_keys_are_refused_in_one_line(tmp_path: Path, capsys, override: str, needle: str) -> None:
    from ptmkit.testing import main, write_tiny_corpus

    corpus = write_tiny_corpus(tmp_path / "corpus.txt", lines=10)
    argv = ["train", "albert", "--corpus", str(corpus), "--out", str(tmp_path / "run")]
    assert main([*argv, *(f"--set={item}" for item in (*TINY_ALBERT, override))]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], lines


@pytest.fixture(scope="module")
def contract(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """:func:`~ptmkit.testing.check_family`'s report on a tiny ALBERT (its pre-training run is
    fine-tuned from the command line below: one pre-training for the module)."""
    from ptmkit.testing import check_family
    from ptmkit_albert import AlbertFamily

    with registered():
        return check_family(AlbertFamily(), tmp_path_factory.mktemp("contract"), overrides=[*TINY_ALBERT, "model.num_groups=1", "model.inner_group_num=2"])


def test_albert_fits_the_contract(contract: dict) -> None:
    assert contract["outputs"] == {"sequence_output": (2, 7, 32), "pooled_output": (2, 32)}
    assert contract["parity_max_abs_diff"] < 1e-4 and contract["runtime_max_abs_diff"] < 1e-4
    # masked LM over a 400-piece vocabulary starts near ln(400) = 5.99 nats
    assert 3.0 < contract["loss"] < 7.0 and math.isfinite(contract["loss"])


def test_finetune_export_predict_from_the_command_line(contract: dict, tmp_path: Path) -> None:
    from ptmkit.testing import main

    run = contract["run"]
    train, dev = write_tiny_labelled(tmp_path, train=64, dev=16)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["family"] == "albert" and manifest["objectives"] == ["mlm", "sop"]
    assert manifest["inputs"] == ["token_ids", "segment_ids", "padding_mask"]
    metrics = json.loads((run / "metrics.json").read_text())
    assert 0.3 < metrics["heldout_sop_loss"] < 1.2 and 3.0 < metrics["heldout_mlm_loss"] < 7.0
    finetune = [
        "--set=finetune.epochs=1",
        "--set=finetune.batch_size=16",
        "--set=finetune.sequence_length=32",
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
    assert main(["export", str(tmp_path / "ft")]) == 0
    export = json.loads((tmp_path / "ft" / "export" / "manifest.json").read_text())
    assert [spec["name"] for spec in export["inputs"]] == ["token_ids", "segment_ids", "padding_mask"]
    assert max(export["variants"]["fp32"]["parity_max_abs_diff"].values()) < 1e-4
    from ptmkit_export import Predictor

    predictor = Predictor(tmp_path / "ft" / "export", variant="fp32")
    probabilities = np.asarray(
        [list(p.probabilities.values()) for p in predictor.predict(["a wonderful film", "a dull film"])]
    )
    assert probabilities.shape == (2, len(export["labels"])) and np.allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)


def test_an_objective_the_backbone_cannot_serve_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    """UniLM's attention masks need a backbone that takes them; ALBERT's keras-hub layers do not."""
    from ptmkit.api import get_registry
    from ptmkit.testing import main, write_tiny_corpus

    registry = get_registry()
    assert registry.objectives_for(registry.family("albert")) == ["mlm", "nsp", "rtd", "sop", "span", "sso", "wso"]
    corpus = write_tiny_corpus(tmp_path / "corpus.txt", lines=10)
    assert (
        main(["train", "albert", "--corpus", str(corpus), "--out", str(tmp_path / "run"), "--objective", "mlm,unilm"])
        == 2
    )
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "objective 'unilm' needs" in lines[0] and "'self_attention_mask'" in lines[0], lines
    assert "albert backbone does not provide" in lines[0] and not (tmp_path / "run").exists()
