"""``ptmkit import-hf`` of ELECTRA discriminators against transformers: small random-init
``ElectraModel`` (unprefixed tensors) and ``ElectraForPreTraining`` (``electra.`` prefix and a
discriminator head), embedding size 16 under hidden 32 (the projection ported), saved with
``save_pretrained``, give transformers' hidden states (1e-4, three shapes, and a right-padded
batch) and the saved ``ElectraTokenizerFast``'s ids on 50 sentences. transformers runs in a
subprocess: torch crashes when it is imported after TensorFlow, which the suite has loaded."""

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

#: Makes the checkpoints (random init, seed 0) from a WordPiece tokenizer.json and writes
#: transformers' hidden states and token ids. Job on stdin, as JSON.
REFERENCE_SCRIPT = """
import json, sys
import numpy as np
import torch
from transformers import AutoTokenizer, ElectraConfig, ElectraForPreTraining, ElectraModel, ElectraTokenizerFast
job = json.load(sys.stdin)
tokenizer = ElectraTokenizerFast(tokenizer_file=job["tokenizer"], do_lower_case=True)
config = ElectraConfig(vocab_size=len(tokenizer), embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=64, max_position_embeddings=64, type_vocab_size=2, pad_token_id=0)
result = {"tokens": {}}
rng = np.random.default_rng(0)
ids_per_shape = [rng.integers(5, len(tokenizer), (batch, length)) for batch, length in job["shapes"]]
segments_per_shape = [(np.arange(length)[None, :] >= length // 2).repeat(batch, 0).astype("int64") for batch, length in job["shapes"]]
padded = np.zeros((len(job["padded"]), max(job["padded"])), "int64")
for row, length in enumerate(job["padded"]):
    padded[row, :length] = rng.integers(5, len(tokenizer), length)
result["ids"] = [ids.tolist() for ids in ids_per_shape] + [padded.tolist()]
result["segments"] = [s.tolist() for s in segments_per_shape] + [np.zeros_like(padded).tolist()]
for name, cls in (("model", ElectraModel), ("pretraining", ElectraForPreTraining)):
    out = f"{job['work']}/{name}"
    torch.manual_seed(0)
    model = cls(config).eval()
    with torch.no_grad():  # a larger spread than the 0.02 init: hidden states far from the layer norms' fixed points
        for p in model.parameters():
            p.mul_(4.0)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    encoder = model if name == "model" else model.electra
    with torch.no_grad():
        for i, (ids, segments) in enumerate(zip([*ids_per_shape, padded], result["segments"])):
            mask = (ids != 0).astype("int64")
            output = encoder(input_ids=torch.tensor(ids), token_type_ids=torch.tensor(segments), attention_mask=torch.tensor(mask))
            np.save(f"{out}/hidden-{i}.npy", output.last_hidden_state.numpy())
    reloaded = AutoTokenizer.from_pretrained(out)
    result["tokens"][name] = [reloaded(s).input_ids for s in job["sentences"]]
    result["class"] = type(reloaded).__name__
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """Two random-init ELECTRA checkpoints saved by transformers (``model``, ``pretraining``) and
    transformers' outputs on them."""
    from ptmkit.api import train_wordpiece

    work = tmp_path_factory.mktemp("electra-hf")
    corpus = write_tiny_corpus(work / "corpus.txt", lines=200)
    texts = corpus.read_text(encoding="utf-8").splitlines() + SENTENCES
    train_wordpiece(texts, 500, lowercase=True, min_frequency=1).save(str(work / "tokenizer.json"))
    job = {"work": str(work), "tokenizer": str(work / "tokenizer.json"), "shapes": SHAPES, "padded": PADDED_LENGTHS, "sentences": SENTENCES}
    return work, hf_reference(REFERENCE_SCRIPT, job)


@pytest.mark.parametrize("name", ["model", "pretraining"])
def test_imported_electra_matches_transformers(checkpoints: tuple[Path, dict], tmp_path: Path, name: str) -> None:
    from ptmkit.api import RunDir, get_registry
    from ptmkit.testing import load_backbone, main

    work, reference = checkpoints
    assert main(["import-hf", str(work / name), "--out", str(tmp_path / "run")]) == 0
    backbone, config, tokenizer, _ = load_backbone(get_registry(), RunDir(tmp_path / "run"))
    assert (config.model.embedding_dim, config.model.hidden_dim, config.model.max_sequence_length) == (16, 32, 64)
    for i, (ids, segments) in enumerate(zip(reference["ids"], reference["segments"], strict=True)):
        ids = np.asarray(ids, "int32")
        mask = (ids != 0).astype("int32")
        out = backbone({"token_ids": ids, "segment_ids": np.asarray(segments, "int32"), "padding_mask": mask})
        real = mask.astype(bool)  # transformers' states at [PAD] positions are not a text's
        theirs = np.load(work / name / f"hidden-{i}.npy")
        assert np.max(np.abs(np.asarray(out["sequence_output"])[real] - theirs[real])) < 1e-4, (name, ids.shape)
        assert np.std(theirs[real]) > 0.5  # not a degenerate reference
    assert [e.ids for e in tokenizer.encode_batch(SENTENCES)] == reference["tokens"][name]
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["family"] == "electra" and manifest["imported_from"]["weights"]["pooler"] is False


def test_vocab_txt_gives_the_tokenizer_json_ids(checkpoints: tuple[Path, dict], tmp_path: Path) -> None:
    from ptmkit.api import load_checkpoint_wordpiece

    directory = tmp_path / "ckpt"
    shutil.copytree(checkpoints[0] / "model", directory)
    if not (directory / "vocab.txt").is_file():  # transformers 5 saves tokenizer.json alone: vocab.txt is its tokens by id
        vocabulary = json.loads((directory / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
        (directory / "vocab.txt").write_text("".join(f"{token}\n" for token in sorted(vocabulary, key=vocabulary.get)), encoding="utf-8")
    (directory / "tokenizer.json").unlink()
    tokenizer, source, unchanged = load_checkpoint_wordpiece(directory, 500)
    assert source == "vocab.txt" and not unchanged
    assert [e.ids for e in tokenizer.encode_batch(SENTENCES)] == checkpoints[1]["tokens"]["model"]


@pytest.mark.parametrize(
    ("breaker", "needles"),
    [
        (lambda d: edit_hf_config(d, embedding_size=32), ["model.safetensors", "'embeddings.word_embeddings.weight'", "[500, 16]", "[500, 32]"]),
        (lambda d: edit_hf_config(d, num_hidden_layers=3), ["model.safetensors", "missing tensor 'encoder.layer.2.", "3 layers"]),
        (lambda d: edit_hf_config(d, hidden_act="silu"), ["config.json", "'hidden_act' = 'silu'", "supported: gelu"]),
        (lambda d: edit_hf_config(d, position_embedding_type="relative_key"), ["config.json", "'position_embedding_type'"]),
        (lambda d: edit_hf_config(d, embedding_size=0), ["config.json", "'embedding_size'"]),
        (lambda d: (d / "model.safetensors").write_bytes(b"\x00" * 10), ["model.safetensors", "not a readable safetensors file"]),
        (lambda d: (d / "tokenizer.json").unlink() or (d / "vocab.txt").unlink(missing_ok=True), ["no tokenizer.json or vocab.txt"]),
    ],
    ids=["embedding size", "layers", "activation", "relative positions", "zero embedding size", "truncated weights", "no tokenizer"],
)
def test_bad_checkpoints_are_refused_in_one_line(checkpoints: tuple[Path, dict], tmp_path: Path, capsys, breaker, needles: list[str]) -> None:
    line = import_hf_refusal(checkpoints[0] / "model", breaker, tmp_path, capsys)
    assert all(needle in line for needle in needles), line
