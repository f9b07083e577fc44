"""Read and validate the ``manifest.json`` of an export directory.

An export directory holds ``manifest.json``, the tokenizer file it names (``tokenizer.json``), or for
a bag-of-rows model (fastText's classifier) the vocabulary its ``featurizer`` object names
(:mod:`ptmkit_export.bag_of_rows`), and one ONNX file per variant: ``model.onnx`` for ``fp32``, optionally ``model.opt.onnx`` for ``optimized``
(``ptmkit export --optimize N``), ``model.int8.onnx`` for ``int8`` and ``model.fp16.onnx`` for ``fp16``.
Each variant other than fp32 carries the export's gate: ``ok`` (bool), ``problems`` (list of str: why
it is not ok), its agreement with fp32 on the dev set (``dev_agreement_with_fp32`` for a classifier,
``dev_mean_cosine_to_fp32`` for embeddings), ``latency_ms_b1x128``,
``throughput_seq_per_s_b32x128`` and fp32's figures measured alternately with it
(``fp32_paired_*``); ``optimized`` has ``optimization`` (passes and fused op counts) and ``int8`` has
``quantization`` (mode, per-channel, reduce-range and why, excluded nodes). The manifest's ``gate``
holds the table ``ptmkit export`` prints.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from ptmkit_export.decoding import DECODER_KEYS, GENERATION_TASK
from ptmkit_export.errors import ExportDirError

MANIFEST_NAME = "manifest.json"
#: ``task`` of an encoder-decoder export (:mod:`ptmkit_export.translation`).
TRANSLATION_TASK = "translation"
FORMAT = "ptmkit-export/1"

#: Keys every manifest must have, with the JSON type each must hold.
REQUIRED_KEYS: dict[str, type | tuple[type, ...]] = {
    "format": str,
    "inputs": list,
    "outputs": list,
    "labels": list,
    "max_sequence_length": int,
    "pad_token_id": int,
    "tokenizer": str,
    "variants": dict,
}

#: Keys a manifest with a ``featurizer`` (bag-of-rows inputs ``row_ids``/``row_mask``) has instead of
#: the tokenizer's ``tokenizer``, ``max_sequence_length`` and ``pad_token_id``.
FEATURIZER_KEYS: dict[str, type | tuple[type, ...]] = {
    key: kind for key, kind in REQUIRED_KEYS.items() if key not in ("tokenizer", "max_sequence_length", "pad_token_id")
} | {"featurizer": dict}

#: ``task`` of an export whose output is sentence ``embeddings`` (no labels).
EMBEDDING_TASK = "embedding"
#: ``task`` of an export of static word vectors (``ptmkit export WORD_VECTOR_RUN``): output
#: ``vectors``, the mean of the rows of a text's words (one word: its vector), no labels.
WORD_VECTORS_TASK = "word-vectors"
#: The first output of each task without labels.
EMBEDDER_OUTPUTS = {EMBEDDING_TASK: "embeddings", WORD_VECTORS_TASK: "vectors"}

#: ``encoding`` values an input may name: the fields :mod:`ptmkit_export.fields` derives from a
#: ``tokenizers.Encoding`` (``char_ids`` needs the fixed size of its last axis in ``shape``).
ENCODINGS = ("ids", "type_ids", "attention_mask", "char_ids")

#: ``activation`` values of a classifier's manifest (optional; ``softmax`` when absent): how its
#: logits become probabilities (:func:`ptmkit_export.predictor.probabilities`).
ACTIVATIONS = ("softmax", "sigmoid")
INPUT_DTYPES = ("int32", "int64")
#: ``encoding`` and ``dtype`` of the inputs a ``featurizer`` makes (:func:`ptmkit_export.bag_of_rows.BagOfRows.encode`).
FEATURIZER_INPUTS = {"row_ids": "int32", "row_mask": "float32"}


def _fail(path: Path, problem: str) -> ExportDirError:
    return ExportDirError(f"{path}: {problem}")


def export_file(export_dir: str | os.PathLike[str], name: str, key: str) -> Path:
    """``export_dir / name``, for a file the manifest names under ``key``.

    Raises:
        ExportDirError: ``name`` is absolute or climbs out of the directory (``..``): an export
            only reads its own files.
    """
    if Path(name).is_absolute() or ".." in Path(name).parts:
        raise _fail(Path(export_dir) / MANIFEST_NAME, f"'{key}' must name a file inside the export directory, got {name!r}")
    return Path(export_dir) / name


def _validate(manifest: Any, path: Path) -> None:
    if not isinstance(manifest, dict):
        raise _fail(path, f"expected a JSON object, got {type(manifest).__name__}")
    featurized = "featurizer" in manifest
    required = FEATURIZER_KEYS if featurized else REQUIRED_KEYS
    missing = [key for key in required if key not in manifest]
    if missing:
        raise _fail(path, f"missing key(s) {', '.join(missing)}")
    for key, kind in required.items():
        value = manifest[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise _fail(path, f"key {key!r} must be {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
    if manifest["format"] != FORMAT:
        raise _fail(path, f"unsupported format {manifest['format']!r} (this runtime reads {FORMAT!r})")
    if not manifest["inputs"]:
        raise _fail(path, "'inputs' is empty")
    for i, spec in enumerate(manifest["inputs"]):
        if not isinstance(spec, dict) or not {"name", "dtype", "encoding"} <= spec.keys():
            raise _fail(path, f"inputs[{i}] must be an object with name, dtype and encoding")
        if featurized:
            if FEATURIZER_INPUTS.get(spec["encoding"]) != spec["dtype"]:
                expected = ", ".join(f"{name} ({dtype})" for name, dtype in FEATURIZER_INPUTS.items())
                raise _fail(path, f"inputs[{i}] has encoding {spec['encoding']!r} and dtype {spec['dtype']!r}; a featurizer's inputs are {expected}")
            continue
        if spec["encoding"] not in ENCODINGS:
            raise _fail(path, f"inputs[{i}] has encoding {spec['encoding']!r}; expected one of {', '.join(ENCODINGS)}")
        if spec["dtype"] not in INPUT_DTYPES:
            raise _fail(path, f"inputs[{i}] has dtype {spec['dtype']!r}; expected one of {', '.join(INPUT_DTYPES)}")
        if spec["encoding"] == "char_ids" and not (isinstance(spec.get("shape"), list) and isinstance(spec["shape"][-1], int) and spec["shape"][-1] > 0):
            raise _fail(path, f"inputs[{i}] is char_ids; its shape must end with the fixed number of characters")
    if not manifest["outputs"] or not all(isinstance(o, dict) and "name" in o for o in manifest["outputs"]):
        raise _fail(path, "'outputs' must be a non-empty list of objects with a name")
    if manifest.get("task") in EMBEDDER_OUTPUTS:
        output = EMBEDDER_OUTPUTS[manifest["task"]]
        if manifest["outputs"][0]["name"] != output:
            raise _fail(path, f"a {manifest['task']} export's first output must be named {output!r}")
    elif manifest.get("task") in (GENERATION_TASK, TRANSLATION_TASK):
        task = manifest["task"]
        if manifest["outputs"][0]["name"] != "logits":
            raise _fail(path, f"a {task} export's first output must be named 'logits'")
        decoder = manifest.get("decoder")
        bad = [key for key, kind in DECODER_KEYS.items() if not isinstance(decoder, dict) or not isinstance(decoder.get(key), kind)]
        if bad:
            raise _fail(path, f"a {task} export needs a 'decoder' object with {', '.join(f'{k} ({DECODER_KEYS[k].__name__})' for k in bad)}")
        if below := [key for key, least in (("layers", 1), ("heads", 1), ("head_dim", 1), ("bos_token_id", 0), ("eos_token_id", 0)) if decoder[key] < least]:
            raise _fail(path, f"'decoder.{below[0]}' must be >= {0 if below[0].endswith('_id') else 1}, got {decoder[below[0]]}")
        if task == TRANSLATION_TASK and not all(isinstance(v, dict) and isinstance(v.get("encoder"), str) for v in manifest["variants"].values()):
            raise _fail(path, "every variant of a translation export needs an 'encoder' file name")
    elif not manifest["labels"] or not all(isinstance(label, str) for label in manifest["labels"]):
        raise _fail(path, "'labels' must be a non-empty list of strings")
    if manifest.get("activation", "softmax") not in ACTIVATIONS:
        raise _fail(path, f"'activation' must be one of {', '.join(map(repr, ACTIVATIONS))}, got {manifest['activation']!r}")
    if featurized:
        from ptmkit_export.bag_of_rows import validate_spec

        validate_spec(manifest["featurizer"], str(path))
    elif manifest["max_sequence_length"] < 1:
        raise _fail(path, "'max_sequence_length' must be >= 1")
    if "fp32" not in manifest["variants"]:
        raise _fail(path, "'variants' has no 'fp32' entry")
    for name, variant in manifest["variants"].items():
        if not isinstance(variant, dict) or not isinstance(variant.get("file"), str):
            raise _fail(path, f"variants[{name!r}] must be an object with a 'file' string")


def read_manifest(export_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Read ``export_dir/manifest.json``, check it, and check the files it names exist.

    Args:
        export_dir: the export directory written by ptmkit's exporter.

    Returns:
        The manifest as a dict (the parsed JSON, unchanged). Keys guaranteed present: ``format``
        (``"ptmkit-export/1"``), ``inputs`` (list of ``{name, dtype, encoding}``), ``outputs``
        (list of ``{name, ...}``), ``labels`` (list of str, one per logit column) and ``variants``
        (``{"fp32": {"file": ...}, ...}``); then either ``max_sequence_length`` (int, in tokens),
        ``pad_token_id`` (int) and ``tokenizer`` (file name), or ``featurizer`` (a bag-of-rows
        object: ``kind``, ``vocabulary`` file, ``lowercase``, ``minn``, ``maxn``, ``bucket``,
        ``word_ngrams``; inputs ``row_ids`` int32 and ``row_mask`` float32). Optional:
        ``activation``, ``softmax`` (the default) or ``sigmoid`` (independent labels).

    Raises:
        ExportDirError: a run directory instead of an export (naming its export when it has one);
            the directory, ``manifest.json``, the tokenizer (or featurizer vocabulary)
            file or the ``fp32`` model file is missing; the manifest is not valid JSON, lacks a key or holds a value of the
            wrong type. Other variants' files are checked only when a variant is chosen (see
            :class:`ptmkit_export.Predictor`), so a failed int8 build does not break fp32 use.
    """
    root = Path(export_dir)
    if not root.is_dir():
        raise ExportDirError(f"{root}: export directory not found")
    path = root / MANIFEST_NAME
    if not path.is_file():
        raise _fail(path, "file not found")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise _fail(path, f"invalid JSON ({message})") from None
    if isinstance(manifest, dict) and "stage" in manifest and "variants" not in manifest:
        hint = f"; its export is {root / 'export'}" if (root / "export" / MANIFEST_NAME).is_file() else f" (write one with: ptmkit export {root})"
        raise ExportDirError(f"{root}: a run directory (a {manifest.get('family', '?')} {manifest['stage']} run), not an export{hint}")
    _validate(manifest, path)
    if "featurizer" in manifest:
        vocabulary = export_file(root, manifest["featurizer"]["vocabulary"], "featurizer.vocabulary")
        if not vocabulary.is_file():
            raise _fail(vocabulary, "vocabulary file not found (manifest key 'featurizer.vocabulary')")
    else:
        tokenizer = export_file(root, manifest["tokenizer"], "tokenizer")
        if not tokenizer.is_file():
            raise _fail(tokenizer, "tokenizer file not found")
    model = export_file(root, manifest["variants"]["fp32"]["file"], "variants.fp32.file")
    if not model.is_file():
        raise _fail(model, "model file not found")
    return manifest


def variant_path(export_dir: str | os.PathLike[str], manifest: dict[str, Any], variant: str) -> Path:
    """Path of ``variant``'s ONNX file inside ``export_dir``.

    Raises:
        ExportDirError: the manifest has no such variant, its file is missing, or it names a file
            outside ``export_dir``.
    """
    variants = manifest["variants"]
    if variant not in variants:
        raise ExportDirError(
            f"{Path(export_dir) / MANIFEST_NAME}: no variant {variant!r} (has {', '.join(sorted(variants))})"
        )
    path = export_file(export_dir, variants[variant]["file"], f"variants.{variant}.file")
    if not path.is_file():
        raise _fail(path, f"model file for variant {variant!r} not found")
    return path


#: Model names the server and the Triton repository accept (URL path segments, folder names).
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def default_name(export_dir: str | os.PathLike[str]) -> str:
    """A model name for ``export_dir``: its folder name, or the run's for ``RUN/export``, made URL-safe."""
    path = os.path.abspath(export_dir)
    base = os.path.basename(path)
    if base == "export":
        base = os.path.basename(os.path.dirname(path)) or base
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", base).strip("-.") or "model"
    return name if name[0].isalnum() else f"m{name}"
