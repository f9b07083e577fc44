"""Predictor and manifest: real logits against Keras, probabilities, variants, broken directories."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from export_fixtures import LABELS, MAX_SEQUENCE_LENGTH, TEXTS, TinyExport

from ptmkit_export import Prediction, Predictor
from ptmkit_export.errors import ExportDirError
from ptmkit_export.manifest import read_manifest
from ptmkit_export.predictor import softmax


@pytest.fixture(scope="module")
def fp32(tiny_export: TinyExport) -> Predictor:
    return Predictor(tiny_export.directory, variant="fp32", threads=1)


@pytest.fixture(scope="module")
def int8(tiny_export: TinyExport) -> Predictor:
    return Predictor(tiny_export.directory, variant="int8", threads=1)


def test_encode_pads_truncates_and_uses_manifest_dtypes(fp32: Predictor) -> None:
    feeds = fp32.encode(TEXTS)
    assert list(feeds) == ["token_ids", "segment_ids", "padding_mask"]
    ids, segments, mask = feeds["token_ids"], feeds["segment_ids"], feeds["padding_mask"]
    # The long text is cut at 64 tokens, so the batch is padded to exactly 64.
    assert ids.shape == segments.shape == mask.shape == (len(TEXTS), MAX_SEQUENCE_LENGTH)
    assert ids.dtype == segments.dtype == mask.dtype == np.int32
    cls_id, sep_id = fp32.tokenizer.token_to_id("[CLS]"), fp32.tokenizer.token_to_id("[SEP]")
    lengths = mask.sum(axis=1)
    for row, length in zip(ids, lengths, strict=True):
        assert row[0] == cls_id and row[length - 1] == sep_id  # [SEP] kept after truncation
        assert (row[length:] == 0).all()  # pad_token_id
    assert lengths[3] == MAX_SEQUENCE_LENGTH and lengths[-1] == 2  # long text; "" -> [CLS] [SEP]
    assert (segments == 0).all()
    assert set(np.unique(mask)) <= {0, 1}
    # Without the long text the batch is only as long as its longest row.
    short = fp32.encode(["ok", "a gorgeous movie ."])
    assert short["token_ids"].shape[1] == short["padding_mask"].sum(axis=1).max() < MAX_SEQUENCE_LENGTH


def test_fp32_logits_equal_keras(tiny_export: TinyExport, fp32: Predictor) -> None:
    feeds = fp32.encode(TEXTS)
    expected = tiny_export.keras_logits(feeds)
    got = fp32.logits(TEXTS)
    assert got.shape == (len(TEXTS), len(LABELS)) and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)
    assert np.abs(expected).max() > 0.01  # a real, non-degenerate signal


def test_chunking_does_not_change_logits(fp32: Predictor) -> None:
    texts = TEXTS * 5  # 35 texts: two chunks at the default batch_size of 32
    whole = fp32.logits(texts)
    small = Predictor(fp32.export_dir, variant="fp32", threads=1)
    small.batch_size = 3
    np.testing.assert_allclose(small.logits(texts), whole, atol=1e-5, rtol=0)
    np.testing.assert_allclose(whole[: len(TEXTS)], whole[len(TEXTS) : 2 * len(TEXTS)], atol=1e-6)


def test_predict_probabilities(fp32: Predictor) -> None:
    predictions = fp32.predict(TEXTS)
    logits = fp32.logits(TEXTS)
    assert len(predictions) == len(TEXTS)
    for prediction, row in zip(predictions, logits, strict=True):
        assert isinstance(prediction, Prediction)
        assert list(prediction.probabilities) == LABELS
        assert sum(prediction.probabilities.values()) == pytest.approx(1.0, abs=1e-9)
        assert prediction.label == LABELS[int(np.argmax(row))]
        assert all(0.0 <= p <= 1.0 for p in prediction.probabilities.values())
        assert json.loads(json.dumps(prediction.to_dict())) == {
            "label": prediction.label,
            "probabilities": prediction.probabilities,
        }
    expected = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    got = np.array([[p.probabilities[label] for label in LABELS] for p in predictions])
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_softmax_is_stable() -> None:
    probabilities = softmax(np.array([[1000.0, 1000.0, -1000.0], [-5e4, 0.0, 5e4]], dtype=np.float32))
    assert np.isfinite(probabilities).all()
    np.testing.assert_allclose(probabilities, [[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]], atol=1e-12)


def test_int8_logits_close_to_fp32(fp32: Predictor, int8: Predictor) -> None:
    texts = TEXTS * 3
    reference, quantized = fp32.logits(texts), int8.logits(texts)
    cosine = float((reference * quantized).sum() / np.linalg.norm(reference) / np.linalg.norm(quantized))
    agreement = float((reference.argmax(1) == quantized.argmax(1)).mean())
    max_error = float(np.abs(reference - quantized).max())
    print(f"int8 vs fp32: cosine={cosine:.6f} argmax agreement={agreement:.3f} max |diff|={max_error:.5f}")
    assert cosine > 0.999
    assert max_error < 0.05 * float(np.abs(reference).max())
    assert agreement >= 0.9
    assert not np.array_equal(reference, quantized)  # it really is a different (quantized) model


def test_default_variant_follows_manifest(tiny_export: TinyExport, tmp_path: Path) -> None:
    assert Predictor(tiny_export.directory).variant == "int8"
    directory = copy_export(tiny_export, tmp_path)
    edit_manifest(directory, lambda m: m["variants"]["int8"].update(ok=False))
    predictor = Predictor(directory)
    assert predictor.variant == "fp32"
    assert predictor.labels == LABELS and predictor.manifest["family"] == "bert"
    edit_manifest(directory, lambda m: m["variants"].pop("int8"))
    assert Predictor(directory).variant == "fp32"
    with pytest.raises(ExportDirError, match="no variant 'int8'"):
        Predictor(directory, variant="int8")


def test_bad_texts(fp32: Predictor) -> None:
    for method in (fp32.encode, fp32.logits, fp32.predict):
        with pytest.raises(ValueError, match="texts is empty"):
            method([])
        with pytest.raises(TypeError, match="single str"):
            method("a text")
        with pytest.raises(TypeError, match=r"texts\[1\] is int"):
            method(["ok", 3])


# --- broken export directories --------------------------------------------------------------------


def copy_export(tiny_export: TinyExport, tmp_path: Path) -> Path:
    directory = tmp_path / "export"
    shutil.copytree(tiny_export.directory, directory)
    return directory


def edit_manifest(directory: Path, edit) -> None:
    path = directory / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("remove", "named"),
    [
        ("manifest.json", "manifest.json"),
        ("tokenizer.json", "tokenizer.json"),
        ("model.onnx", "model.onnx"),
    ],
)
def test_missing_file_is_named(tiny_export: TinyExport, tmp_path: Path, remove: str, named: str) -> None:
    directory = copy_export(tiny_export, tmp_path)
    (directory / remove).unlink()
    with pytest.raises(ExportDirError, match=named) as caught:
        Predictor(directory, variant="fp32")
    assert "\n" not in str(caught.value)
    with pytest.raises(ExportDirError, match=named):
        read_manifest(directory)


def test_missing_int8_file_is_named(tiny_export: TinyExport, tmp_path: Path) -> None:
    directory = copy_export(tiny_export, tmp_path)
    (directory / "model.int8.onnx").unlink()
    read_manifest(directory)  # fp32 is still usable
    assert Predictor(directory, variant="fp32").variant == "fp32"
    with pytest.raises(ExportDirError, match=r"model\.int8\.onnx"):
        Predictor(directory)  # the manifest says int8 is ok, so it is the default


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(ExportDirError, match="export directory not found"):
        Predictor(tmp_path / "nope")


def test_invalid_manifest(tiny_export: TinyExport, tmp_path: Path) -> None:
    directory = copy_export(tiny_export, tmp_path)
    (directory / "manifest.json").write_text('{"format": "ptmkit-export/1",')
    with pytest.raises(ExportDirError, match=r"manifest\.json: invalid JSON") as caught:
        read_manifest(directory)
    assert "\n" not in str(caught.value)

    (directory / "manifest.json").write_text("[]")
    with pytest.raises(ExportDirError, match="expected a JSON object"):
        read_manifest(directory)

    run = tmp_path / "run"  # a run directory (its manifest has a stage), with and without its export
    run.mkdir()
    (run / "manifest.json").write_text('{"format": "ptmkit-run/1", "family": "bert", "stage": "finetune"}')
    with pytest.raises(ExportDirError, match=rf"^{run}: a run directory \(a bert finetune run\), not an export \(write one with: ptmkit export {run}\)$"):
        read_manifest(run)
    shutil.copytree(directory, run / "export")
    with pytest.raises(ExportDirError, match=rf"not an export; its export is {run / 'export'}$"):
        read_manifest(run)

    shutil.copy(tiny_export.directory / "manifest.json", directory / "manifest.json")
    edit_manifest(directory, lambda m: m.pop("labels"))
    with pytest.raises(ExportDirError, match=r"manifest\.json: missing key\(s\) labels"):
        read_manifest(directory)

    for key, name in [("tokenizer", "/etc/passwd"), ("variants.fp32.file", "../export/model.onnx")]:  # an export reads its own files only
        shutil.copy(tiny_export.directory / "manifest.json", directory / "manifest.json")
        edit_manifest(directory, lambda m, key=key, name=name: m.update(tokenizer=name) if key == "tokenizer" else m["variants"]["fp32"].update(file=name))
        with pytest.raises(ExportDirError, match=rf"manifest\.json: '{key}' must name a file inside the export directory, got '{name}'"):
            read_manifest(directory)

    shutil.copy(tiny_export.directory / "manifest.json", directory / "manifest.json")
    edit_manifest(directory, lambda m: m.update(max_sequence_length="64"))
    with pytest.raises(ExportDirError, match="'max_sequence_length' must be int"):
        read_manifest(directory)

    decoder = {"layers": 2, "heads": 2, "head_dim": 8, "bos_token_id": 1, "eos_token_id": -1, "prepend_bos": True}
    shutil.copy(tiny_export.directory / "manifest.json", directory / "manifest.json")  # a generation export whose end token cannot exist
    edit_manifest(directory, lambda m: m.update(task="generation", outputs=[{"name": "logits"}], decoder=decoder))
    with pytest.raises(ExportDirError, match=r"manifest\.json: 'decoder\.eos_token_id' must be >= 0, got -1$"):
        read_manifest(directory)

    shutil.copy(tiny_export.directory / "manifest.json", directory / "manifest.json")
    edit_manifest(directory, lambda m: m["inputs"][0].update(encoding="offsets"))
    with pytest.raises(ExportDirError, match="encoding 'offsets'"):
        read_manifest(directory)


def test_manifest_disagreeing_with_model(tiny_export: TinyExport, tmp_path: Path) -> None:
    directory = copy_export(tiny_export, tmp_path)
    edit_manifest(directory, lambda m: m["outputs"][0].update(name="scores"))
    with pytest.raises(ExportDirError, match=r"model\.onnx: model has no output 'scores'"):
        Predictor(directory, variant="fp32")
    shutil.copy(tiny_export.directory / "manifest.json", directory / "manifest.json")
    edit_manifest(directory, lambda m: m.update(labels=["a", "b"]))
    with pytest.raises(ExportDirError, match="3 columns but the manifest lists 2 labels"):
        Predictor(directory, variant="fp32")
    shutil.copy(tiny_export.directory / "manifest.json", directory / "manifest.json")
    (directory / "tokenizer.json").write_text("not a tokenizer")
    with pytest.raises(ExportDirError, match=r"tokenizer\.json: cannot load tokenizer"):
        Predictor(directory, variant="fp32")


# --- execution providers --------------------------------------------------------------------------


def test_cuda_falls_back_to_cpu_with_a_warning(tiny_export: TinyExport, fp32: Predictor) -> None:
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("onnxruntime-gpu is installed: no fallback to check")
    with pytest.warns(RuntimeWarning, match=r"device='cuda' but this onnxruntime .* has no CUDAExecutionProvider .*running on CPU"):
        predictor = Predictor(tiny_export.directory, variant="fp32", threads=1, device="cuda")
    assert predictor.session.get_providers() == ["CPUExecutionProvider"]
    np.testing.assert_array_equal(predictor.logits(TEXTS), fp32.logits(TEXTS))
    assert Predictor(tiny_export.directory, variant="fp32", device="cpu").session.get_providers() == ["CPUExecutionProvider"]
    with pytest.raises(ValueError, match="device must be one of cpu, cuda, got 'tpu'"):
        Predictor(tiny_export.directory, device="tpu")
    with pytest.raises(ValueError, match="not both"):
        Predictor(tiny_export.directory, device="cpu", providers=["CPUExecutionProvider"])


@pytest.mark.filterwarnings("ignore:Specified provider:UserWarning")  # ONNX Runtime's own, on this CPU build
def test_cuda_providers_when_onnxruntime_gpu_is_there(tiny_export: TinyExport, monkeypatch: pytest.MonkeyPatch) -> None:
    """With onnxruntime-gpu, "cuda" asks for TensorRT (when built in), CUDA, then CPU for the rest."""
    import onnxruntime as ort

    from ptmkit_export.predictor import device_providers

    everything = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    monkeypatch.setattr(ort, "get_available_providers", lambda: everything)
    assert device_providers("cuda") == everything
    monkeypatch.setattr(ort, "get_available_providers", lambda: everything[1:])
    assert device_providers("cuda") == everything[1:]
    assert device_providers("cpu") == ["CPUExecutionProvider"]
    if "CUDAExecutionProvider" not in ort.capi._pybind_state.get_available_providers():
        # onnxruntime-gpu without a usable GPU: ONNX Runtime falls back quietly, the Predictor says so.
        with pytest.warns(RuntimeWarning, match="CUDAExecutionProvider could not be used"):
            predictor = Predictor(tiny_export.directory, device="cuda")
        assert predictor.session.get_providers() == ["CPUExecutionProvider"]
        assert predictor.variant == "fp32"  # the manifest's int8 is CPU-only: CUDA defaults to fp32


LONG_TEXTS = {
    "words": "the film is long and witty , " * 20_000,
    "one word": "x" * 50_000 + " and then some words" * 2_000,
    "cjk": "東京大学の映画は長い" * 30_000,
    "spaces": " " * 60_000 + "a gorgeous movie " * 1_000,
    "punctuation": "?!" * 100_000,
}


@pytest.mark.parametrize("kind", list(LONG_TEXTS))
def test_a_long_text_is_cut_before_tokenizing_to_the_same_model_input(fp32: Predictor, kind: str) -> None:
    """Tokenizing a whole 26 MB line before truncating it took 4 GB; the prefix the predictor
    tokenizes instead must give exactly the tokens truncation keeps."""
    from tokenizers import Tokenizer

    text = LONG_TEXTS[kind]
    clipped = fp32.clip([text])[0]
    assert text.startswith(clipped)
    if kind not in ("spaces", "one word"):  # 60,000 spaces or one 50,000-letter word: one token at most
        assert len(clipped) <= MAX_SEQUENCE_LENGTH * 16 * 4
    assert len(clipped) < len(text)
    reference = Tokenizer.from_file(str(fp32.export_dir / "tokenizer.json"))
    reference.enable_truncation(max_length=MAX_SEQUENCE_LENGTH)
    expected = reference.encode(text)
    encoded = fp32.encode([text])
    assert encoded["token_ids"][0].tolist() == expected.ids and len(expected.ids) == MAX_SEQUENCE_LENGTH
    assert encoded["segment_ids"][0].tolist() == expected.type_ids
    assert encoded["padding_mask"][0].tolist() == expected.attention_mask


def test_short_texts_are_not_cut(fp32: Predictor) -> None:
    assert fp32.clip(TEXTS) == TEXTS
