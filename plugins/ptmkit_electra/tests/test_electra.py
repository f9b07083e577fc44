"""The electra family through the core: its WordPiece tokenizer and packing, ``ptmkit config``,
the backbone's embedding projection, replaced-token detection with a generator on the
discriminator's embeddings (only the discriminator saved), the contract's battery (declared
inputs and outputs, ONNX parity at unseen shapes, the lean runtime), an objective the backbone
cannot serve, and ``finetune -> export (int8) -> predict`` from the command line on the
contract's run.

Reference: Clark et al. 2020 (ELECTRA): section 3.2 (shared embeddings), appendix A (generator
size, lambda = 50, embedding size 128 under hidden 256 for ELECTRA-Small).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from inplugins import in_tree_plugins, registered  # noqa: F401 - the fixture

from ptmkit.testing import tiny_texts, write_tiny_corpus, write_tiny_labelled

pytestmark = pytest.mark.usefixtures("in_tree_plugins")

#: An ELECTRA small enough to pre-train in seconds: embeddings 16 projected to hidden 32.
TINY_ELECTRA = [
    "model.num_layers=2",
    "model.hidden_dim=32",
    "model.embedding_dim=16",
    "model.num_heads=2",
    "model.intermediate_dim=64",
    "model.vocabulary_size=400",
    "model.max_sequence_length=64",
    "model.min_frequency=1",
]


def test_tokenizer_is_wordpiece_with_bert_packing() -> None:
    from ptmkit.api import WORDPIECE_SPECIALS
    from ptmkit_electra import ElectraConfig, ElectraFamily

    family = ElectraFamily()
    tokenizer = family.train_tokenizer([*tiny_texts(100), "naïve café"], ElectraConfig(vocabulary_size=400, min_frequency=1))
    assert [tokenizer.token_to_id(t) for t in WORDPIECE_SPECIALS] == [0, 1, 2, 3, 4]
    specials = family.special_tokens(tokenizer)
    assert (specials.pad, specials.unk, specials.cls, specials.sep, specials.mask) == (0, 1, 2, 3, 4)
    first, second = tokenizer.encode("the cat", add_special_tokens=False).ids, tokenizer.encode("a dog", add_special_tokens=False).ids
    pair = tokenizer.encode("the cat", "a dog")  # [CLS] A [SEP] B [SEP], segments 0 then 1
    assert family.pack(first, second, 64, specials) == (pair.ids, pair.type_ids)
    assert pair.type_ids == [0] * (len(first) + 2) + [1] * (len(second) + 1)
    assert family.num_special_tokens(True) == 3 and family.num_special_tokens(False) == 2
    assert tokenizer.encode("Naïve").tokens[1:-1] == tokenizer.encode("naive").tokens[1:-1]  # uncased: accents stripped


def test_defaults_and_config_documents_every_key(capsys) -> None:
    from ptmkit.api import get_registry, resolve_config
    from ptmkit.testing import main
    from ptmkit_electra import ElectraConfig, ElectraFamily

    assert ElectraFamily.default_objectives == ("rtd",)
    config = resolve_config(get_registry(), "electra")
    rtd = config.objectives["rtd"]
    assert (rtd.discriminator_weight, rtd.generator_hidden_ratio, rtd.mask_rate) == (50.0, 0.25, 0.15)  # the paper's
    assert (config.model.hidden_dim, config.model.embedding_dim, config.model.layer_norm_epsilon) == (256, 128, 1e-12)
    assert main(["config", "electra"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    start = lines.index("[model]")
    for field in dataclasses.fields(ElectraConfig):
        index = next(i for i in range(start, len(lines)) if lines[i].startswith(f"{field.name} = "))
        assert lines[index - 1].startswith("# "), field.name  # a comment documents it
    assert 'family = "electra"' in text and "[objectives.rtd]" in text


def test_embeddings_are_projected_to_the_hidden_size() -> None:
    """keras-hub's layers, with the exact GELU and the config's epsilon; embeddings of 16 go through
    a 16 -> 32 dense (none when both are 32)."""
    from ptmkit_electra import ElectraConfig
    from ptmkit_electra.backbone import build_backbone

    config = ElectraConfig(vocabulary_size=50, num_layers=1, hidden_dim=32, embedding_dim=16, num_heads=2, intermediate_dim=64,
                           max_sequence_length=16, layer_norm_epsilon=1e-5)
    backbone = build_backbone(config)
    assert tuple(backbone.token_embedding.embeddings.shape) == (50, 16)
    assert tuple(backbone.embeddings_projection.kernel.shape) == (16, 32)
    assert backbone.transformer_layers[0]._feedforward_layer_norm.epsilon == 1e-5
    ones = np.ones((2, 5), "int32")
    out = backbone({"token_ids": ones, "segment_ids": 0 * ones, "padding_mask": ones})
    assert tuple(out["sequence_output"].shape) == (2, 5, 32) and tuple(out["pooled_output"].shape) == (2, 32)
    same = build_backbone(dataclasses.replace(config, embedding_dim=32))
    assert not any(layer.name == "embeddings_projection" for layer in same.layers)


def test_generator_is_electras_size_on_the_discriminators_embeddings() -> None:
    from ptmkit.api import SharesEmbeddings
    from ptmkit_electra import ElectraConfig, ElectraFamily

    family = ElectraFamily()
    assert isinstance(family, SharesEmbeddings)
    # ELECTRA-Small (Table 6 / google/electra-small-generator): hidden 256, embedding 128 -> generator hidden 64, 1 head, ffn 256
    small = family.scale_config(ElectraConfig(num_layers=12), 0.25)
    assert (small.hidden_dim, small.num_heads, small.intermediate_dim, small.embedding_dim, small.num_layers) == (64, 1, 256, 128, 12)
    discriminator = family.build_backbone(ElectraConfig(vocabulary_size=50, num_layers=1, hidden_dim=32, embedding_dim=16, num_heads=2,
                                                        intermediate_dim=64, max_sequence_length=16))
    generator = family.build_on_embeddings(family.scale_config(ElectraConfig(vocabulary_size=50, num_layers=1, hidden_dim=32, embedding_dim=16,
                                                                             num_heads=2, intermediate_dim=64, max_sequence_length=16), 0.25),
                                           discriminator)
    ones = np.ones((2, 5), "int32")
    assert tuple(generator({"token_ids": ones, "segment_ids": 0 * ones, "padding_mask": ones})["sequence_output"].shape) == (2, 5, 8)
    shared = {id(v) for v in discriminator.token_embedding.weights + discriminator.position_embedding.weights}
    assert shared <= {id(v) for v in generator.weights}  # the same variables, not copies
    own = [v for v in generator.weights if id(v) not in {id(w) for w in discriminator.weights}]
    assert own and sum(int(np.prod(v.shape)) for v in own) < discriminator.count_params()


def test_rtd_run_trains_both_and_saves_the_discriminator_alone(tmp_path: Path) -> None:
    import h5py

    from ptmkit.api import get_registry, read_toml, resolve_config
    from ptmkit.testing import main

    corpus = write_tiny_corpus(tmp_path / "corpus.txt", lines=160)
    out = tmp_path / "run"
    settings = [*TINY_ELECTRA, "train.batch_size=8", "train.sequence_length=32", "train.heldout_lines=8", "train.learning_rate=3e-3"]
    assert main(["train", "electra", "--corpus", str(corpus), "--out", str(out), *[f"--set={s}" for s in [*settings, "train.max_steps=20"]]]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["objectives"] == ["rtd"] and manifest["inputs"] == ["token_ids", "segment_ids", "padding_mask"]
    total = metrics["heldout_rtd_generator_loss"] + 50.0 * metrics["heldout_rtd_disc_loss"]  # gen + 50 x disc
    assert metrics["heldout_loss"] == pytest.approx(total, rel=1e-3)
    assert metrics["heldout_rtd_generator_loss"] < math.log(400)  # below an untrained head's
    assert metrics["heldout_rtd_disc_loss"] < math.log(2) - 0.1
    assert 0.05 < metrics["heldout_rtd_replaced_share"] <= 0.15
    registry = get_registry()
    config = resolve_config(registry, "electra", base=read_toml(out / "config.toml"))
    backbone = registry.family("electra").build_backbone(config.model)
    with h5py.File(out / "backbone.weights.h5") as file:
        sizes: list[int] = []
        file.visititems(lambda name, item: sizes.append(item.size) if isinstance(item, h5py.Dataset) else None)
    assert sum(sizes) == backbone.count_params() == metrics["parameters"]  # the generator is dropped
    # The training checkpoint holds the generator and the layers it shares: a run of 22 steps
    # stopped after its step-20 checkpoint (the same run, its end markers removed) resumes from it.
    stored = (out / "config.toml").read_text(encoding="utf-8")
    assert "max_steps = 20\n" in stored and len(list((out / "checkpoints").glob("ckpt-*.npz"))) == 1
    (out / "config.toml").write_text(stored.replace("max_steps = 20\n", "max_steps = 22\n"), encoding="utf-8")
    for name in ("manifest.json", "metrics.json", "backbone.weights.h5"):
        (out / name).unlink()
    assert main(["train", "electra", "--corpus", str(corpus), "--out", str(out), "--resume"]) == 0
    resumed = json.loads((out / "metrics.json").read_text())
    assert resumed["resumed_from_step"] == 20 and resumed["steps"] == 22


@pytest.mark.parametrize("objective", ["unilm"])
def test_an_objective_the_backbone_cannot_serve_is_refused_in_one_line(tmp_path: Path, capsys, objective: str) -> None:
    from ptmkit.api import capabilities, get_registry
    from ptmkit.testing import main

    registry = get_registry()
    assert not registry.objective(objective).requires <= capabilities(registry.family("electra"))
    corpus = write_tiny_corpus(tmp_path / "corpus.txt", lines=20)
    code = main(["train", "electra", "--corpus", str(corpus), "--out", str(tmp_path / "run"), "--objective", objective])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and f"objective {objective!r} needs" in lines[0] and "electra backbone does not provide" in lines[0], lines
    assert not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def contract(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """:func:`~ptmkit.testing.check_family`'s report on a tiny ELECTRA (its pre-training run is
    fine-tuned from the command line below: one pre-training for the module)."""
    from ptmkit.testing import check_family
    from ptmkit_electra import ElectraFamily

    with registered():
        return check_family(ElectraFamily(), tmp_path_factory.mktemp("contract"), overrides=[*TINY_ELECTRA, "model.dropout=0.0"])


def test_electra_fits_the_contract(contract: dict) -> None:
    assert contract["outputs"] == {"sequence_output": (2, 7, 32), "pooled_output": (2, 32)}
    assert contract["parity_max_abs_diff"] < 1e-4 and contract["runtime_max_abs_diff"] < 1e-4
    assert math.isfinite(contract["loss"])


def test_finetune_export_predict_from_the_command_line(contract: dict, tmp_path: Path) -> None:
    from ptmkit.testing import main

    run = contract["run"]
    train, dev = write_tiny_labelled(tmp_path, train=64, dev=16)
    finetune = ["--set=finetune.epochs=1", "--set=finetune.batch_size=16", "--set=finetune.sequence_length=32", "--set=finetune.learning_rate=1e-3"]
    assert main(["finetune", str(run), "--train", str(train), "--dev", str(dev), "--out", str(tmp_path / "ft"), *finetune]) == 0
    metrics = json.loads((tmp_path / "ft" / "metrics.json").read_text())
    assert 0.0 <= metrics["dev_accuracy"] <= 1.0
    assert main(["export", str(tmp_path / "ft"), "--int8"]) == 0
    export = json.loads((tmp_path / "ft" / "export" / "manifest.json").read_text())
    assert [spec["name"] for spec in export["inputs"]] == ["token_ids", "segment_ids", "padding_mask"]
    assert max(export["variants"]["fp32"]["parity_max_abs_diff"].values()) < 1e-4
    int8 = export["variants"]["int8"]
    assert int8["quantization"]["quantized_matmul"] > 0 and 0.0 <= int8["dev_agreement_with_fp32"] <= 1.0
    from ptmkit_export import Predictor

    predictor = Predictor(tmp_path / "ft" / "export", variant="fp32")
    probabilities = np.asarray([list(p.probabilities.values()) for p in predictor.predict(["a wonderful film", "a dull film"])])
    assert probabilities.shape == (2, len(export["labels"])) and np.allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
