"""``ptmkit import-hf`` of a BART checkpoint against transformers: a small random-init
``BartForConditionalGeneration`` (a byte-level BPE tokenizer trained here, learned positions with
BART's offset of 2, ``layernorm_embedding``, GELU, a random ``final_logits_bias``) saved with
``save_pretrained`` gives the same decoder logits (1e-4, three shapes, one a padded batch), the
same source token ids as ``BartTokenizerFast`` (``<s> source </s>``) and the same greedy
translations as ``model.generate(num_beams=1, do_sample=False)``; its ONNX export gives the
Keras translator's outputs. transformers runs in a subprocess (torch after TensorFlow crashes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from inplugins import in_tree_plugins  # noqa: F401 - the fixture
from seq2seq_parity import assert_decoder_logits_match
from transformer_pairs import short_pairs

from ptmkit.testing import edit_hf_config, hf_reference, import_hf_refusal

pytestmark = pytest.mark.usefixtures("in_tree_plugins")

SHAPES = [(1, 5, 4), (3, 9, 7), (2, 17, 11)]
SOURCES = ["Good morning.", "The cat sleeps on the sofa.", "I am  hungry!", "Where is the station?", "Thank you very much", "über café"]

REFERENCE_SCRIPT = """
import json, sys
import numpy as np
import torch
from tokenizers import ByteLevelBPETokenizer
from transformers import BartConfig, BartForConditionalGeneration, BartTokenizerFast
job = json.load(sys.stdin)
out, work = job["checkpoint"], job["work"]
bpe = ByteLevelBPETokenizer()
bpe.train_from_iterator(job["texts"], vocab_size=400, min_frequency=1, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"], show_progress=False)
tokenizer = BartTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>", mask_token="<mask>")
vocab = len(tokenizer)
config = BartConfig(vocab_size=vocab, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                    encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                    decoder_start_token_id=2, forced_eos_token_id=None)
torch.manual_seed(0)
model = BartForConditionalGeneration(config).eval()
with torch.no_grad():  # a larger spread than the 0.02 init, and a bias that is not zeros
    for name, p in model.named_parameters():
        if "layernorm" not in name and "layer_norm" not in name:
            p.mul_(4.0)
    model.final_logits_bias.copy_(torch.randn(model.final_logits_bias.shape))
model.save_pretrained(out)
tokenizer.save_pretrained(out)
rng = np.random.default_rng(0)
result = {"inputs": [], "tokens": [], "translations": []}
with torch.no_grad():
    for batch, source, target in job["shapes"]:
        ids, dec = rng.integers(5, vocab, (batch, source)), rng.integers(5, vocab, (batch, target))
        dec[:, 0] = 2
        mask, dec_mask = np.ones_like(ids), np.ones_like(dec)
        for row in range(1, batch):
            mask[row, source - 2 * row:], dec_mask[row, target - 2 * row:] = 0, 0
        ids[mask == 0], dec[dec_mask == 0] = 1, 1
        result["inputs"].append([ids.tolist(), mask.tolist(), dec.tolist(), dec_mask.tolist()])
        logits = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), decoder_input_ids=torch.tensor(dec),
                       decoder_attention_mask=torch.tensor(dec_mask)).logits
        np.save(f"{out}/logits-{batch}x{source}x{target}.npy", logits.numpy())
    for sentence in job["sources"]:
        ids = tokenizer(sentence, return_tensors="pt").input_ids
        result["tokens"].append(ids[0].tolist())
        new = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=20, num_beams=1, do_sample=False)[0, 1:].tolist()
        result["translations"].append(new[: new.index(2)] if 2 in new else new)
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A random-init BART model saved by transformers, and transformers' outputs on it."""
    work = tmp_path_factory.mktemp("bart-hf")
    texts = [text for pair in short_pairs() for text in pair] * 5 + SOURCES
    job = {"checkpoint": str(work / "ckpt"), "work": str(work), "texts": texts, "shapes": SHAPES, "sources": SOURCES}
    return work / "ckpt", hf_reference(REFERENCE_SCRIPT, job)


@pytest.fixture(scope="module")
def run(checkpoint: tuple[Path, dict], tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ptmkit.testing import main

    out = tmp_path_factory.mktemp("bart-run") / "run"
    assert main(["import-hf", str(checkpoint[0]), "--out", str(out)]) == 0
    return out


def test_imported_bart_matches_transformers(checkpoint: tuple[Path, dict], run: Path) -> None:
    from ptmkit_transformer.translate import Translator

    directory, reference = checkpoint
    translator = Translator(run)
    config = translator.config
    assert (config.positions, config.embedding_layer_norm, config.activation, config.scale_embeddings) == ("learned", True, "gelu", False)
    assert (config.decoder_start_token, config.source_start_token, translator.bos, translator.source_prefix) == ("</s>", "<s>", 2, (0,))
    assert_decoder_logits_match(translator.backbone, directory, SHAPES, reference["inputs"])
    source_ids, source_mask = translator.source_ids(SOURCES)
    assert [row[m.astype(bool)].tolist() for row, m in zip(source_ids, source_mask, strict=True)] == reference["tokens"]  # <s> source </s>
    assert translator.translate_ids(SOURCES, max_length=20) == reference["translations"]
    assert sum(len(t) for t in reference["translations"]) > 30


def test_imported_bart_exports_to_onnx_with_its_source_start_token(run: Path, tmp_path: Path) -> None:
    """The export's manifest carries ``source_prefix_ids``; the lean runtime reads sources as BART
    does and translates as the Keras translator does (greedy and 3 beams)."""
    import json

    from ptmkit.testing import main
    from ptmkit_export.translation import Translator as OnnxTranslator
    from ptmkit_transformer.translate import Translator

    assert main(["export", str(run), "--out", str(tmp_path / "export")]) == 0
    assert json.loads((tmp_path / "export" / "manifest.json").read_text())["source_prefix_ids"] == [0]
    onnx, keras_side = OnnxTranslator(tmp_path / "export"), Translator(run)
    assert onnx.source_ids(SOURCES)[0].tolist() == keras_side.source_ids(SOURCES)[0].tolist()
    for beams in (1, 3):
        assert onnx.translate_ids(SOURCES, num_beams=beams, max_length=12) == keras_side.translate_ids(SOURCES, num_beams=beams, max_length=12)


def test_forced_tokens_are_named_in_a_warning(checkpoint: tuple[Path, dict], tmp_path: Path) -> None:
    """bart-large-cnn's generation config forces ``<s>`` first; ptmkit's search does not, which the
    import says, naming the file and key."""
    import json
    import shutil

    from ptmkit_transformer.hf import warn_forced_tokens

    directory = tmp_path / "ckpt"
    shutil.copytree(checkpoint[0], directory)
    (directory / "generation_config.json").write_text(json.dumps({"forced_bos_token_id": 0, "forced_eos_token_id": None}))
    with pytest.warns(UserWarning, match=r"generation_config.json: key 'forced_bos_token_id' = 0 is not applied: ptmkit's search forces no token"):
        found = warn_forced_tokens(directory, json.loads((directory / "config.json").read_text()))
    assert len(found) == 1  # the checkpoint's config.json forces nothing (forced_eos_token_id None)


@pytest.mark.parametrize(
    ("breaker", "needles"),
    [
        (lambda d: edit_hf_config(d, bos_token_id=999), ["config.json", "'bos_token_id' must be a token id below"]),
        (lambda d: edit_hf_config(d, max_position_embeddings=32), ["model.safetensors", "'model.encoder.embed_positions.weight'", "34", "66"]),
        (lambda d: (d / "tokenizer.json").unlink(), ["no tokenizer.json", "BART: save it with its fast tokenizer"]),
    ],
    ids=["bos out of range", "positions of another size", "no tokenizer.json"],
)
def test_bad_bart_checkpoints_are_refused_in_one_line(checkpoint: tuple[Path, dict], tmp_path: Path, capsys, breaker, needles: list[str]) -> None:
    line = import_hf_refusal(checkpoint[0], breaker, tmp_path, capsys)
    assert all(needle in line for needle in needles), line


def test_sources_are_packed_after_the_start_token_and_cut_to_fit() -> None:
    from ptmkit_export.translation import pack_sources

    ids, mask = pack_sources([[7, 8, 9], list(range(10, 30))], eos=2, pad=1, limit=8, prefix=(0,))
    assert ids.tolist() == [[0, 7, 8, 9, 2, 1, 1, 1], [0, 10, 11, 12, 13, 14, 15, 2]]  # <s> source </s>, the long one cut to 8
    assert mask.tolist() == [[1, 1, 1, 1, 1, 0, 0, 0], [1] * 8]


def test_an_imported_bart_fine_tunes_with_init_keeping_its_layout(run: Path, pairs_file: Path, tmp_path: Path) -> None:
    """``ptmkit train transformer --parallel PAIRS --init BART_RUN`` keeps BART's architecture and
    source start token (from the run's [model] config) and starts from its weights."""
    import json

    from ptmkit.testing import main
    from ptmkit_transformer.translate import Translator

    out = tmp_path / "tuned"
    sets = ["model.max_steps=2", "model.checkpoint_every=2", "model.batch_size=4", "model.dev_sentences=0", "model.warmup_steps=2"]
    assert main(["train", "transformer", "--parallel", str(pairs_file), "--init", str(run), "--out", str(out), *(a for s in sets for a in ("--set", s))]) == 0
    assert json.loads((out / "manifest.json").read_text())["init"] == str(run.resolve())
    tuned = Translator(out)
    assert (tuned.config.positions, tuned.config.embedding_layer_norm, tuned.source_prefix, tuned.bos) == ("learned", True, (0,), 2)
    assert len(tuned.translate_ids(SOURCES[:2], max_length=5)) == 2
