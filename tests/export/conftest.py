"""Session fixture for the lean runtime's tests; the helpers live in export_fixtures.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from export_fixtures import TinyExport, make_embedding_export, make_export


@pytest.fixture(scope="session")
def tiny_export(tmp_path_factory: pytest.TempPathFactory) -> TinyExport:
    """A real export directory: fp32 + int8 ONNX, tokenizer.json and manifest.json (~10 s)."""
    return make_export(tmp_path_factory.mktemp("tiny-export"))


@pytest.fixture(scope="session")
def tiny_embedding_export(tmp_path_factory: pytest.TempPathFactory, tiny_export: TinyExport) -> Path:
    """An embedding export (bag of embeddings, mean-pooled, L2-normalised) with tiny_export's tokenizer."""
    return make_embedding_export(tmp_path_factory.mktemp("tiny-embedding") / "export", tiny_export.directory / "tokenizer.json")
