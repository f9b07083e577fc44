"""``ptmkit import-hf`` of a GPT-2 checkpoint against transformers: a small random-init
``GPT2LMHeadModel`` saved with ``save_pretrained`` gives the same logits (1e-4, three shapes),
the same greedy 20-token continuations (10 prompts) and the same token ids (50 sentences,
non-ASCII among them). transformers runs in a subprocess: torch crashes when it is imported after
TensorFlow, which the suite has loaded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from inplugins import in_tree_plugins  # noqa: F401 - the fixture

from ptmkit.testing import TOKENIZER_SENTENCES as SENTENCES
from ptmkit.testing import edit_hf_config, hf_reference, import_hf_refusal, write_tiny_corpus

pytestmark = pytest.mark.usefixtures("in_tree_plugins")

SHAPES = [(1, 5), (2, 17), (3, 48)]
PROMPTS = ["the cat", "a dog saw", "Hello", "x", "the old sailor painted a red house", "café 中国人", "1990", "ß", "every student wrote", "  spaces"]
assert len(PROMPTS) == 10

#: Makes the checkpoint (random init, seed 0) from a byte-level BPE tokenizer.json and writes
#: transformers' logits, greedy continuations and token ids. Job on stdin, as JSON.
REFERENCE_SCRIPT = """
import json, sys
import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast
job = json.load(sys.stdin)
out = job["checkpoint"]
tokenizer = GPT2TokenizerFast(tokenizer_file=job["tokenizer"], bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>")
eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")
config = GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=2, n_head=2, bos_token_id=eot, eos_token_id=eot)
torch.manual_seed(0)
model = GPT2LMHeadModel(config).eval()
with torch.no_grad():  # a larger spread than the 0.02 init, so that logits and argmaxes are not near-ties
    for p in model.parameters():
        p.mul_(4.0)
model.save_pretrained(out)
tokenizer.save_pretrained(out)
tokenizer.backend_tokenizer.model.save(out)  # vocab.json + merges.txt, as GPT-2's own checkpoints ship them
rng = np.random.default_rng(0)
result = {"logits": [], "ids": [], "continuations": [], "eot": eot}
with torch.no_grad():
    for batch, length in job["shapes"]:
        ids = rng.integers(0, len(tokenizer), (batch, length))
        result["ids"].append(ids.tolist())
        np.save(f"{out}/logits-{batch}x{length}.npy", model(torch.tensor(ids)).logits.numpy())
    for prompt in job["prompts"]:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        new = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=20, do_sample=False, pad_token_id=eot)[0, ids.shape[1]:].tolist()
        result["continuations"].append(new[: new.index(eot)] if eot in new else new)
result["tokens"] = [tokenizer(s).input_ids for s in job["sentences"]]
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A random-init GPT-2 saved by transformers, and transformers' outputs on it."""
    from tokenizers import processors

    from ptmkit_gpt.tokenizer import train_byte_level_bpe

    work = tmp_path_factory.mktemp("gpt2-hf")
    corpus = write_tiny_corpus(work / "corpus.txt", lines=200)
    texts = corpus.read_text(encoding="utf-8").splitlines() + SENTENCES  # its bytes and some merges of them
    tokenizer = train_byte_level_bpe(texts, 500, 1)
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)  # GPT-2's: no specials around a text
    tokenizer.save(str(work / "tokenizer.json"))
    job = {"checkpoint": str(work / "ckpt"), "tokenizer": str(work / "tokenizer.json"), "shapes": SHAPES, "prompts": PROMPTS, "sentences": SENTENCES}
    return work / "ckpt", hf_reference(REFERENCE_SCRIPT, job)


def test_imported_gpt2_matches_transformers(checkpoint: tuple[Path, dict], tmp_path: Path) -> None:
    from ptmkit.testing import main
    from ptmkit_export.generation import GenerationSettings
    from ptmkit_gpt.generate import TextGenerator

    directory, reference = checkpoint
    assert main(["import-hf", str(directory), "--out", str(tmp_path / "run")]) == 0
    generator = TextGenerator(tmp_path / "run")
    backbone = generator.backbone
    for (batch, length), ids in zip(SHAPES, reference["ids"], strict=True):
        ids = np.asarray(ids, "int32")
        ours = np.asarray(backbone.logits(backbone({"token_ids": ids, "padding_mask": np.ones_like(ids)})["sequence_output"]))
        theirs = np.load(directory / f"logits-{batch}x{length}.npy")
        assert np.max(np.abs(ours - theirs)) < 1e-4, (batch, length)
    assert [e.ids for e in generator.tokenizer.encode_batch(SENTENCES, add_special_tokens=True)] == reference["tokens"]
    prompts = generator.prompt_ids(PROMPTS)
    assert prompts == [e.ids for e in generator.tokenizer.encode_batch(PROMPTS)]  # no <|endoftext|> before an imported GPT-2's prompts
    from ptmkit_export.generation import generate_ids

    settings = GenerationSettings(max_new_tokens=20)
    batched = generate_ids(generator.next_logits, prompts, settings, generator.specials.padding_id, generator.specials.eos, generator.max_length)
    assert batched == reference["continuations"]  # transformers ran them one by one
    assert sum(len(c) for c in batched) > 100  # most run the full 20 tokens


@pytest.mark.parametrize(
    ("breaker", "needles"),
    [
        (lambda d: edit_hf_config(d, n_embd=64), ["model.safetensors", "'transformer.wte.weight'", "[500, 32]", "[500, 64]"]),
        (lambda d: edit_hf_config(d, tie_word_embeddings=False), ["model.safetensors", "tie_word_embeddings is false", "no 'lm_head.weight'"]),
        (lambda d: edit_hf_config(d, activation_function="relu"), ["config.json", "'activation_function' = 'relu'"]),
        (lambda d: (d / "tokenizer.json").unlink() or (d / "vocab.json").unlink(), ["no tokenizer.json, nor vocab.json and merges.txt"]),
    ],
    ids=["wrong n_embd", "untied without lm_head", "relu", "no tokenizer"],
)
def test_bad_checkpoints_are_refused_in_one_line(checkpoint: tuple[Path, dict], tmp_path: Path, capsys, breaker, needles: list[str]) -> None:
    line = import_hf_refusal(checkpoint[0], breaker, tmp_path, capsys)
    assert all(needle in line for needle in needles), line


def test_vocab_and_merges_give_the_tokenizer_json_ids(checkpoint: tuple[Path, dict], tmp_path: Path) -> None:
    import shutil

    from ptmkit_gpt.hf import load_tokenizer, read_gpt2_config

    directory = tmp_path / "ckpt"
    shutil.copytree(checkpoint[0], directory)
    (directory / "tokenizer.json").unlink()
    tokenizer, source = load_tokenizer(directory, read_gpt2_config(directory)[0])
    assert source is None
    assert [e.ids for e in tokenizer.encode_batch(SENTENCES)] == checkpoint[1]["tokens"]
