"""``ptmkit import-hf`` of XLNet checkpoints against transformers: small random-init ``XLNetModel``
(exact GELU, unprefixed tensors), ``XLNetLMHeadModel`` (tanh GELU, ``transformer.`` prefix,
clamped relative distances) and ``XLNetForSequenceClassification`` (its sequence summary is the
ported ``pooled_output``) saved with ``save_pretrained`` give transformers' hidden states (1e-4,
three shapes with two segments and ``<cls>``'s third, and a padded batch: transformers'
left-padded rows against ptmkit's right-padded ones). The query stream under a permutation LM's
masks (:mod:`ptmkit.objectives.plm`) gives transformers' ``XLNetModel(perm_mask=...,
target_mapping=...)``. The tokenizer is transformers' own ``XLNetTokenizer`` built from the
pieces and scores of a unigram model ptmkit trained: the imported run and ptmkit's trained
tokenizer give its ids on 50 sentences. transformers runs in a subprocess: torch crashes when it
is imported after TensorFlow, which the suite has loaded."""

from __future__ import annotations

import importlib.util
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
#: Real lengths of the padded batch (padded to the longest, 30).
PADDED_LENGTHS = [30, 12, 2]
#: name -> (transformers class, its config beyond the shared sizes).
MODELS = {
    "model": ("XLNetModel", {"n_layer": 2, "ff_activation": "gelu"}),
    "lm": ("XLNetLMHeadModel", {"n_layer": 3, "ff_activation": "gelu_new", "clamp_len": 20}),
    "classify": ("XLNetForSequenceClassification", {"n_layer": 1, "ff_activation": "gelu", "num_labels": 3}),
}

#: Makes the checkpoints (random init, seed 0) from the pieces and scores of a unigram
#: tokenizer.json and writes transformers' hidden states and token ids. Job on stdin, as JSON.
REFERENCE_SCRIPT = """
import json, sys
import numpy as np
import torch
import transformers
from transformers import AutoTokenizer, XLNetConfig, XLNetTokenizer
job = json.load(sys.stdin)
vocab = [tuple(entry) for entry in json.load(open(job["tokenizer"]))["model"]["vocab"]]
tokenizer = XLNetTokenizer(vocab=vocab)
result = {"tokens": {}}
for name, (cls_name, extra) in job["models"].items():
    out = f"{job['work']}/{name}"
    config = XLNetConfig(vocab_size=len(tokenizer), d_model=32, n_head=2, d_inner=64, pad_token_id=5, **extra)
    torch.manual_seed(0)
    model = getattr(transformers, cls_name)(config).eval()
    with torch.no_grad():  # a larger spread than the 0.02 init: hidden states far from the layer norms' fixed points
        for p in model.parameters():
            p.mul_(4.0)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    encoder = model if name == "model" else model.transformer
    with torch.no_grad():
        for i, case in enumerate(job["cases"]):
            ids, types, mask = (torch.tensor(case[key]) for key in ("ids", "segments", "mask"))
            output = encoder(input_ids=ids, token_type_ids=types, attention_mask=mask)
            np.save(f"{out}/hidden-{i}.npy", output.last_hidden_state.numpy())
            if name == "classify" and i < len(job["cases"]) - 1:  # summary_type "last": the last position
                np.save(f"{out}/pooled-{i}.npy", model.sequence_summary(output.last_hidden_state).numpy())
        stream = job["two_stream"]
        output = encoder(input_ids=torch.tensor(stream["ids"]), token_type_ids=torch.tensor(stream["segments"]),
                         perm_mask=torch.tensor(stream["perm_mask"], dtype=torch.float32),
                         target_mapping=torch.tensor(stream["target_mapping"], dtype=torch.float32))
        np.save(f"{out}/query-stream.npy", output.last_hidden_state.numpy())
    reloaded = AutoTokenizer.from_pretrained(out)
    result["tokens"][name] = [reloaded(s).input_ids for s in job["sentences"]]
    result["class"] = type(reloaded).__name__
    result["padding_side"] = reloaded.padding_side
if job["spiece"]:  # a folder with spiece.model alone: transformers reads the SentencePiece model itself
    from pathlib import Path
    spiece = XLNetTokenizer.from_pretrained(str(Path(job["spiece"]).parent))
    result["spiece_tokens"] = [spiece(s).input_ids for s in job["sentences"]]
print(json.dumps(result))
"""


def reference_cases(vocabulary: int) -> tuple[list[dict], list[dict]]:
    """transformers' inputs and ptmkit's: the three shapes alike (segments 0, then 1, ``<cls>``'s
    2 last), and the padded batch left-padded for transformers, right-padded for ptmkit."""
    rng = np.random.default_rng(0)
    theirs, ours = [], []
    for batch, length in SHAPES:
        ids = rng.integers(9, vocabulary, (batch, length))
        segments = (np.arange(length)[None, :] >= length // 2).repeat(batch, 0).astype("int64")
        segments[:, -1] = 2
        case = {"ids": ids, "segments": segments, "mask": np.ones_like(ids)}
        theirs.append(case)
        ours.append(case)
    width = max(PADDED_LENGTHS)
    left = {key: np.zeros((len(PADDED_LENGTHS), width), "int64") for key in ("ids", "segments", "mask")}
    right = {key: np.zeros((len(PADDED_LENGTHS), width), "int64") for key in ("ids", "segments", "mask")}
    left["ids"][:], right["ids"][:] = 5, 5  # <pad>
    for row, length in enumerate(PADDED_LENGTHS):
        real = rng.integers(9, vocabulary, length)
        left["ids"][row, width - length :], right["ids"][row, :length] = real, real
        left["mask"][row, width - length :], right["mask"][row, :length] = 1, 1
        left["segments"][row, :], right["segments"][row, :] = 3, 3  # transformers' pad segment
        left["segments"][row, width - length :], right["segments"][row, :length] = 0, 0
    theirs.append(left)
    ours.append(right)
    return [{k: v.tolist() for k, v in c.items()} for c in theirs], [
        {k: np.asarray(v, "int32") for k, v in c.items()} for c in ours
    ]


def two_stream_case(vocabulary: int) -> dict[str, np.ndarray]:
    """A permutation LM's inputs (:func:`ptmkit.objectives.plm.permutation_batch`) on packed rows."""
    from ptmkit.api import SpecialTokens
    from ptmkit.testing import PermutationLMConfig, attention_masks, permutation_batch

    rng = np.random.default_rng(1)
    ids = rng.integers(9, vocabulary, (3, 24)).astype("int32")
    ids[:, -2:] = (4, 3)  # <sep> <cls>
    segments = np.zeros_like(ids)
    segments[:, -1] = 2
    batch = {"token_ids": ids, "segment_ids": segments, "padding_mask": np.ones_like(ids)}
    inputs, _, _ = permutation_batch(
        batch, rng, PermutationLMConfig(partial_prediction=4.0), SpecialTokens(cls=3, sep=4, pad=5)
    )
    content, query = attention_masks(inputs["permutation_rank"])
    return {**batch, **inputs, "content_attention_mask": content, "query_attention_mask": query}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, list[dict], dict]:
    """Two random-init XLNet checkpoints saved by transformers (``model``, ``lm``), transformers'
    outputs on them, ptmkit's trained tokenizer (``work/tokenizer.json``), ptmkit's inputs and the
    two-stream case."""
    from ptmkit_xlnet.tokenizer import train_xlnet_unigram

    work = tmp_path_factory.mktemp("xlnet-hf")
    corpus = write_tiny_corpus(work / "corpus.txt", lines=200)
    texts = corpus.read_text(encoding="utf-8").splitlines() + SENTENCES  # every character of the sentences is a piece
    tokenizer = train_xlnet_unigram(texts, 600)
    tokenizer.save(str(work / "tokenizer.json"))
    vocabulary = tokenizer.get_vocab_size()
    theirs, ours = reference_cases(vocabulary)
    stream = two_stream_case(vocabulary)
    job = {
        "work": str(work),
        "tokenizer": str(work / "tokenizer.json"),
        "cases": theirs,
        "two_stream": {
            "ids": stream["token_ids"].tolist(),
            "segments": stream["segment_ids"].tolist(),
            "perm_mask": (1 - stream["query_attention_mask"]).tolist(),  # transformers: 1 = may not attend
            "target_mapping": stream["target_mapping"].tolist(),
        },
        "sentences": SENTENCES,
        "models": MODELS,
        "spiece": (spiece := _train_sentencepiece(work, texts)) and str(spiece),
    }
    return work, hf_reference(REFERENCE_SCRIPT, job), ours, stream


@pytest.mark.parametrize("name", ["model", "lm", "classify"])
def test_imported_xlnet_matches_transformers(checkpoints: tuple, tmp_path: Path, name: str) -> None:
    from ptmkit.api import RunDir, get_registry
    from ptmkit.testing import load_backbone, main

    work, reference, ours, stream = checkpoints
    assert main(["import-hf", str(work / name), "--out", str(tmp_path / "run")]) == 0
    backbone, config, tokenizer, _ = load_backbone(get_registry(), RunDir(tmp_path / "run"))
    extra = MODELS[name][1]
    assert (config.model.num_layers, config.model.hidden_dim, config.model.clamp_len) == (
        extra["n_layer"],
        32,
        extra.get("clamp_len", -1),
    )
    for i, case in enumerate(ours):
        out = backbone({"token_ids": case["ids"], "segment_ids": case["segments"], "padding_mask": case["mask"]})
        real = case["mask"].astype(bool)
        theirs = np.load(work / name / f"hidden-{i}.npy")
        their_real = np.flip(real, axis=1) if i == len(SHAPES) else real  # the padded batch: left-padded there
        ours_states = np.asarray(out["sequence_output"])[real]
        assert np.max(np.abs(ours_states - theirs[their_real])) < 1e-4, (name, case["ids"].shape)
        assert np.std(theirs[their_real]) > 0.5  # not a degenerate reference
        if name == "classify" and i < len(SHAPES):  # the ported sequence summary on the last token
            pooled = np.load(work / name / f"pooled-{i}.npy")
            assert np.max(np.abs(np.asarray(out["pooled_output"]) - pooled)) < 1e-4
    # the query stream under a permutation's masks (the plm objective's path)
    inputs = {key: stream[key] for key in ("token_ids", "segment_ids", "padding_mask")}
    query = backbone.query_stream_output(
        inputs, stream["content_attention_mask"], stream["query_attention_mask"], stream["target_mapping"]
    )
    assert np.max(np.abs(np.asarray(query) - np.load(work / name / "query-stream.npy"))) < 1e-4
    assert reference["class"] == "XLNetTokenizer" and reference["padding_side"] == "left"
    assert [e.ids for e in tokenizer.encode_batch(SENTENCES)] == reference["tokens"][name]
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["family"] == "xlnet"
    assert manifest["imported_from"]["weights"]["sequence_summary"] is (name == "classify")


def test_ptmkits_trained_tokenizer_is_transformers_xlnet_tokenizer(checkpoints: tuple) -> None:
    """The same pieces and scores tokenize alike in ptmkit's layout and in transformers' own
    ``XLNetTokenizer`` (its normaliser, pre-tokeniser and template with the specials at the end):
    case kept, accents stripped, whitespace runs, tabs, newlines, scripts without spaces."""
    from tokenizers import Tokenizer

    work, reference, _, _ = checkpoints
    ours = Tokenizer.from_file(str(work / "tokenizer.json"))
    assert [e.ids for e in ours.encode_batch(SENTENCES)] == reference["tokens"]["model"]
    assert sum(len(ids) for ids in reference["tokens"]["model"]) > 300
    assert all(ids[-2:] == [4, 3] for ids in reference["tokens"]["model"])  # <sep> <cls> last


def _train_sentencepiece(work: Path, texts: list[str]) -> Path | None:
    """``work/spiece/spiece.model``: a SentencePiece unigram model with XLNet's specials (``<unk>`` 0,
    ``<s>`` 1, ``</s>`` 2, control symbols ``<cls>`` ``<sep>`` ``<pad>`` ``<mask>`` ``<eod>``
    ``<eop>``), as Google's XLNet trained its own; None when sentencepiece is not installed."""
    if importlib.util.find_spec("sentencepiece") is None:
        return None
    import sentencepiece

    (work / "spiece").mkdir()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter([t for t in texts if "\n" not in t and t.strip()]),
        model_prefix=str(work / "spiece" / "spiece"),
        vocab_size=200,
        model_type="unigram",
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        control_symbols=["<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>"],
        character_coverage=1.0,
        minloglevel=2,
    )
    return work / "spiece" / "spiece.model"


def test_a_spiece_model_alone_tokenizes_as_transformers(checkpoints: tuple, tmp_path: Path) -> None:
    """Google's XLNet checkpoints ship ``spiece.model`` alone: read with sentencepiece, its pieces,
    scores and normalisation table give transformers' ids (specials at the end)."""
    from ptmkit_xlnet.hf import load_tokenizer, read_xlnet_config

    work, reference, _, _ = checkpoints
    if not (work / "spiece" / "spiece.model").is_file():
        pytest.skip("the test extra installs sentencepiece (through transformers' tokenizers)")
    directory = tmp_path / "ckpt"
    shutil.copytree(work / "model", directory)
    (directory / "tokenizer.json").unlink()
    shutil.copy(work / "spiece" / "spiece.model", directory / "spiece.model")
    tokenizer, source = load_tokenizer(directory, read_xlnet_config(directory)[0])
    assert source is None
    assert [e.ids for e in tokenizer.encode_batch(SENTENCES)] == reference["spiece_tokens"]
    assert all(ids[-2:] == [4, 3] for ids in reference["spiece_tokens"])  # <sep> <cls> last
    assert sum(len(ids) for ids in reference["spiece_tokens"]) > 300


@pytest.mark.parametrize(
    ("breaker", "needles"),
    [
        (
            lambda d: edit_hf_config(d, d_inner=48),
            ["model.safetensors", "'layer.0.ff.layer_1.weight'", "[64, 32]", "[48, 32]"],
        ),
        (lambda d: edit_hf_config(d, n_layer=4), ["model.safetensors", "missing tensor 'layer.2."]),
        (lambda d: edit_hf_config(d, n_head=3), ["config.json", "'n_head' = 3 does not divide 'd_model' = 32"]),
        (
            lambda d: edit_hf_config(d, ff_activation="silu"),
            ["config.json", "'ff_activation' = 'silu'", "supported: gelu"],
        ),
        (lambda d: edit_hf_config(d, attn_type="uni"), ["config.json", "'attn_type' = 'uni'"]),
        (
            lambda d: (d / "model.safetensors").write_bytes(b"\x00" * 10),
            ["model.safetensors", "not a readable safetensors file"],
        ),
        (lambda d: (d / "tokenizer.json").unlink(), ["no tokenizer.json nor spiece.model"]),
    ],
    ids=["inner size", "layers", "heads", "activation", "unidirectional", "truncated weights", "no tokenizer"],
)
def test_bad_checkpoints_are_refused_in_one_line(checkpoints: tuple, tmp_path: Path, capsys, breaker, needles: list[str]) -> None:
    line = import_hf_refusal(checkpoints[0] / "model", breaker, tmp_path, capsys)
    assert all(needle in line for needle in needles), line
