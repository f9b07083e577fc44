"""``ptmkit import-hf`` of RoBERTa checkpoints against transformers: small random-init
``RobertaModel`` (with a pooler, unprefixed tensors) and ``RobertaForMaskedLM`` (``roberta.``
prefix, no pooler) saved with ``save_pretrained`` give transformers' hidden states (1e-4, three
shapes, and a right-padded batch) and the saved ``RobertaTokenizerFast``'s ids on 50 sentences.
transformers runs in a subprocess: torch crashes when it is imported after TensorFlow, which the
suite has loaded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from inplugins import in_tree_plugins  # noqa: F401 - the fixture

from ptmkit.testing import TOKENIZER_SENTENCES as SENTENCES
from ptmkit.testing import edit_hf_config, hf_reference, import_hf_refusal, write_tiny_corpus

pytestmark = pytest.mark.usefixtures("in_tree_plugins")

SHAPES = [(1, 5), (2, 17), (3, 48)]
#: Real lengths of the right-padded batch (padded to the longest, 30).
PADDED_LENGTHS = [30, 12, 1]

#: Makes the checkpoints (random init, seed 0) from a byte-level BPE tokenizer.json and writes
#: transformers' hidden states and token ids. Job on stdin, as JSON.
REFERENCE_SCRIPT = """
import json, sys
import numpy as np
import torch
from transformers import AutoTokenizer, RobertaConfig, RobertaForMaskedLM, RobertaModel, RobertaTokenizerFast
job = json.load(sys.stdin)
tokenizer = RobertaTokenizerFast(tokenizer_file=job["tokenizer"])
config = RobertaConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                       max_position_embeddings=66, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2)
result = {"ids": [], "tokens": {}}
rng = np.random.default_rng(0)
ids_per_shape = [rng.integers(3, len(tokenizer), (batch, length)) for batch, length in job["shapes"]]  # no <pad> (1) inside a text
padded = np.ones((len(job["padded"]), max(job["padded"])), "int64")
for row, length in enumerate(job["padded"]):
    padded[row, :length] = rng.integers(3, len(tokenizer), length)
result["ids"] = [ids.tolist() for ids in ids_per_shape] + [padded.tolist()]
for name, cls in (("model", RobertaModel), ("mlm", RobertaForMaskedLM)):
    out = f"{job['work']}/{name}"
    torch.manual_seed(0)
    model = cls(config).eval()
    with torch.no_grad():  # a larger spread than the 0.02 init: hidden states far from the layer norms' fixed points
        for p in model.parameters():
            p.mul_(4.0)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    tokenizer.backend_tokenizer.model.save(out)  # vocab.json + merges.txt, as RoBERTa checkpoints also ship them
    encoder = model if name == "model" else model.roberta
    with torch.no_grad():
        for i, ids in enumerate([*ids_per_shape, padded]):
            mask = (ids != 1).astype("int64")
            output = encoder(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask))
            np.save(f"{out}/hidden-{i}.npy", output.last_hidden_state.numpy())
            if name == "model":
                np.save(f"{out}/pooled-{i}.npy", output.pooler_output.numpy())
    reloaded = AutoTokenizer.from_pretrained(out)
    result["tokens"][name] = [reloaded(s).input_ids for s in job["sentences"]]
    result["class"] = type(reloaded).__name__
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """Two random-init RoBERTa checkpoints saved by transformers (``model``, ``mlm``) and
    transformers' outputs on them."""
    from ptmkit_roberta.tokenizer import train_roberta_bpe

    work = tmp_path_factory.mktemp("roberta-hf")
    corpus = write_tiny_corpus(work / "corpus.txt", lines=200)
    texts = corpus.read_text(encoding="utf-8").splitlines() + SENTENCES  # its bytes and some merges of them
    train_roberta_bpe(texts, 500, 1).save(str(work / "tokenizer.json"))
    job = {"work": str(work), "tokenizer": str(work / "tokenizer.json"), "shapes": SHAPES, "padded": PADDED_LENGTHS, "sentences": SENTENCES}
    return work, hf_reference(REFERENCE_SCRIPT, job)


@pytest.mark.parametrize("name", ["model", "mlm"])
def test_imported_roberta_matches_transformers(checkpoints: tuple[Path, dict], tmp_path: Path, name: str) -> None:
    from ptmkit.api import RunDir, get_registry
    from ptmkit.testing import load_backbone, main

    work, reference = checkpoints
    assert main(["import-hf", str(work / name), "--out", str(tmp_path / "run")]) == 0
    backbone, config, tokenizer, _ = load_backbone(get_registry(), RunDir(tmp_path / "run"))
    assert config.model.max_sequence_length == 64  # 66 positions less padding_idx + 1
    for i, ids in enumerate(reference["ids"]):
        ids = np.asarray(ids, "int32")
        mask = (ids != 1).astype("int32")
        out = backbone({"token_ids": ids, "padding_mask": mask})
        real = mask.astype(bool)  # transformers' states at <pad> positions are not a text's
        theirs = np.load(work / name / f"hidden-{i}.npy")
        assert np.max(np.abs(np.asarray(out["sequence_output"])[real] - theirs[real])) < 1e-4, (name, ids.shape)
        assert np.std(theirs[real]) > 0.5  # not a degenerate reference
        if name == "model":
            assert np.max(np.abs(np.asarray(out["pooled_output"]) - np.load(work / name / f"pooled-{i}.npy"))) < 1e-4
    assert [e.ids for e in tokenizer.encode_batch(SENTENCES)] == reference["tokens"][name]
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["family"] == "roberta" and manifest["imported_from"]["weights"]["pooler"] is (name == "model")


def test_vocab_and_merges_give_the_tokenizer_json_ids(checkpoints: tuple[Path, dict], tmp_path: Path) -> None:
    from ptmkit_roberta.hf import load_tokenizer, read_roberta_config

    directory = tmp_path / "ckpt"
    shutil.copytree(checkpoints[0] / "model", directory)
    (directory / "tokenizer.json").unlink()
    if not (directory / "vocab.json").is_file():
        pytest.skip("transformers saved no vocab.json")
    tokenizer, source = load_tokenizer(directory, read_roberta_config(directory)[0])
    assert source is None
    assert [e.ids for e in tokenizer.encode_batch(SENTENCES)] == checkpoints[1]["tokens"]["model"]


@pytest.mark.parametrize(
    ("breaker", "needles"),
    [
        (lambda d: edit_hf_config(d, hidden_size=64, num_attention_heads=2), ["model.safetensors", "'embeddings.word_embeddings.weight'", "[500, 32]", "[500, 64]"]),
        (lambda d: edit_hf_config(d, num_hidden_layers=3), ["model.safetensors", "missing tensor 'encoder.layer.2.", "3 layers"]),
        (lambda d: edit_hf_config(d, max_position_embeddings=130), ["'embeddings.position_embeddings.weight'", "[66, 32]", "[130, 32]"]),
        (lambda d: edit_hf_config(d, hidden_act="silu"), ["config.json", "'hidden_act' = 'silu'", "supported: gelu"]),
        (lambda d: edit_hf_config(d, position_embedding_type="relative_key"), ["config.json", "'position_embedding_type'"]),
        (lambda d: (d / "model.safetensors").write_bytes(b"\x00" * 10), ["model.safetensors", "not a readable safetensors file"]),
        (lambda d: (d / "tokenizer.json").unlink() or (d / "vocab.json").unlink(missing_ok=True), ["no tokenizer.json, nor vocab.json and merges.txt"]),
    ],
    ids=["hidden size", "layers", "positions", "activation", "relative positions", "truncated weights", "no tokenizer"],
)
def test_bad_checkpoints_are_refused_in_one_line(checkpoints: tuple[Path, dict], tmp_path: Path, capsys, breaker, needles: list[str]) -> None:
    line = import_hf_refusal(checkpoints[0] / "model", breaker, tmp_path, capsys)
    assert all(needle in line for needle in needles), line
