"""``ptmkit import-hf`` of ALBERT checkpoints against transformers: small random-init
``AlbertModel`` (2 groups of 2 inner layers, tanh GELU, with a pooler, unprefixed tensors) and
``AlbertForMaskedLM`` (1 shared layer, exact GELU, ``albert.`` prefix, no pooler) saved with
``save_pretrained`` give transformers' hidden states (1e-4, three shapes with both segments, and a
right-padded batch). The tokenizer is transformers' own ``AlbertTokenizer`` built from the pieces
and scores of a unigram model ptmkit trained: the imported run and ptmkit's trained tokenizer give
its ids on 50 sentences. transformers runs in a subprocess: torch crashes when it is imported
after TensorFlow, which the suite has loaded."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
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
#: name -> (transformers class, its config beyond the shared sizes).
MODELS = {
    "model": (
        "AlbertModel",
        {"num_hidden_layers": 4, "num_hidden_groups": 2, "inner_group_num": 2, "hidden_act": "gelu_new"},
    ),
    "mlm": (
        "AlbertForMaskedLM",
        {"num_hidden_layers": 3, "num_hidden_groups": 1, "inner_group_num": 1, "hidden_act": "gelu"},
    ),
}

#: Makes the checkpoints (random init, seed 0) from the pieces and scores of a unigram
#: tokenizer.json and writes transformers' hidden states and token ids. Job on stdin, as JSON.
REFERENCE_SCRIPT = """
import json, sys
from pathlib import Path
import numpy as np
import torch
import transformers
from transformers import AlbertConfig, AlbertTokenizer, AutoTokenizer
job = json.load(sys.stdin)
vocab = [tuple(entry) for entry in json.load(open(job["tokenizer"]))["model"]["vocab"]]
tokenizer = AlbertTokenizer(vocab=vocab)
result = {"ids": [], "segments": [], "tokens": {}}
rng = np.random.default_rng(0)
ids_per_shape = [rng.integers(5, len(tokenizer), (batch, length)) for batch, length in job["shapes"]]
segments = [(np.arange(length)[None, :] >= length // 2).repeat(batch, 0).astype("int64") for batch, length in job["shapes"]]
padded = np.zeros((len(job["padded"]), max(job["padded"])), "int64")
for row, length in enumerate(job["padded"]):
    padded[row, :length] = rng.integers(5, len(tokenizer), length)
result["ids"] = [ids.tolist() for ids in ids_per_shape] + [padded.tolist()]
result["segments"] = [s.tolist() for s in segments] + [np.zeros_like(padded).tolist()]
for name, (cls_name, extra) in job["models"].items():
    out = f"{job['work']}/{name}"
    config = AlbertConfig(vocab_size=len(tokenizer), embedding_size=16, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                          max_position_embeddings=64, pad_token_id=0, **extra)
    torch.manual_seed(0)
    model = getattr(transformers, cls_name)(config).eval()
    with torch.no_grad():  # a larger spread than the 0.02 init: hidden states far from the layer norms' fixed points
        for p in model.parameters():
            p.mul_(4.0)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    encoder = model if name == "model" else model.albert
    with torch.no_grad():
        for i, (ids, types) in enumerate(zip([*ids_per_shape, padded], result["segments"])):
            mask = (ids != 0).astype("int64")
            output = encoder(input_ids=torch.tensor(ids), token_type_ids=torch.tensor(types), attention_mask=torch.tensor(mask))
            np.save(f"{out}/hidden-{i}.npy", output.last_hidden_state.numpy())
            if name == "model":
                np.save(f"{out}/pooled-{i}.npy", output.pooler_output.numpy())
    reloaded = AutoTokenizer.from_pretrained(out)
    result["tokens"][name] = [reloaded(s).input_ids for s in job["sentences"]]
    result["class"] = type(reloaded).__name__
if job["spiece"]:  # a folder with spiece.model alone: transformers reads the SentencePiece model itself
    spiece = AlbertTokenizer.from_pretrained(str(Path(job["spiece"]).parent))
    result["spiece_tokens"] = [spiece(s).input_ids for s in job["sentences"]]
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """Two random-init ALBERT checkpoints saved by transformers (``model``, ``mlm``), transformers'
    outputs on them, and ptmkit's trained tokenizer (``work/tokenizer.json``)."""
    from ptmkit_albert.tokenizer import train_albert_unigram

    work = tmp_path_factory.mktemp("albert-hf")
    corpus = write_tiny_corpus(work / "corpus.txt", lines=200)
    texts = corpus.read_text(encoding="utf-8").splitlines() + SENTENCES  # every character of the sentences is a piece
    train_albert_unigram(texts, 600).save(str(work / "tokenizer.json"))
    spiece = _train_sentencepiece(work, texts)
    job = {
        "work": str(work),
        "tokenizer": str(work / "tokenizer.json"),
        "shapes": SHAPES,
        "padded": PADDED_LENGTHS,
        "sentences": SENTENCES,
        "models": MODELS,
        "spiece": spiece and str(spiece),
    }
    return work, hf_reference(REFERENCE_SCRIPT, job)


@pytest.mark.parametrize("name", ["model", "mlm"])
def test_imported_albert_matches_transformers(checkpoints: tuple[Path, dict], tmp_path: Path, name: str) -> None:
    from ptmkit.api import RunDir, get_registry
    from ptmkit.testing import load_backbone, main

    work, reference = checkpoints
    assert main(["import-hf", str(work / name), "--out", str(tmp_path / "run")]) == 0
    backbone, config, tokenizer, _ = load_backbone(get_registry(), RunDir(tmp_path / "run"))
    extra = MODELS[name][1]
    assert (config.model.num_layers, config.model.num_groups, config.model.inner_group_num) == (
        extra["num_hidden_layers"],
        extra["num_hidden_groups"],
        extra["inner_group_num"],
    )
    assert (config.model.embedding_dim, config.model.hidden_dim, config.model.max_sequence_length) == (16, 32, 64)
    for i, (ids, segments) in enumerate(zip(reference["ids"], reference["segments"], strict=True)):
        ids = np.asarray(ids, "int32")
        mask = (ids != 0).astype("int32")
        out = backbone({"token_ids": ids, "segment_ids": np.asarray(segments, "int32"), "padding_mask": mask})
        real = mask.astype(bool)  # transformers' states at <pad> positions are not a text's
        theirs = np.load(work / name / f"hidden-{i}.npy")
        assert np.max(np.abs(np.asarray(out["sequence_output"])[real] - theirs[real])) < 1e-4, (name, ids.shape)
        assert np.std(theirs[real]) > 0.5  # not a degenerate reference
        if name == "model":
            assert np.max(np.abs(np.asarray(out["pooled_output"]) - np.load(work / name / f"pooled-{i}.npy"))) < 1e-4
    assert reference["class"] == "AlbertTokenizer"
    assert [e.ids for e in tokenizer.encode_batch(SENTENCES)] == reference["tokens"][name]
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["family"] == "albert" and manifest["imported_from"]["weights"]["pooler"] is (name == "model")


def test_ptmkits_trained_tokenizer_is_transformers_albert_tokenizer(checkpoints: tuple[Path, dict]) -> None:
    """The same pieces and scores tokenize alike in ptmkit's layout and in transformers' own
    ``AlbertTokenizer`` (its normaliser, pre-tokeniser and template): lower case, accents,
    whitespace runs, tabs, newlines, scripts without spaces, unknown characters."""
    from tokenizers import Tokenizer

    work, reference = checkpoints
    ours = Tokenizer.from_file(str(work / "tokenizer.json"))
    assert [e.ids for e in ours.encode_batch(SENTENCES)] == reference["tokens"]["model"]
    assert sum(len(ids) for ids in reference["tokens"]["model"]) > 300


def _train_sentencepiece(work: Path, texts: list[str]) -> Path | None:
    """``work/spiece/spiece.model``: a SentencePiece unigram model with ALBERT's specials (``<pad>`` 0,
    ``<unk>`` 1, control symbols ``[CLS]`` ``[SEP]`` ``[MASK]``), as Google's ALBERT trained its
    own; None when sentencepiece is not installed."""
    if importlib.util.find_spec("sentencepiece") is None:
        return None
    import sentencepiece

    (work / "spiece").mkdir()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter([t for t in texts if "\n" not in t and t.strip()]),
        model_prefix=str(work / "spiece" / "spiece"),
        vocab_size=200,
        model_type="unigram",
        pad_id=0,
        unk_id=1,
        bos_id=-1,
        eos_id=-1,
        control_symbols=["[CLS]", "[SEP]", "[MASK]"],
        character_coverage=1.0,
        minloglevel=2,
    )
    return work / "spiece" / "spiece.model"


def test_a_spiece_model_alone_tokenizes_as_transformers(checkpoints: tuple[Path, dict], tmp_path: Path) -> None:
    """Google's ALBERT checkpoints ship ``spiece.model`` alone: read with sentencepiece, its pieces,
    scores and normalisation table give transformers' ids."""
    from ptmkit_albert.hf import load_tokenizer, read_albert_config

    work, reference = checkpoints
    if not (work / "spiece" / "spiece.model").is_file():
        pytest.skip("the test extra installs sentencepiece (through transformers' tokenizers)")
    directory = tmp_path / "ckpt"
    shutil.copytree(work / "model", directory)
    (directory / "tokenizer.json").unlink()
    shutil.copy(work / "spiece" / "spiece.model", directory / "spiece.model")
    tokenizer, source = load_tokenizer(directory, read_albert_config(directory)[0])
    assert source is None
    assert [e.ids for e in tokenizer.encode_batch(SENTENCES)] == reference["spiece_tokens"]


def test_spiece_model_alone_needs_sentencepiece(
    checkpoints: tuple[Path, dict], tmp_path: Path, capsys, monkeypatch
) -> None:
    from ptmkit.testing import main

    monkeypatch.setitem(sys.modules, "sentencepiece", None)  # as if it were not installed
    directory = tmp_path / "ckpt"
    shutil.copytree(checkpoints[0] / "model", directory)
    (directory / "tokenizer.json").unlink()
    (directory / "spiece.model").write_bytes(b"\x0a\x00")
    assert main(["import-hf", str(directory), "--out", str(tmp_path / "run")]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "spiece.model" in lines[0] and "pip install sentencepiece" in lines[0], lines
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("breaker", "needles"),
    [
        (
            lambda d: edit_hf_config(d, embedding_size=8),
            ["model.safetensors", "'embeddings.word_embeddings.weight'", ", 16]", ", 8]"],
        ),
        (
            lambda d: edit_hf_config(d, num_hidden_groups=4),
            ["model.safetensors", "missing tensor 'encoder.albert_layer_groups.2."],
        ),
        (
            lambda d: edit_hf_config(d, num_hidden_groups=3),
            ["config.json", "'num_hidden_groups' = 3 does not divide 'num_hidden_layers' = 4"],
        ),
        (lambda d: edit_hf_config(d, hidden_act="silu"), ["config.json", "'hidden_act' = 'silu'", "supported: gelu_new"]),
        (
            lambda d: edit_hf_config(d, position_embedding_type="relative_key"),
            ["config.json", "'position_embedding_type'"],
        ),
        (
            lambda d: (d / "model.safetensors").write_bytes(b"\x00" * 10),
            ["model.safetensors", "not a readable safetensors file"],
        ),
        (lambda d: (d / "tokenizer.json").unlink(), ["no tokenizer.json nor spiece.model"]),
    ],
    ids=[
        "embedding size",
        "groups",
        "groups not dividing",
        "activation",
        "relative positions",
        "truncated weights",
        "no tokenizer",
    ],
)
def test_bad_checkpoints_are_refused_in_one_line(checkpoints: tuple[Path, dict], tmp_path: Path, capsys, breaker, needles: list[str]) -> None:
    line = import_hf_refusal(checkpoints[0] / "model", breaker, tmp_path, capsys)
    assert all(needle in line for needle in needles), line
