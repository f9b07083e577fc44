"""``ptmkit import-hf`` of a Marian checkpoint against transformers: a small random-init
``MarianMTModel`` (SentencePiece vocabulary trained here, GELU, scaled embeddings, a random
``final_logits_bias``) saved with ``save_pretrained`` gives the same decoder logits (1e-4, three
shapes, one of them a padded batch), the same source token ids as ``MarianTokenizer`` and the same
greedy translations as ``model.generate(num_beams=1, do_sample=False)``. transformers runs in a
subprocess: torch crashes when it is imported after TensorFlow, which the suite has loaded."""

from __future__ import annotations

from pathlib import Path

import pytest
from inplugins import in_tree_plugins  # noqa: F401 - the fixture
from seq2seq_parity import assert_decoder_logits_match
from transformer_pairs import short_pairs

from ptmkit.testing import edit_hf_config, hf_reference, import_hf_refusal

pytestmark = pytest.mark.usefixtures("in_tree_plugins")

#: ``(batch, source length, target length)``; the second batch is padded (rows of other lengths).
SHAPES = [(1, 5, 4), (3, 9, 7), (2, 17, 11)]
SOURCES = ["Good morning.", "The cat sleeps on the sofa.", "I am  hungry!", "Where is the station?", "Thank you very much", "über café"]

#: Trains a SentencePiece model on the job's texts, makes the checkpoint (random init, seed 0) and
#: writes transformers' logits, token ids and greedy translations. Job on stdin, as JSON.
REFERENCE_SCRIPT = """
import io, json, sys
import numpy as np
import sentencepiece as spm
import torch
from transformers import MarianConfig, MarianMTModel, MarianTokenizer
job = json.load(sys.stdin)
out, work = job["checkpoint"], job["work"]
spm.SentencePieceTrainer.train(sentence_iterator=iter(job["texts"]), model_prefix=f"{work}/spm", vocab_size=90, model_type="unigram",
                               eos_id=0, unk_id=1, bos_id=-1, pad_id=-1, character_coverage=1.0, hard_vocab_limit=False)
pieces = [line.split("\\t")[0] for line in open(f"{work}/spm.vocab", encoding="utf-8")]
vocab = {piece: i for i, piece in enumerate(pieces)} | {"<pad>": len(pieces)}
json.dump(vocab, open(f"{work}/vocab.json", "w", encoding="utf-8"), ensure_ascii=False)
tokenizer = MarianTokenizer(source_spm=f"{work}/spm.model", target_spm=f"{work}/spm.model", vocab=f"{work}/vocab.json")
pad = vocab["<pad>"]
config = MarianConfig(vocab_size=len(vocab), d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                      encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=pad, decoder_start_token_id=pad,
                      eos_token_id=0, forced_eos_token_id=None, scale_embedding=True, activation_function="gelu")
torch.manual_seed(0)
model = MarianMTModel(config).eval()
with torch.no_grad():  # a larger spread than the 0.02 init (not the fixed sinusoids: they are not saved), a bias that is not zeros
    for name, p in model.named_parameters():
        if "embed_positions" not in name:
            p.mul_(4.0)
    model.final_logits_bias.copy_(torch.randn(model.final_logits_bias.shape))
model.save_pretrained(out)
tokenizer.save_pretrained(out)
rng = np.random.default_rng(0)
result = {"inputs": [], "tokens": [], "translations": [], "pad": pad}
with torch.no_grad():
    for batch, source, target in job["shapes"]:
        ids, dec = rng.integers(2, pad, (batch, source)), rng.integers(2, pad, (batch, target))
        dec[:, 0] = pad
        mask, dec_mask = np.ones_like(ids), np.ones_like(dec)
        for row in range(1, batch):  # later rows shorter: a padded batch
            mask[row, source - 2 * row:], dec_mask[row, target - 2 * row:] = 0, 0
        ids[mask == 0], dec[dec_mask == 0] = pad, pad
        result["inputs"].append([ids.tolist(), mask.tolist(), dec.tolist(), dec_mask.tolist()])
        logits = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), decoder_input_ids=torch.tensor(dec),
                       decoder_attention_mask=torch.tensor(dec_mask)).logits
        np.save(f"{out}/logits-{batch}x{source}x{target}.npy", logits.numpy())
    for sentence in job["sources"]:
        ids = tokenizer(sentence, return_tensors="pt").input_ids
        result["tokens"].append(ids[0].tolist())
        new = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=20, num_beams=1, do_sample=False)[0, 1:].tolist()
        result["translations"].append(new[: new.index(0)] if 0 in new else new)
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A random-init Marian model saved by transformers, and transformers' outputs on it."""
    work = tmp_path_factory.mktemp("marian-hf")
    texts = [text for pair in short_pairs() for text in pair] * 5 + SOURCES
    job = {"checkpoint": str(work / "ckpt"), "work": str(work), "texts": texts, "shapes": SHAPES, "sources": SOURCES}
    return work / "ckpt", hf_reference(REFERENCE_SCRIPT, job)


def test_imported_marian_matches_transformers(checkpoint: tuple[Path, dict], tmp_path: Path) -> None:
    from ptmkit.testing import main
    from ptmkit_transformer.translate import Translator

    directory, reference = checkpoint
    assert main(["import-hf", str(directory), "--out", str(tmp_path / "run")]) == 0
    translator = Translator(tmp_path / "run")
    assert (translator.config.sinusoid_layout, translator.config.activation, translator.config.decoder_start_token) == ("halves", "gelu", "<pad>")
    assert translator.bos == translator.pad == reference["pad"]
    assert_decoder_logits_match(translator.backbone, directory, SHAPES, reference["inputs"])
    assert [[*e.ids, translator.eos] for e in translator.tokenizer.encode_batch(SOURCES, add_special_tokens=False)] == reference["tokens"]
    assert translator.translate_ids(SOURCES, max_length=20) == reference["translations"]
    assert sum(len(t) for t in reference["translations"]) > 30  # not all empty


def _drop_a_piece(directory: Path) -> None:
    """Remove one SentencePiece piece from ``vocab.json`` (ids renumbered 0 .. n-1)."""
    import json

    path = directory / "vocab.json"
    pieces = sorted((vocab := json.loads(path.read_text(encoding="utf-8"))), key=vocab.__getitem__)
    pieces.remove(pieces[5])
    path.write_text(json.dumps({piece: i for i, piece in enumerate(pieces)}), encoding="utf-8")


@pytest.mark.parametrize(
    ("breaker", "needles"),
    [
        (lambda d: edit_hf_config(d, activation_function="gelu_new"), ["config.json", "'activation_function' = 'gelu_new'"]),
        (lambda d: edit_hf_config(d, tie_word_embeddings=False), ["config.json", "'tie_word_embeddings' is false"]),
        (lambda d: edit_hf_config(d, decoder_ffn_dim=128), ["config.json", "'decoder_ffn_dim' = 128", "'encoder_ffn_dim' = 64"]),
        (lambda d: edit_hf_config(d, d_model=64), ["model.safetensors", "'model.shared.weight'", "32]", "64]"]),
        (lambda d: edit_hf_config(d, eos_token_id=2), ["config.json", "'eos_token_id' = 2", "</s>"]),
        (lambda d: (d / "source.spm").unlink(), ["no tokenizer.json, nor vocab.json and source.spm"]),
        (_drop_a_piece, ["source.spm", "(1 in all) is not in vocab.json"]),
    ],
    ids=["gelu_new", "untied", "two ffn sizes", "wrong d_model", "eos not </s>", "no tokenizer", "piece not in vocab.json"],
)
def test_bad_checkpoints_are_refused_in_one_line(checkpoint: tuple[Path, dict], tmp_path: Path, capsys, breaker, needles: list[str]) -> None:
    line = import_hf_refusal(checkpoint[0], breaker, tmp_path, capsys)
    assert all(needle in line for needle in needles), line


def test_a_tokenizer_json_is_read_as_it_is(checkpoint: tuple[Path, dict], tmp_path: Path) -> None:
    """A checkpoint that ships ``tokenizer.json`` (no SentencePiece files) imports with it, copied."""
    import json
    import shutil

    from ptmkit.testing import main
    from ptmkit_transformer.hf import marian_tokenizer

    directory = tmp_path / "ckpt"
    shutil.copytree(checkpoint[0], directory)
    marian_tokenizer(directory / "vocab.json", directory / "source.spm").save(str(directory / "tokenizer.json"))
    for name in ("source.spm", "target.spm", "vocab.json"):
        (directory / name).unlink()
    assert main(["import-hf", str(directory), "--out", str(tmp_path / "run")]) == 0
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["imported_from"]["tokenizer"].endswith("tokenizer.json")
    from ptmkit.api import RunDir

    tokenizer = RunDir(tmp_path / "run").load_tokenizer()
    assert [[*e.ids, tokenizer.token_to_id("</s>")] for e in tokenizer.encode_batch(SOURCES, add_special_tokens=False)] == checkpoint[1]["tokens"]
