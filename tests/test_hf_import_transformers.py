"""``import-hf`` takes what transformers takes: checkpoints that ``AutoTokenizer`` +
``BertModel`` load must import, tokenize to the same ids and embed within 1e-5 of transformers.

The checkpoints are the tiny ones in ``tests/data/hf/`` (README there); the reference is computed
here with transformers on torch (the test extra), mean pooling over the attention mask as
sentence-transformers' default and ``ref_embed.py`` of the shared cases do.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

CASES = Path(__file__).resolve().parent / "data" / "hf"
TEXTS = ["the cat sat on the mat", "hello world", "good film, bad movie! $5", "a man is eating food 中国人", "query: what is this?"]


#: Runs in a fresh process: torch's triton crashes (SIGSEGV) when it is imported after TensorFlow,
#: which the rest of the suite has loaded. Jobs on stdin, results on stdout, as JSON.
REFERENCE_SCRIPT = """
import json, sys
import torch
from transformers import AutoTokenizer, BertModel
results = []
for job in json.load(sys.stdin):
    tokenizer = AutoTokenizer.from_pretrained(job["checkpoint"])
    model = BertModel.from_pretrained(job["checkpoint"], dtype=torch.float32).eval()
    options = {"truncation": True, "max_length": job["max_length"]} if job["max_length"] else {}
    encoded = tokenizer(job["texts"], padding=True, return_tensors="pt", **options)
    with torch.no_grad():
        hidden = model(**encoded).last_hidden_state
    mask = encoded["attention_mask"].unsqueeze(-1).float()
    embeddings = ((hidden * mask).sum(1) / mask.sum(1)).tolist()
    ids = [[i for i, m in zip(row, row_mask) if m] for row, row_mask in zip(encoded["input_ids"].tolist(), encoded["attention_mask"].tolist())]
    results.append({"ids": ids, "embeddings": embeddings, "pad": tokenizer.pad_token_id})
print(json.dumps(results))
"""


LONG = "the cat sat on the mat , hello world . " * 25_000  # 1 MB
Reference = tuple[list[list[int]], np.ndarray, int]


@pytest.fixture(scope="module")
def pad_token_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """padded-vocab with ``pad_token`` set twice: [unused0] in tokenizer_config.json, [unused1] in
    special_tokens_map.json (which wins)."""
    checkpoint = shutil.copytree(CASES / "padded-vocab", tmp_path_factory.mktemp("hf") / "pad-token")
    (checkpoint / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, "pad_token": "[unused0]"}))
    (checkpoint / "special_tokens_map.json").write_text(json.dumps({"pad_token": {"content": "[unused1]", "special": True}}))
    return checkpoint


@pytest.fixture(scope="module")
def references(pad_token_checkpoint: Path) -> dict[str, Reference]:
    """transformers' token ids (without padding), mean-pooled embeddings and pad id for each job
    the module's tests compare with, all computed in one child process (torch and transformers
    import once: 5 s each time)."""
    for module in ("torch", "transformers"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"the test extra installs {module}")
    jobs = {case: (CASES / case, TEXTS, None) for case in ("padded-vocab", "duplicate-vocab", "sentencepiece-specials")}
    jobs |= {f"long-{case}": (CASES / case, [LONG], 64) for case in ("padded-vocab", "sentencepiece-specials")}  # config.json: 64 positions
    jobs |= {"dollar": (CASES / "duplicate-vocab", ["$"], None), "pad-token": (pad_token_checkpoint, TEXTS, None)}
    payload = [{"checkpoint": str(checkpoint), "texts": texts, "max_length": length} for checkpoint, texts, length in jobs.values()]
    result = subprocess.run([sys.executable, "-c", REFERENCE_SCRIPT], input=json.dumps(payload), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    outputs = json.loads(result.stdout.strip().splitlines()[-1])
    return {name: (out["ids"], np.asarray(out["embeddings"], np.float32), int(out["pad"])) for name, out in zip(jobs, outputs, strict=True)}


def ptmkit_embeddings(run: Path, texts: list[str]) -> tuple[list[list[int]], np.ndarray, int]:
    from ptmkit.data.tokenization import encode_texts
    from ptmkit.embedding import embed_texts, load_embedder
    from ptmkit.plugins import get_registry

    model, tokenizer, pooling, manifest = load_embedder(run)
    family = get_registry().family(manifest["family"])
    pad = family.special_tokens(tokenizer).pad
    length = int(pooling["max_sequence_length"])
    vectors = embed_texts(model, tokenizer, texts, length, family.inputs, pad)
    encoded = encode_texts(tokenizer, texts, length, family.inputs, pad)  # what fine-tuning feeds
    ids = [row[mask == 1].tolist() for row, mask in zip(encoded["token_ids"], encoded["padding_mask"], strict=True)]
    return ids, vectors, pad


@pytest.mark.parametrize("case", ["padded-vocab", "duplicate-vocab", "sentencepiece-specials"])
def test_checkpoints_transformers_loads_import_and_embed_as_transformers_does(case: str, references: dict[str, Reference], tmp_path: Path) -> None:
    from ptmkit_bert.hf import import_hf

    checkpoint = CASES / case
    expected_ids, expected, expected_pad = references[case]
    manifest = import_hf(checkpoint, tmp_path / "run")
    ids, vectors, pad = ptmkit_embeddings(tmp_path / "run", TEXTS)
    assert ids == expected_ids
    assert pad == expected_pad == manifest["imported_from"]["special_tokens"]["pad"]
    assert vectors.shape == expected.shape
    assert np.max(np.abs(vectors - expected)) <= 1e-5


def test_a_duplicated_vocabulary_line_keeps_the_id_of_its_last_line(references: dict[str, Reference], tmp_path: Path) -> None:
    """transformers' BertTokenizer maps a token listed twice to its last line (a dict built in
    file order); the row of the first line is never used."""
    from tokenizers import Tokenizer

    from ptmkit_bert.hf import import_hf

    lines = (CASES / "duplicate-vocab" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    first, last = [i for i, line in enumerate(lines) if line == "$"]
    import_hf(CASES / "duplicate-vocab", tmp_path / "run")
    tokenizer = Tokenizer.from_file(str(tmp_path / "run" / "tokenizer.json"))
    assert (first, last) == (50, 60) and tokenizer.token_to_id("$") == last
    assert references["dollar"][0] == [[5, last, 6]]


def test_the_pad_token_of_special_tokens_map_is_used_as_transformers_uses_it(
    references: dict[str, Reference], pad_token_checkpoint: Path, tmp_path: Path
) -> None:
    """special_tokens_map.json overrides tokenizer_config.json and the class default; the run's
    tokenizer.json then declares it in its padding section."""
    from ptmkit_bert.hf import import_hf

    checkpoint = pad_token_checkpoint
    _, expected, expected_pad = references["pad-token"]
    manifest = import_hf(checkpoint, tmp_path / "run")
    _, vectors, pad = ptmkit_embeddings(tmp_path / "run", TEXTS)
    assert pad == expected_pad == 2 == manifest["imported_from"]["special_tokens"]["pad"]
    assert json.loads((tmp_path / "run" / "tokenizer.json").read_text())["padding"]["pad_id"] == 2
    assert np.max(np.abs(vectors - expected)) <= 1e-5


def test_ptmkit_embed_prints_transformers_embeddings(references: dict[str, Reference], tmp_path: Path) -> None:
    """The same through the command line (in this process: :func:`ptmkit.testing.run_cli`):
    import-hf, then embed --output."""
    from ptmkit.testing import run_cli

    checkpoint = CASES / "sentencepiece-specials"
    expected = references["sentencepiece-specials"][1][:2]
    run, out = tmp_path / "run", tmp_path / "e.npy"
    assert run_cli(["import-hf", str(checkpoint), "--out", str(run)]) == 0
    assert run_cli(["embed", str(run), "--text", TEXTS[0], "--text", TEXTS[1], "--output", str(out)]) == 0
    assert np.max(np.abs(np.load(out) - expected)) <= 1e-5


@pytest.mark.parametrize("case", ["padded-vocab", "sentencepiece-specials"])
def test_a_long_text_embeds_as_transformers_truncates_it(case: str, references: dict[str, Reference], tmp_path: Path) -> None:
    """A 1 MB text is cut to a prefix before tokenizing (memory bounded by the model's input):
    the embedding is transformers' of the text truncated to max_sequence_length tokens."""
    from ptmkit_bert.hf import import_hf

    checkpoint = CASES / case
    expected_ids, expected, _ = references[f"long-{case}"]
    import_hf(checkpoint, tmp_path / "run")
    ids, vectors, _ = ptmkit_embeddings(tmp_path / "run", [LONG])
    assert len(expected_ids[0]) == 64 and ids == expected_ids
    assert np.max(np.abs(vectors - expected)) <= 1e-5
