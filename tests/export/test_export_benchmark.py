"""Latency helpers."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from export_fixtures import INPUTS, MAX_SEQUENCE_LENGTH, VOCABULARY_SIZE, TinyExport

from ptmkit_export import Predictor
from ptmkit_export.benchmark import make_feeds, median_latency_ms
from ptmkit_export.manifest import read_manifest


def test_make_feeds() -> None:
    manifest = {"inputs": INPUTS, "max_sequence_length": MAX_SEQUENCE_LENGTH}
    feeds = make_feeds(manifest, batch=2, length=5, vocab_high=50, seed=1)
    assert list(feeds) == ["token_ids", "segment_ids", "padding_mask"]
    assert all(array.shape == (2, 5) and array.dtype == np.int32 for array in feeds.values())
    assert (feeds["padding_mask"] == 1).all() and (feeds["segment_ids"] == 0).all()
    assert 0 <= feeds["token_ids"].min() and feeds["token_ids"].max() < 50
    np.testing.assert_array_equal(make_feeds(manifest, 2, 5, 50, seed=1)["token_ids"], feeds["token_ids"])
    with pytest.raises(ValueError, match="max_sequence_length"):
        make_feeds(manifest, batch=1, length=MAX_SEQUENCE_LENGTH + 1)
    with pytest.raises(ValueError, match=">= 1"):
        make_feeds(manifest, batch=0, length=4)


def test_median_latency(tiny_export: TinyExport) -> None:
    manifest = read_manifest(tiny_export.directory)
    feeds = make_feeds(manifest, batch=1, length=MAX_SEQUENCE_LENGTH, vocab_high=VOCABULARY_SIZE)
    results = {}
    for variant in ("fp32", "int8"):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        path = tiny_export.directory / manifest["variants"][variant]["file"]
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        results[variant] = median_latency_ms(session, feeds, warmup=5, repeats=50)
        assert 0 < results[variant] < 1000
    print(f"latency 1x{MAX_SEQUENCE_LENGTH}, 1 thread: fp32 {results['fp32']:.3f} ms, int8 {results['int8']:.3f} ms")
    predictor = Predictor(tiny_export.directory, threads=1)
    assert median_latency_ms(predictor.logits, ["a gorgeous movie ."], warmup=1, repeats=3) > 0
    calls = []
    assert median_latency_ms(calls.append, "x", warmup=2, repeats=3) >= 0
    assert calls == ["x"] * 5
    with pytest.raises(ValueError, match="repeats"):
        median_latency_ms(calls.append, "x", repeats=0)
    with pytest.raises(TypeError, match="InferenceSession or a callable"):
        median_latency_ms(42, feeds)
