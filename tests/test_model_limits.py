"""Export respects the model's declared limits (:meth:`ptmkit.contract.ModelFamily.limits`).

``tests/data/hf-short-positions`` is a BERT checkpoint with 16 position embeddings. Its import
used to export with a crash: the parity check fed 17 tokens. Trace, parity and timing shapes now
stay within the declared ``max_sequence_length``, and the exported model agrees with Keras on a
text longer than the model can read (both truncate it to 16 tokens).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ptmkit.exporting import parity_shapes

CASE = Path(__file__).resolve().parent / "data" / "hf-short-positions"


def test_parity_shapes_stay_within_the_limit() -> None:
    assert parity_shapes(128, 512) == [(1, 17), (3, 128), (8, 1)]
    assert parity_shapes(16, 16) == [(1, 16), (3, 16), (8, 1)]
    assert parity_shapes(64, None) == [(1, 17), (3, 64), (8, 1)]


@pytest.fixture(scope="module")
def short_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ptmkit_bert.hf import import_hf

    out = tmp_path_factory.mktemp("short") / "run"
    import_hf(CASE, out)
    return out


def test_export_of_a_16_position_checkpoint_stays_within_16_tokens(short_run: Path) -> None:
    from ptmkit.embedding import embed_texts, load_embedder
    from ptmkit.exporting import export_run
    from ptmkit.plugins import get_registry
    from ptmkit_export import Predictor

    manifest = export_run(short_run)
    assert manifest["max_sequence_length"] == 16
    assert set(manifest["variants"]["fp32"]["parity_max_abs_diff"]) == {"1x16", "3x16", "8x1"}
    assert max(manifest["variants"]["fp32"]["parity_max_abs_diff"].values()) < 1e-4
    assert manifest["gate"]["shapes"]["latency"] == "1x16"

    long_text = (CASE / "long.txt").read_text(encoding="utf-8").strip()
    texts = [long_text, "the cat sat", "hello world"]
    predictor = Predictor(manifest["directory"])
    feeds = predictor.encode(texts)
    assert feeds["token_ids"].shape == (3, 16)  # 40 words, cut to the model's 16 positions
    onnx_vectors = predictor.embed(texts)
    model, tokenizer, pooling, run_manifest = load_embedder(short_run)
    family = get_registry().family(run_manifest["family"])
    keras_vectors = embed_texts(model, tokenizer, texts, pooling["max_sequence_length"], family.inputs, 0)
    np.testing.assert_allclose(onnx_vectors, keras_vectors, atol=1e-5)
