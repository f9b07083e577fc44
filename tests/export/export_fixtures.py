"""Helpers for the lean runtime's tests: a real tiny exported classifier, built without ptmkit.

Named uniquely (not ``conftest``) so ``from export_fixtures import ...`` cannot pick up another
directory's conftest. :func:`make_export`, behind conftest.py's session fixture ``tiny_export``,
builds a 2-layer keras-hub ``BertBackbone`` + ``Dense(3)`` classifier, exports it with
``keras.Model.export(format="onnx")``, trains a small WordPiece tokenizer, writes a
``manifest.json`` like ptmkit's exporter does and quantizes an int8 variant (~7 s in all).

Importing this module puts ``export/`` on ``sys.path`` when ``ptmkit-export`` is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
EXPORT_SRC = REPO / "export"
# Harmless once ``ptmkit-export`` is installed (editable or not): only used when it is not.
if importlib.util.find_spec("ptmkit_export") is None:
    sys.path.insert(0, str(EXPORT_SRC))

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

INPUTS = [
    {"name": "token_ids", "dtype": "int32", "encoding": "ids"},
    {"name": "segment_ids", "dtype": "int32", "encoding": "type_ids"},
    {"name": "padding_mask", "dtype": "int32", "encoding": "attention_mask"},
]
LABELS = ["neg", "neu", "pos"]
MAX_SEQUENCE_LENGTH = 64
VOCABULARY_SIZE = 200
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

#: Texts the tests run: short, long (truncated at 64 tokens), unknown words, punctuation.
TEXTS = [
    "simplistic , silly and tedious .",
    "a gorgeous , witty , seductive movie .",
    "ok",
    "the film is long " * 30,
    "zzzz qqqq xylophone ?!",
    "it's so laddish and juvenile , only teenage boys could possibly find it funny .",
    "",
]


def corpus_lines() -> list[str]:
    """Training text for the tokenizer: the repo's polarity sample, else generated sentences."""
    path = REPO / "data" / "classify" / "polarity-200.txt"
    if path.is_file():
        text = path.read_text(encoding="utf-8", errors="replace")  # the sample holds a few cp1252 bytes
        lines = [line.split(" ", 1)[-1].strip() for line in text.splitlines()]
        lines = [line for line in lines if line]
        if len(lines) >= 50:
            return lines
    rng = np.random.default_rng(0)
    subjects = ["the film", "this movie", "the plot", "the acting", "the director", "the ending", "it"]
    verbs = ["is", "feels", "seems", "was", "becomes"]
    adjectives = ["funny", "tedious", "silly", "gorgeous", "witty", "long", "boring", "moving", "smart"]
    return [
        f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(adjectives)} and {rng.choice(adjectives)} ."
        for _ in range(300)
    ]


def train_tokenizer(lines: list[str], path: Path) -> Any:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=VOCABULARY_SIZE, special_tokens=SPECIALS, show_progress=False)
    tokenizer.train_from_iterator(lines, trainer=trainer)
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    assert tokenizer.get_vocab_size() <= VOCABULARY_SIZE
    assert tokenizer.token_to_id("[PAD]") == 0
    tokenizer.save(str(path))
    return tokenizer


def build_classifier() -> Any:
    import keras
    import keras_hub

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=VOCABULARY_SIZE,
        num_layers=2,
        num_heads=2,
        hidden_dim=32,
        intermediate_dim=64,
        max_sequence_length=MAX_SEQUENCE_LENGTH,
    )
    inputs = {spec["name"]: keras.Input(shape=(None,), dtype="int32", name=spec["name"]) for spec in INPUTS}
    pooled = backbone(inputs)["pooled_output"]
    logits = keras.layers.Dense(len(LABELS), name="logits")(pooled)
    return keras.Model(inputs, logits)


@dataclass
class TinyExport:
    """The session's export directory and what built it."""

    directory: Path
    model: Any  # the keras.Model
    output_name: str
    quantize_summary: dict[str, Any]

    def keras_logits(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        return np.asarray(self.model.predict(feeds, verbose=0), dtype=np.float32)


def make_export(directory: Path) -> TinyExport:
    """Build, export, tokenize, quantize and describe the tiny classifier in ``directory``."""
    import onnx
    import tensorflow as tf

    from ptmkit_export.quantize import quantize_int8

    model = build_classifier()
    model.export(
        str(directory / "model.onnx"),
        format="onnx",
        input_signature=[{spec["name"]: tf.TensorSpec((None, None), tf.int32, name=spec["name"]) for spec in INPUTS}],
        verbose=False,
    )
    output_name = onnx.load(str(directory / "model.onnx"), load_external_data=False).graph.output[0].name
    train_tokenizer(corpus_lines(), directory / "tokenizer.json")
    summary = quantize_int8(directory / "model.onnx", directory / "model.int8.onnx")
    manifest = {
        "format": "ptmkit-export/1",
        "family": "bert",
        "task": "classification",
        "inputs": INPUTS,
        "outputs": [{"name": output_name, "dtype": "float32"}],
        "labels": LABELS,
        "max_sequence_length": MAX_SEQUENCE_LENGTH,
        "pad_token_id": 0,
        "tokenizer": "tokenizer.json",
        "variants": {
            "fp32": {"file": "model.onnx"},
            "int8": {"file": "model.int8.onnx", "ok": True, "quantize": summary},
        },
    }
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return TinyExport(directory=directory, model=model, output_name=output_name, quantize_summary=summary)


EMBEDDING_DIM = 8


def make_embedding_export(directory: Path, tokenizer_json: Path) -> Path:
    """A tiny embedding export without TensorFlow: an ONNX graph of mean-pooled, L2-normalised token
    embeddings (``embeddings``: float32 ``(batch, 8)``), ``task: "embedding"``, the given tokenizer."""
    import shutil

    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    table = rng.normal(size=(VOCABULARY_SIZE, EMBEDDING_DIM)).astype(np.float32)
    inputs = [helper.make_tensor_value_info(spec["name"], TensorProto.INT32, ["batch", "sequence"]) for spec in INPUTS]
    nodes = [
        helper.make_node("Gather", ["table", "token_ids"], ["tokens"]),  # (b, L, D)
        helper.make_node("Cast", ["padding_mask"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask", "last"], ["mask3"]),  # (b, L, 1)
        helper.make_node("Mul", ["tokens", "mask3"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "one"], ["summed"], keepdims=0),  # (b, D)
        helper.make_node("ReduceSum", ["mask", "one"], ["count"], keepdims=1),  # (b, 1)
        helper.make_node("Max", ["count", "tiny"], ["safe_count"]),
        helper.make_node("Div", ["summed", "safe_count"], ["mean"]),
        helper.make_node("Cast", ["segment_ids"], ["segments"], to=TensorProto.FLOAT),  # read, so the input is used
        helper.make_node("ReduceSum", ["segments"], ["segment_total"], keepdims=1),
        helper.make_node("Mul", ["segment_total", "zero"], ["no_op"]),
        helper.make_node("Add", ["mean", "no_op"], ["mean2"]),
        helper.make_node("LpNormalization", ["mean2"], ["embeddings"], axis=-1, p=2),
    ]
    initializers = [
        numpy_helper.from_array(table, "table"),
        numpy_helper.from_array(np.array([-1], dtype=np.int64), "last"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "one"),
        numpy_helper.from_array(np.array(1.0, dtype=np.float32), "tiny"),
        numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero"),
    ]
    output = helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["batch", EMBEDDING_DIM])
    graph = helper.make_graph(nodes, "bag-of-embeddings", inputs, [output], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    directory.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(directory / "model.onnx"))
    shutil.copyfile(tokenizer_json, directory / "tokenizer.json")
    manifest = {
        "format": "ptmkit-export/1",
        "family": "bert",
        "task": "embedding",
        "inputs": INPUTS,
        "outputs": [{"name": "embeddings", "dtype": "float32", "shape": ["batch", EMBEDDING_DIM]}],
        "labels": [],
        "max_sequence_length": MAX_SEQUENCE_LENGTH,
        "pad_token_id": 0,
        "tokenizer": "tokenizer.json",
        "pooling": {"mode": "mean", "normalize": True},
        "variants": {"fp32": {"file": "model.onnx"}},
    }
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return directory


def embedding_reference(table_feeds: dict[str, np.ndarray]) -> np.ndarray:
    """What :func:`make_embedding_export`'s graph computes, in NumPy (float64)."""
    table = np.random.default_rng(3).normal(size=(VOCABULARY_SIZE, EMBEDDING_DIM)).astype(np.float32)
    mask = table_feeds["padding_mask"].astype(np.float64)
    summed = (table[table_feeds["token_ids"]] * mask[..., None]).sum(axis=1)
    mean = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1.0)
    return mean / np.linalg.norm(mean, axis=1, keepdims=True)
