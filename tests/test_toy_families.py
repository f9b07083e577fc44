"""The contract's proof: two families that exist only in ``tests/toyfamilies/site`` (a
distribution with a ``ptmkit.plugins`` entry point, installed by putting it on ``sys.path``, as
pip would) go through train -> finetune -> export -> predict with no core change.

* ``toy-decoder`` reads ``token_ids`` alone (no segment ids, no padding mask) and has bos/eos;
* ``toy-chars`` reads ``char_ids`` of shape ``(batch, sequence, characters)``.

The references: the exported graph against the Keras model (max abs difference, at shapes other
than the trace's), the lean runtime against Keras on the same inputs, held-out perplexity as
``exp`` of the held-out token-level loss.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest

from ptmkit.plugins import Registry, get_registry
from ptmkit.testing import check_family, ptmkit_cli, tiny_labelled  # noqa: F401  (fixtures)

SITE = Path(__file__).resolve().parent / "toyfamilies" / "site"
TINY_MODEL = ("model.vocabulary_size=120", "model.hidden_dim=8", "model.max_sequence_length=32")


@pytest.fixture(scope="module")
def toys() -> Iterator[Registry]:
    """The ``ptmkit-toys`` distribution installed (on ``sys.path``) for this module's tests."""
    sys.path.insert(0, str(SITE))
    get_registry.cache_clear()
    try:
        yield get_registry()
    finally:
        sys.path.remove(str(SITE))
        get_registry.cache_clear()


def test_toy_plugin_is_discovered_through_its_entry_point(toys: Registry, ptmkit_cli) -> None:  # noqa: F811
    listed = {p["name"]: p for p in json.loads(ptmkit_cli("plugins", "--json").stdout)}
    assert listed["toys"]["families"] == ["toy-decoder", "toy-chars"] and listed["toys"]["distribution"] == "ptmkit-toys"
    info = {p.name: p for p in toys.plugins}["toys"]
    assert info.distribution == "ptmkit-toys" and info.version == "0.1" and info.ok
    assert info.families == ["toy-decoder", "toy-chars"] and info.objectives == ["toy_clm"]
    # Matching by capability: mlm and span need the token embedding, which neither toy exposes;
    # nsp, sop and sso need only a pooled output.
    for name in info.families:
        assert toys.objectives_for(toys.family(name)) == ["nsp", "sop", "sso", "toy_clm"]
        assert toys.heads_for(toys.family(name)) == ["classification"]
    assert toys.objectives_for(toys.family("bert")) == ["mlm", "nsp", "rtd", "sop", "span", "sso", "tlm", "toy_clm", "unilm", "wso"]


@pytest.mark.parametrize("name", ["toy-decoder", "toy-chars"])
def test_toy_family_goes_through_train_finetune_export_predict(toys: Registry, name: str, tmp_path: Path, tiny_labelled: tuple[Path, Path]) -> None:  # noqa: F811
    from ptmkit.exporting import export_run
    from ptmkit.training.finetune import finetune, load_classifier
    from ptmkit_export import Predictor

    family = toys.family(name)
    report = check_family(family, tmp_path, overrides=TINY_MODEL)  # train one run, export its embeddings
    assert report["parity_max_abs_diff"] < 1e-4 and report["runtime_max_abs_diff"] < 1e-4
    metrics = json.loads((report["run"] / "metrics.json").read_text())
    assert metrics["heldout_toy_clm_perplexity"] == pytest.approx(math.exp(metrics["heldout_toy_clm_loss"]), rel=1e-3)

    train, dev = tiny_labelled
    finetuned = tmp_path / "finetuned"
    scores = finetune(report["run"], train, dev, finetuned, overrides=["finetune.epochs=2", "finetune.batch_size=8"])
    assert 0.0 <= scores["dev_accuracy"] <= 1.0 and scores["dev_examples"] == 16
    manifest = export_run(finetuned)
    declared = [(s.name, s.field, s.dtype) for s in family.inputs]
    assert [(i["name"], i["encoding"], i["dtype"]) for i in manifest["inputs"]] == declared
    graph = onnx.load(str(finetuned / "export" / "model.onnx")).graph
    dims = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in graph.input}
    assert dims == {s.name: [s.sizes.get(axis, axis) for axis in s.axes] for s in family.inputs}

    texts = ["the cat saw the bridge, wonderful.", "a dog ignored the last train again and again, dull.", "dull"]
    predictor = Predictor(finetuned / "export")
    feeds = predictor.encode(texts)
    model, *_ = load_classifier(finetuned)
    np.testing.assert_allclose(predictor.logits(texts), np.asarray(model(feeds, training=False)), atol=1e-5)
    assert [p.label for p in predictor.predict(texts)] == [manifest["labels"][i] for i in np.argmax(predictor.logits(texts), -1)]

    # The Triton repository's inputs are the declared ones, characters axis and all.
    from ptmkit_export.triton import write_triton_repository

    config = (write_triton_repository(finetuned / "export", tmp_path / "triton", name="toy") / "config.pbtxt").read_text()
    blocks = {spec.name: config.split(f'name: "{spec.name}"')[1].split("}")[0] for spec in family.inputs}
    for spec in family.inputs:
        dims = ", ".join(str(spec.sizes.get(axis, -1)) for axis in spec.axes[1:])
        assert f"dims: [ {dims} ]" in blocks[spec.name] and "TYPE_INT32" in blocks[spec.name]


def test_decoder_graph_has_no_segment_ids_and_chars_graph_reads_characters(toys: Registry, tmp_path: Path) -> None:
    from ptmkit.contract import InputSpec

    decoder, chars = toys.family("toy-decoder"), toys.family("toy-chars")
    assert decoder.input_names == ("token_ids",) and decoder.special_token_names.keys() == {"pad", "unk", "bos", "eos"}
    assert chars.inputs[0] == InputSpec("char_ids", ("batch", "sequence", "characters"), "int32", "char_ids", {"characters": 8})
    assert decoder.graph_optimizer(None) is None  # no ONNX Runtime model type declared: --optimize 2 is refused
