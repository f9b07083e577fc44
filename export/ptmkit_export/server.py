"""Serve an export directory over HTTP: the Open Inference Protocol (KServe v2) REST API.

Needs the ``serve`` extra (``pip install ptmkit-export[serve]``: Starlette and uvicorn); imports
neither TensorFlow nor Keras. ``ptmkit serve EXPORT_DIR`` and ``ptmkit-serve EXPORT_DIR`` run
:func:`serve`.

Endpoints (the Open Inference Protocol's REST API, https://kserve.github.io/website/latest/modelserving/data_plane/v2_protocol/
, as Triton Inference Server implements it, with Triton's binary tensor extension
https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_binary_data.md):

- ``GET /v2/health/live``, ``GET /v2/health/ready``: 200 when live / ready.
- ``GET /v2``: server metadata ``{"name", "version", "extensions"}``.
- ``GET /v2/models/{name}`` (and ``/versions/1``): model metadata ``{"name", "versions",
  "platform", "inputs", "outputs"}``, each tensor ``{"name", "datatype", "shape"}`` (-1: any size).
- ``GET /v2/models/{name}/ready``: 200 when the model is ready.
- ``POST /v2/models/{name}/infer`` (and ``/versions/1/infer``): run the model. Inputs are either
  one ``text`` tensor (datatype ``BYTES``, shape ``[n]`` or ``[n, 1]``, UTF-8 strings), which the
  server tokenizes with the export's tokenizer.json, or the model's own tensors (``token_ids``,
  ``segment_ids``, ``padding_mask``: datatype as the manifest says, ``INT32`` by default, shape
  ``[n, length]``, ``1 <= length <= max_sequence_length``). Outputs for ``text``: a classifier
  gives ``logits`` (FP32 ``[n, labels]``), ``probabilities`` (FP32 ``[n, labels]``, softmax of the
  logits, or their sigmoid when the manifest's ``activation`` is ``sigmoid``) and ``labels`` (BYTES ``[n]``, the most probable label); an embedding export gives
  ``embeddings`` (FP32 ``[n, dim]``). For raw tensors the outputs are the ONNX model's own
  (``logits`` or ``embeddings``). ``"outputs": [{"name": ...}]`` picks some; ``"parameters":
  {"binary_data": true}`` on an output (or ``"binary_data_output": true`` on the request) returns it
  in binary after the JSON header, whose length is in the ``Inference-Header-Content-Length``
  response header; binary inputs are read the same way.
- ``POST /v1/predict`` with ``{"texts": [str, ...]}``: ``{"model_name", "predictions": [{"label",
  "probabilities": {label: p}}]}`` for a classifier, ``{"model_name", "embeddings": [[float]]}``
  for an embedding export.
- ``POST /v2/models/{name}/generate`` (a decoder export, ``task == "generation"``): the generate
  extension (https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_generate.md).
  ``{"text_input": str, "parameters": {"max_new_tokens", "strategy", "temperature", "top_k",
  "top_p", "num_beams", "length_penalty", "seed", "stop", "truncate"}}`` (every parameter
  optional, as :meth:`ptmkit_export.Predictor.generate` takes them) gives ``{"model_name",
  "model_version", "text_output"}``, the text ``Predictor.generate`` gives.
  ``POST /v2/models/{name}/generate_stream`` takes the same body and answers server-sent events
  (``text/event-stream``), one ``data: {"model_name", "model_version", "text_output"}`` per
  decoded piece (about a token; beam search: one at the end), which join to that text. Each
  generation runs in a thread of its own, ``generation_slots`` at a time; a streaming client
  that disconnects stops its generation before the next model call and frees its slot
  (:mod:`ptmkit_export.generation_slots`). ``infer`` and ``/v1/predict`` on a decoder export, and
  ``generate`` on any other, are a 400 saying why.
- A translation export (``task == "translation"``, :class:`TranslationService`): ``infer`` with one
  ``text`` tensor (``BYTES``, ``[n]``) gives ``translation`` (``BYTES``, ``[n]``), greedy search,
  concurrent requests batched together (the graphs' own tensors are refused: the decoder needs its
  search loop); ``generate`` (and ``generate_stream``: one event, the whole translation) takes
  ``{"text_input": str, "parameters": {"num_beams", "length_penalty", "max_length"}}`` (each
  optional: greedy, 1.0, the model's positions) and gives ``{"model_name", "model_version",
  "text_output"}``, the translation :meth:`ptmkit_export.Translator.translate` gives;
  ``/v1/predict`` gives ``{"model_name", "translations": [str, ...]}``.
- ``GET /metrics``: Prometheus text (:class:`ptmkit_export.metrics.ServerMetrics`).

Errors are ``{"error": "one line"}`` with a 4xx status: 400 malformed JSON, unknown or missing
input, wrong datatype or shape, empty input, too many rows; 404 unknown model, version or path;
405 wrong method; 413 a body over ``max_body_bytes``. The server keeps serving after each.
A tensor's elements are read only up to the count its declared shape allows: one more is a 400
at once (2,000,000 empty BYTES elements declared as ``[1]`` cost one read). Bodies over 16 KiB are
decoded, and responses over 16 Ki elements encoded, in a worker thread; the model (tokenization
included) always runs in the batcher's worker thread; so the event loop keeps answering health
probes meanwhile. (A JSON body is parsed by orjson, which holds the GIL: an 8 MB JSON body of
tiny values still delays the loop by one parse, 0.1-0.3 s on a busy machine; the binary
extension avoids it.) Concurrent requests are batched (:class:`ptmkit_export.batching.DynamicBatcher`); SIGTERM or
SIGINT stops accepting connections, answers the requests in flight, then exits.
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import socket
import struct
import threading
import time
from collections.abc import AsyncIterator, Callable, Hashable, Sequence
from contextlib import asynccontextmanager
from typing import Any, NamedTuple

import numpy as np

from ptmkit_export.batching import BatcherClosed, DynamicBatcher
from ptmkit_export.generation import MAX_BEAMS, GenerationSettings, beams_problem
from ptmkit_export.generation_slots import GenerationSlots
from ptmkit_export.manifest import NAME_PATTERN, TRANSLATION_TASK, default_name, read_manifest
from ptmkit_export.metrics import CONTENT_TYPE, ServerMetrics
from ptmkit_export.predictor import Predictor, device_providers, probabilities
from ptmkit_export.serve_defaults import DEFAULT_GENERATION_SLOTS, DEFAULT_MAX_BODY_BYTES, missing_extra_message
from ptmkit_export.translation import Translator

try:
    import orjson
    import uvicorn
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route
except ImportError as error:  # tested by blocking the import (tests/export/test_export_serve_process.py)
    raise ImportError(missing_extra_message(error), name=error.name) from None

SERVER_NAME = "ptmkit"
SERVER_VERSION = "0.1.0"
VERSION = "1"  # the only model version a ptmkit server holds
TEXT_INPUT = "text"
DEFAULT_MAX_REQUEST_ROWS = 1024
#: Bodies up to this size are decoded on the event loop (at most about a millisecond of work);
#: larger ones in a worker thread.
INLINE_DECODE_BYTES = 16 * 1024
#: Responses of up to this many output elements are encoded on the event loop; larger in a thread.
INLINE_ENCODE_ELEMENTS = 16 * 1024

#: Open Inference Protocol tensor datatypes <-> NumPy dtypes (little-endian in binary data).
DATATYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
}
_ORT_TYPES = {"tensor(int32)": "INT32", "tensor(int64)": "INT64", "tensor(float)": "FP32", "tensor(double)": "FP64", "tensor(float16)": "FP16", "tensor(bool)": "BOOL"}


#: What a request handler hands the batcher: ``(kind, payload, rows, finish)``, where ``finish``
#: turns the batch's result for this request into the HTTP response.
Prepared = tuple[Hashable, Any, int, Callable[[dict[str, np.ndarray]], Response]]


class RequestError(Exception):
    """A request the server refuses: ``status`` (HTTP 4xx) and a one-line message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _shape(value: Any) -> list[int | str]:
    return [d if isinstance(d, int) else -1 for d in (value or [])]


#: The generate extension's prompt and answer fields (Triton's ``text_input`` / ``text_output``).
GENERATE_INPUT, GENERATE_OUTPUT = "text_input", "text_output"
#: The generate request's ``parameters``, with their JSON kinds.
GENERATE_PARAMETERS: dict[str, str] = {
    "max_new_tokens": "int", "strategy": "str", "temperature": "number", "top_k": "int", "top_p": "number",
    "num_beams": "int", "length_penalty": "number", "seed": "int", "stop": "stops", "truncate": "str", "stream": "bool",
}  # fmt: skip
_KIND_NAMES = {"int": "an integer", "str": "a string", "number": "a number", "stops": "a string or a list of strings", "bool": "true or false"}


def _is_kind(value: Any, kind: str) -> bool:
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if kind == "stops":
        return isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))
    return isinstance(value, bool if kind == "bool" else str)


class GenerateRequest(NamedTuple):
    """A decoded generate request: the ``prompt``, its :class:`GenerationSettings`, ``stop``
    strings and ``truncate`` (``error`` or ``left``)."""

    prompt: str
    settings: GenerationSettings
    stop: list[str]
    truncate: str


class InferRequest(NamedTuple):
    """A decoded infer request: the batcher's ``kind`` and ``payload``, its ``rows``, the
    ``outputs`` to return (``{name: binary}``) and the request's ``id`` (or None)."""

    kind: Hashable
    payload: Any
    rows: int
    outputs: dict[str, bool]
    request_id: str | None


class ModelService:
    """One export behind the protocol: metadata, request decoding, batched runs, response encoding.

    Args:
        predictor: the loaded export (:class:`ptmkit_export.Predictor`); only the batcher's worker
            thread runs it.
        name: the model name in URLs (letters, digits, ``_ . -``).
        max_request_rows: most rows (texts) in one request; more is a 400.

    Raises:
        ValueError: an invalid ``name``.
    """

    #: A translation export's service (:class:`TranslationService`) says True.
    is_translator = False

    def __init__(self, predictor: Predictor, name: str, max_request_rows: int = DEFAULT_MAX_REQUEST_ROWS) -> None:
        if not NAME_PATTERN.match(name):
            raise ValueError(f"model name {name!r} must be letters, digits, '_', '.' or '-'")
        self.predictor = predictor
        self.name = name
        self.max_request_rows = max_request_rows
        #: A model call's fixed cost, in padded tokens (see :func:`length_groups`).
        self.call_cost_tokens = 16
        manifest = predictor.manifest
        # A featurizer export (bag of rows, no tokenizer) has no sequence length or pad id.
        self.max_length = int(manifest.get("max_sequence_length", 0))
        self.pad_id = int(manifest.get("pad_token_id", 0))
        if predictor.featurizer is not None:
            self.vocabulary_size = predictor.featurizer.rows_total
        else:
            assert predictor.tokenizer is not None
            self.vocabulary_size = int(predictor.tokenizer.get_vocab_size())
        self.labels = list(predictor.labels)
        #: (name, datatype, encoding) of the model's own inputs, in manifest order; none for a
        #: variant that tokenizes inside the graph, a featurizer export, or a model with an input
        #: other than (batch, sequence), such as characters (they take text only).
        other_rank = any(len(s.get("shape", ("batch", "sequence"))) != 2 for s in manifest["inputs"])
        text_only = predictor.text_input or predictor.featurizer is not None or other_rank
        self.tensor_inputs = [] if text_only else [(s["name"], s["dtype"].upper(), s["encoding"]) for s in manifest["inputs"]]
        self.has_mask = any(encoding == "attention_mask" for _, _, encoding in self.tensor_inputs)
        self.model_outputs = [o.name for o in predictor.session.get_outputs()]
        self._model_output_meta = [
            {"name": o.name, "datatype": _ORT_TYPES.get(o.type, "FP32"), "shape": _shape(o.shape)}
            for o in predictor.session.get_outputs()
        ]
        width = self._model_output_meta[0]["shape"][-1] if self._model_output_meta[0]["shape"] else -1
        #: A decoder export answers the generate extension only (its graph needs a key/value cache).
        self.is_generator = predictor.is_generator
        if self.is_generator:
            self.tensor_inputs, self.text_outputs = [], {}
        elif predictor.is_embedder:
            self.text_outputs = {"embeddings": ("FP32", [-1, width])}
        else:
            self.text_outputs = {
                "logits": ("FP32", [-1, len(self.labels)]),
                "probabilities": ("FP32", [-1, len(self.labels)]),
                "labels": ("BYTES", [-1]),
            }

    # --- metadata ---------------------------------------------------------------------------------

    def metadata(self) -> dict[str, Any]:
        """Model metadata (Open Inference Protocol ``$metadata_model_response``).

        ``inputs`` lists ``text`` first, then the model's tensors: a request gives ``text`` alone
        or all the tensors. ``outputs`` lists the text outputs then any other model output.
        ``parameters`` adds ptmkit's ``task``, ``labels``, ``max_sequence_length``, ``variant``
        (and for a multi-task export ``tasks`` and ``served_task``, whose labels ``labels`` are).
        """
        if self.is_generator:  # the generate extension's request and response fields
            inputs = [{"name": GENERATE_INPUT, "datatype": "BYTES", "shape": [1]}]
            outputs = [{"name": GENERATE_OUTPUT, "datatype": "BYTES", "shape": [1]}]
        else:
            inputs = [{"name": TEXT_INPUT, "datatype": "BYTES", "shape": [-1]}]
            inputs += [{"name": n, "datatype": dt, "shape": [-1, -1]} for n, dt, _ in self.tensor_inputs]
            outputs = [{"name": n, "datatype": dt, "shape": shape} for n, (dt, shape) in self.text_outputs.items()]
            outputs += [o for o in self._model_output_meta if o["name"] not in self.text_outputs]
        return {
            "name": self.name,
            "versions": [VERSION],
            "platform": "onnxruntime_onnx",
            "inputs": inputs,
            "outputs": outputs,
            "parameters": {
                "task": self.predictor.manifest.get("task", ""),
                "labels": self.labels,
                "max_sequence_length": self.max_length,
                "variant": self.predictor.variant,
                **({"tasks": list(self.predictor.manifest["tasks"]), "served_task": self.predictor.task} if self.predictor.task is not None else {}),
            },
        }

    # --- running batches (worker thread) ----------------------------------------------------------

    def run_batch(self, kind: Hashable, payloads: Sequence[Any]) -> list[dict[str, np.ndarray]]:
        """Run one batch; ``kind`` is ``"text"`` (payloads: lists of str) or ``("tensors", length)``
        (payloads: ``{input name: (rows, length) array}``). Returns ``{output name: array}`` per payload."""
        if kind != TEXT_INPUT:
            results: list[dict[str, np.ndarray]] = [{} for _ in payloads]
            lengths = [next(iter(p.values())).shape[1] for p in payloads]
            rows = [next(iter(p.values())).shape[0] for p in payloads]
            for group in length_groups(lengths, self.call_cost_tokens, rows):  # similar lengths together
                outputs = self._run_tensors([payloads[i] for i in group])
                start = 0
                for i in group:
                    results[i] = {name: array[start : start + rows[i]] for name, array in outputs.items()}
                    start += rows[i]
            return results
        outputs = self._run_texts(payloads)
        results, start = [], 0
        for payload in payloads:
            results.append({name: array[start : start + len(payload)] for name, array in outputs.items()})
            start += len(payload)
        return results

    def _run_texts(self, payloads: Sequence[list[str]]) -> dict[str, np.ndarray]:
        texts = [text for payload in payloads for text in payload]
        run = self.predictor.embed if self.predictor.is_embedder else self.predictor.logits
        if len(texts) == 1:
            values = run(texts)
        else:  # texts of similar length run together, so that short texts are not padded to long ones
            if self.predictor.featurizer is not None:
                lengths = [len(self.predictor.featurizer.rows(text)) for text in texts]
            else:
                assert self.predictor.tokenizer is not None
                lengths = [sum(e.attention_mask) for e in self.predictor.tokenizer.encode_batch(self.predictor.clip(texts))]
            values = np.empty((0, 0), dtype=np.float32)
            for group in length_groups(lengths, self.call_cost_tokens):
                part = run([texts[i] for i in group])
                if values.size == 0:
                    values = np.empty((len(texts), *part.shape[1:]), dtype=part.dtype)
                values[group] = part
        if self.predictor.is_embedder:
            return {"embeddings": values}
        logits = values
        scores = probabilities(logits, self.predictor.activation).astype(np.float32)
        labels = np.array([self.labels[i] for i in scores.argmax(axis=1)], dtype=object)
        return {"logits": logits, "probabilities": scores, "labels": labels}

    def _run_tensors(self, payloads: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        length = max(next(iter(p.values())).shape[1] for p in payloads)
        feeds = {}
        for name, _, encoding in self.tensor_inputs:
            fill = self.pad_id if encoding == "ids" else 0  # padding is masked out by attention_mask
            parts = [np.pad(p[name], ((0, 0), (0, length - p[name].shape[1])), constant_values=fill) for p in payloads]
            feeds[name] = np.concatenate(parts, axis=0)
        values = self.predictor.session.run(self.model_outputs, feeds)
        return dict(zip(self.model_outputs, values, strict=True))

    # --- decoding requests ------------------------------------------------------------------------

    def decode_infer(self, body: bytes, header_length: str | None) -> InferRequest:
        """Parse an infer request.

        Args:
            body: the request body.
            header_length: the ``Inference-Header-Content-Length`` header (binary extension), or None.

        Returns:
            The parsed :class:`InferRequest`.

        Raises:
            RequestError: 400 for anything malformed; see the module docstring.
        """
        self._check_not_generator("infer")
        if header_length is not None:
            try:
                json_size = int(header_length)
            except ValueError:
                raise RequestError(400, f"Inference-Header-Content-Length {header_length!r} is not an integer") from None
            if not 0 < json_size <= len(body):
                raise RequestError(400, f"Inference-Header-Content-Length {json_size} is outside the body's {len(body)} bytes")
            header, binary = body[:json_size], memoryview(body)[json_size:]
        else:
            header, binary = body, memoryview(b"")
        request = _parse_json(header)
        if not isinstance(request, dict):
            raise RequestError(400, f"request must be a JSON object, got {type(request).__name__}")
        inputs = request.get("inputs")
        if not isinstance(inputs, list) or not inputs:
            raise RequestError(400, "'inputs' must be a non-empty list of tensors")
        tensors: dict[str, tuple[str, list[int], Any]] = {}  # binary data stays a memoryview
        offset = 0
        for i, tensor in enumerate(inputs):
            if not isinstance(tensor, dict) or not isinstance(tensor.get("name"), str):
                raise RequestError(400, f"inputs[{i}] must be an object with a 'name'")
            name = tensor["name"]
            if name in tensors:
                raise RequestError(400, f"input {name!r} is given twice")
            datatype, shape = tensor.get("datatype"), tensor.get("shape")
            if not isinstance(datatype, str):
                raise RequestError(400, f"input {name!r}: 'datatype' must be a string")
            if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
                raise RequestError(400, f"input {name!r}: 'shape' must be a list of non-negative integers")
            parameters = tensor.get("parameters") or {}
            size = parameters.get("binary_data_size") if isinstance(parameters, dict) else None
            if size is not None:
                if not isinstance(size, int) or size < 0 or offset + size > len(binary):
                    raise RequestError(400, f"input {name!r}: binary_data_size {size!r} runs past the body")
                tensors[name] = (datatype, shape, binary[offset : offset + size])  # a view: no copy
                offset += size
            elif "data" in tensor:
                tensors[name] = (datatype, shape, tensor["data"])
            else:
                raise RequestError(400, f"input {name!r} has no 'data' (and no binary_data_size)")
        if offset != len(binary):
            raise RequestError(400, f"{len(binary) - offset} bytes of binary data are not claimed by any input")

        if TEXT_INPUT in tensors:
            if len(tensors) > 1:
                others = ", ".join(sorted(set(tensors) - {TEXT_INPUT}))
                raise RequestError(400, f"give input 'text' alone or the model's tensors, not both (also got {others})")
            kind: Hashable = TEXT_INPUT
            payload: Any = self._decode_text(*tensors[TEXT_INPUT])
            rows = len(payload)
            available = self.text_outputs
        else:
            feeds = self._decode_tensors(tensors)
            rows, length = next(iter(feeds.values())).shape
            kind, payload = ("tensors", 0 if self.has_mask else length), feeds
            available = {name: ("", []) for name in self.model_outputs}
        outputs = self._decode_outputs(request, available)
        request_id = request.get("id")
        return InferRequest(kind, payload, rows, outputs, request_id if isinstance(request_id, str) else None)

    def _check_not_generator(self, what: str) -> None:
        if self.is_generator:
            raise RequestError(
                400, f"model {self.name!r} is a text generation export: {what} does not run it; POST /v2/models/{self.name}/generate (or generate_stream)"
            )

    def decode_generate(self, body: bytes) -> GenerateRequest:
        """Parse a generate extension request ``{"text_input": str, "parameters": {...}}``.

        ``parameters`` (all optional) are :class:`ptmkit_export.generation.GenerationSettings`'
        fields (``max_new_tokens``, ``strategy``, ``temperature``, ``top_k``, ``top_p``,
        ``num_beams``, ``length_penalty``, ``seed``), ``stop`` (a string or a list of strings),
        ``truncate`` (``error`` or ``left``) and ``stream`` (a bool, ignored: the endpoint says
        whether to stream, as in Triton).

        Raises:
            RequestError: 400 naming the key for a model that does not generate, malformed JSON,
                a missing or non-string ``text_input``, an unknown parameter, a value of the wrong
                type or out of range.
        """
        if not self.is_generator:
            task = self.predictor.manifest.get("task", "")
            raise RequestError(400, f"model {self.name!r} is a {task!r} export and does not generate text; generate needs a decoder export (task 'generation', e.g. a gpt run)")
        prompt, parameters = _generate_body(body)
        if not isinstance(prompt, str):
            got = "nothing" if prompt is None else type(prompt).__name__
            raise RequestError(400, f"{GENERATE_INPUT!r} must be a string (the prompt), got {got}")
        values: dict[str, Any] = {}
        for key, value in parameters.items():
            kind = GENERATE_PARAMETERS.get(key)
            if kind is None:
                raise RequestError(400, f"unknown parameter 'parameters.{key}'; expected some of {', '.join(GENERATE_PARAMETERS)}")
            if not _is_kind(value, kind):
                raise RequestError(400, f"'parameters.{key}' must be {_KIND_NAMES[kind]}, got {json_bytes(value).decode()[:40]}")
            values[key] = value
        stop = values.pop("stop", [])
        stop = [stop] if isinstance(stop, str) else stop
        truncate = values.pop("truncate", "error")
        if truncate not in ("error", "left"):
            raise RequestError(400, f"'parameters.truncate' {truncate!r}: expected error or left")
        values.pop("stream", None)
        settings = GenerationSettings(**values)
        problems = settings.problems(lambda key: f"'parameters.{key}'")
        if problems:
            raise RequestError(400, problems[0])
        return GenerateRequest(prompt, settings, stop, truncate)

    def _check_rows(self, rows: int, what: str) -> None:
        if rows < 1:
            raise RequestError(400, f"{what} is empty: send at least one row")
        if rows > self.max_request_rows:
            raise RequestError(400, f"{what} has {rows} rows, over the limit of {self.max_request_rows} per request")

    def _decode_text(self, datatype: str, shape: list[int], data: Any) -> list[str]:
        if datatype != "BYTES":
            raise RequestError(400, f"input 'text' must have datatype BYTES, got {datatype!r}")
        if len(shape) not in (1, 2) or (len(shape) == 2 and shape[1] != 1):
            raise RequestError(400, f"input 'text' must have shape [n] or [n, 1], got {shape}")
        rows = shape[0]
        self._check_rows(rows, "input 'text'")
        # Both readers stop after `rows` elements: a body cannot make the server walk more than it declared.
        texts: list[Any] = _unpack_bytes(data, "input 'text'", shape) if isinstance(data, memoryview) else _flatten(data, "input 'text'", shape)
        out: list[str] = []
        for i, value in enumerate(texts):
            text = value
            if isinstance(value, bytes):
                try:
                    text = value.decode("utf-8")
                except UnicodeDecodeError:
                    raise RequestError(400, f"input 'text'[{i}] is not valid UTF-8") from None
            if not isinstance(text, str):
                raise RequestError(400, f"input 'text'[{i}] must be a string, got {type(text).__name__}")
            out.append(text)
        return out

    def _decode_tensors(self, tensors: dict[str, tuple[str, list[int], Any]]) -> dict[str, np.ndarray]:
        expected = [name for name, _, _ in self.tensor_inputs]
        unknown = sorted(set(tensors) - set(expected))
        if unknown:
            raise RequestError(
                400, f"unknown input {unknown[0]!r}; model {self.name!r} takes 'text' (BYTES)" + (f" or {', '.join(expected)}" if expected else " only")
            )
        missing = [name for name in expected if name not in tensors]
        if missing:
            raise RequestError(400, f"missing input(s) {', '.join(missing)} (or send 'text' alone)")
        feeds, first_shape = {}, None
        for name, datatype, encoding in self.tensor_inputs:
            given, shape, data = tensors[name]
            if given != datatype:
                raise RequestError(400, f"input {name!r} must have datatype {datatype}, got {given!r}")
            if len(shape) != 2:
                raise RequestError(400, f"input {name!r} must have shape [batch, length], got {shape}")
            if first_shape is None:
                first_shape = shape
            elif shape != first_shape:
                raise RequestError(400, f"input {name!r} has shape {shape} but {expected[0]!r} has {first_shape}")
            self._check_rows(shape[0], f"input {name!r}")
            if not 1 <= shape[1] <= self.max_length:
                raise RequestError(400, f"input {name!r}: length {shape[1]} must be 1 to {self.max_length} (max_sequence_length)")
            dtype = DATATYPES[datatype]
            if isinstance(data, memoryview):
                if len(data) != math.prod(shape) * dtype.itemsize:
                    raise RequestError(400, f"input {name!r}: {len(data)} bytes of binary data for shape {shape} {datatype}")
                array = np.frombuffer(data, dtype=dtype.newbyteorder("<")).astype(dtype)
            else:
                flat = _flatten(data, f"input {name!r}", shape)
                if not all(isinstance(v, int) and not isinstance(v, bool) for v in flat):
                    raise RequestError(400, f"input {name!r}: {datatype} data must be integers")
                info = np.iinfo(dtype)
                if flat and not (info.min <= min(flat) and max(flat) <= info.max):
                    raise RequestError(400, f"input {name!r}: values out of the {datatype} range")
                array = np.asarray(flat, dtype=dtype)
            array = array.reshape(shape)
            if encoding == "ids" and array.size and not (0 <= array.min() and array.max() < self.vocabulary_size):
                raise RequestError(400, f"input {name!r}: token ids must be in [0, {self.vocabulary_size})")
            if encoding == "attention_mask" and not np.isin(array, (0, 1)).all():
                raise RequestError(400, f"input {name!r}: attention mask values must be 0 or 1")
            if encoding == "type_ids" and array.size and array.min() < 0:
                raise RequestError(400, f"input {name!r}: segment ids must be >= 0")
            feeds[name] = array
        return feeds

    @staticmethod
    def _decode_outputs(request: dict[str, Any], available: dict[str, Any]) -> dict[str, bool]:
        parameters = request.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise RequestError(400, "'parameters' must be an object")
        binary_default = parameters.get("binary_data_output") is True
        wanted = request.get("outputs")
        if wanted is None:
            return {name: binary_default for name in available}
        if not isinstance(wanted, list) or not wanted:
            raise RequestError(400, "'outputs' must be a non-empty list of {\"name\": ...} objects")
        out = {}
        for i, spec in enumerate(wanted):
            if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
                raise RequestError(400, f"outputs[{i}] must be an object with a 'name'")
            if spec["name"] not in available:
                raise RequestError(400, f"unknown output {spec['name']!r}; this request can return {', '.join(available)}")
            spec_parameters = spec.get("parameters") or {}
            binary = spec_parameters.get("binary_data", binary_default) if isinstance(spec_parameters, dict) else binary_default
            out[spec["name"]] = binary is True
        return out

    # --- encoding responses -----------------------------------------------------------------------

    def encode_infer(self, result: dict[str, np.ndarray], outputs: dict[str, bool], request_id: str | None) -> Response:
        """The infer response: JSON, or a JSON header followed by binary tensors."""
        tensors, blobs = [], []
        for name, binary in outputs.items():
            array = result[name]
            datatype = "BYTES" if array.dtype == object else _datatype(array.dtype)
            tensor: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
            if binary:
                blob = _pack_bytes(array.ravel()) if datatype == "BYTES" else np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
                tensor["parameters"] = {"binary_data_size": len(blob)}
                blobs.append(blob)
            else:
                tensor["data"] = [str(v) for v in array.ravel()] if datatype == "BYTES" else array.ravel()
            tensors.append(tensor)
        response: dict[str, Any] = {"model_name": self.name, "model_version": VERSION, "outputs": tensors}
        if request_id is not None:
            response["id"] = request_id
        header = json_bytes(response)
        if not blobs:
            return Response(header, media_type="application/json")
        return Response(
            header + b"".join(blobs),
            media_type="application/octet-stream",
            headers={"Inference-Header-Content-Length": str(len(header))},
        )

    def decode_predict(self, body: bytes) -> list[str]:
        """Texts of a ``/v1/predict`` body ``{"texts": [str, ...]}``; RequestError 400 otherwise."""
        self._check_not_generator("/v1/predict")
        request = _parse_json(body)
        if not isinstance(request, dict) or "texts" not in request:
            raise RequestError(400, 'body must be a JSON object {"texts": [str, ...]}')
        texts = request["texts"]
        if not isinstance(texts, list):
            raise RequestError(400, f"'texts' must be a list of strings, got {type(texts).__name__}")
        self._check_rows(len(texts), "'texts'")
        bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
        if bad is not None:
            raise RequestError(400, f"texts[{bad}] must be a string, got {type(texts[bad]).__name__}")
        return texts

    def encode_predict(self, result: dict[str, np.ndarray]) -> dict[str, Any]:
        """The ``/v1/predict`` answer for one request's result (see the module docstring)."""
        if "embeddings" in result:
            return {"model_name": self.name, "embeddings": result["embeddings"]}
        predictions = [
            {"label": str(label), "probabilities": dict(zip(self.labels, row.tolist(), strict=True))}
            for label, row in zip(result["labels"], result["probabilities"], strict=True)
        ]
        return {"model_name": self.name, "predictions": predictions}


#: The output of a translation export (:class:`TranslationService`).
TRANSLATION_OUTPUT = "translation"
#: The generate request's ``parameters``: a check of each value and what it must be.
TRANSLATION_PARAMETERS = {
    "num_beams": (lambda v: beams_problem(v) is None, f"an integer from 1 to {MAX_BEAMS}"),
    "length_penalty": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v), "a finite number"),
    "max_length": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "an integer >= 1"),
}


class TranslationService(ModelService):
    """:class:`ModelService` for a :class:`ptmkit_export.Translator`: its request decoding and
    response encoding, with the runs and answers of the module docstring (translation export).

    Args:
        translator: the loaded export; only the batcher's worker thread runs it.
        name: the model name in URLs.
        max_request_rows: most texts in one request; more is a 400.

    Raises:
        ValueError: an invalid ``name``.
    """

    is_translator = True

    def __init__(self, translator: Translator, name: str, max_request_rows: int) -> None:
        if not NAME_PATTERN.match(name):
            raise ValueError(f"model name {name!r} must be letters, digits, '_', '.' or '-'")
        self.predictor: Any = translator
        self.name, self.max_request_rows = name, max_request_rows
        self.labels: list[str] = []
        self.tensor_inputs: list[tuple[str, str, str]] = []
        self.has_mask = False
        self.model_outputs: list[str] = []
        self.text_outputs = {TRANSLATION_OUTPUT: ("BYTES", [-1])}
        self.max_length = translator.max_sequence_length
        self.is_generator = False

    def metadata(self) -> dict[str, Any]:
        """Model metadata: input ``text``, output ``translation``; ``parameters`` add ``task``,
        ``languages``, ``max_sequence_length`` and ``variant``."""
        return {
            "name": self.name, "versions": ["1"], "platform": "onnxruntime_onnx",
            "inputs": [{"name": "text", "datatype": "BYTES", "shape": [-1]}],
            "outputs": [{"name": TRANSLATION_OUTPUT, "datatype": "BYTES", "shape": [-1]}],
            "parameters": {"task": "translation", "languages": self.predictor.languages or "", "max_sequence_length": self.max_length,
                           "variant": self.predictor.variant},
        }

    def run_batch(self, kind: Hashable, payloads: Sequence[Any]) -> list[dict[str, np.ndarray]]:
        """Translate each payload's texts: ``kind`` ``"text"`` (greedy, all payloads as one batch)
        or ``("search", num_beams, length_penalty, max_length)`` (a generate request's search)."""
        texts = [text for payload in payloads for text in payload]
        if kind == "text":
            translations = self.predictor.translate(texts)
        else:
            _, beams, penalty, most = kind  # type: ignore[misc]
            translations = self.predictor.translate(texts, num_beams=beams, length_penalty=penalty, max_length=most)
        out, start = [], 0
        for payload in payloads:
            out.append({TRANSLATION_OUTPUT: np.array(translations[start : start + len(payload)], dtype=object)})
            start += len(payload)
        return out

    def _decode_tensors(self, tensors: dict[str, Any]) -> dict[str, np.ndarray]:
        raise RequestError(400, f"model {self.name!r} is a translation export: give input 'text' (BYTES), not tensors ({', '.join(sorted(tensors))})")

    def decode_generate(self, body: bytes) -> tuple[Hashable, str]:  # type: ignore[override]
        """``(kind, text)`` of a generate request (module docstring).

        Raises:
            RequestError: 400 naming the key: malformed JSON, a missing, empty or non-string
                ``text_input``, an unknown parameter, a value of the wrong kind.
        """
        text, parameters = _generate_body(body)
        if not isinstance(text, str) or not text.strip():
            raise RequestError(400, f"{GENERATE_INPUT!r} must be a non-empty string (the sentence to translate)")
        for key, value in parameters.items():
            if key not in TRANSLATION_PARAMETERS:
                raise RequestError(400, f"unknown parameter 'parameters.{key}'; a translation takes some of {', '.join(TRANSLATION_PARAMETERS)}")
            check, kind = TRANSLATION_PARAMETERS[key]
            if not check(value):
                raise RequestError(400, f"'parameters.{key}' must be {kind}, got {value!r}")
        return ("search", int(parameters.get("num_beams", 1)), float(parameters.get("length_penalty", 1.0)), parameters.get("max_length")), text

    def encode_predict(self, result: dict[str, np.ndarray]) -> dict[str, Any]:
        """``{"model_name", "translations": [str, ...]}``."""
        return {"model_name": self.name, "translations": [str(text) for text in result[TRANSLATION_OUTPUT]]}


def length_groups(lengths: Sequence[int], call_cost_tokens: float = 16, rows: Sequence[int] | None = None) -> list[list[int]]:
    """Split a batch into model calls of items of similar length, at least total cost.

    A call on ``n`` rows padded to ``longest`` tokens is costed ``call_cost_tokens + n * longest``
    (the fixed part is mostly reading the weights once per call: all-MiniLM-L6-v2 on one CPU
    thread takes 2.6 ms at batch 1 x 1 token and 0.23 ms per further token (16 x 16), so a call costs about
    11 tokens; 16 leans toward fewer calls). Items are sorted by length and cut into contiguous
    groups by dynamic programming (O(n^2), n <= max batch).

    Args:
        lengths: tokens per item (>= 1 each).
        call_cost_tokens: the fixed cost of one call, in tokens (>= 0); 0 gives one call per
            distinct length, a huge value one call for all.
        rows: rows per item (default 1 each), e.g. a request's texts.

    Returns:
        Groups of indices into ``lengths``, covering each index once, each group sorted by length.
    """
    weights = list(rows) if rows is not None else [1] * len(lengths)
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    n = len(order)
    prefix = [0]
    for index in order:
        prefix.append(prefix[-1] + weights[index])
    best = [0.0] + [float("inf")] * n  # best[j]: least cost of the first j items in sorted order
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        longest = lengths[order[j - 1]]
        for i in range(j):
            cost = best[i] + call_cost_tokens + (prefix[j] - prefix[i]) * longest
            if cost < best[j]:
                best[j], cut[j] = cost, i
    groups, j = [], n
    while j > 0:
        groups.append(order[cut[j] : j])
        j = cut[j]
    return groups[::-1]


def _datatype(dtype: np.dtype[Any]) -> str:
    for name, candidate in DATATYPES.items():
        if candidate == dtype:
            return name
    raise TypeError(f"no Open Inference Protocol datatype for {dtype}")


def _generate_body(body: bytes) -> tuple[Any, dict[str, Any]]:
    """``(text_input, parameters)`` of a generate extension body ``{"text_input", "parameters",
    "id"}`` (``text_input`` unchecked; ``parameters`` ``{}`` when absent).

    Raises:
        RequestError: 400 for malformed JSON, not an object, an unknown key, ``parameters`` not an object.
    """
    request = _parse_json(body)
    if not isinstance(request, dict):
        raise RequestError(400, f"request must be a JSON object, got {type(request).__name__}")
    unknown = sorted(set(request) - {GENERATE_INPUT, "parameters", "id"})
    if unknown:
        raise RequestError(400, f"unknown key {unknown[0]!r}; a generate request has {GENERATE_INPUT!r} and 'parameters'")
    parameters = request.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise RequestError(400, f"'parameters' must be an object, got {type(parameters).__name__}")
    return request.get(GENERATE_INPUT), parameters


def _parse_json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise RequestError(400, f"malformed JSON: {str(error).splitlines()[0]}") from None


def _flatten(data: Any, what: str, shape: list[int]) -> list[Any]:
    """The elements of a JSON tensor's nested ``data`` lists, in row-major order.

    Stops as soon as there are more elements than ``shape`` declares (its product), so a body
    costs at most the work its declared shape allows.

    Raises:
        RequestError: 400 when ``data`` is not a list or its element count differs from the shape's.
    """
    if not isinstance(data, list):
        raise RequestError(400, f"{what}: 'data' must be a list")
    count = math.prod(shape)
    flat: list[Any] = []
    stack = [iter(data)]
    while stack:
        for value in stack[-1]:
            if isinstance(value, list):
                stack.append(iter(value))
                break
            if len(flat) == count:
                raise RequestError(400, f"{what} has shape {shape} but more than {count} elements")
            flat.append(value)
        else:
            stack.pop()
    if len(flat) != count:
        raise RequestError(400, f"{what} has shape {shape} but {len(flat)} elements")
    return flat


def _unpack_bytes(data: memoryview, what: str, shape: list[int]) -> list[bytes]:
    """Triton's BYTES binary layout: each element is a little-endian uint32 length, then the bytes.

    Reads at most the element count ``shape`` declares (its product) and refuses the body as soon
    as bytes remain after them: 2,000,000 empty elements declared as shape ``[1]`` cost one read.

    Raises:
        RequestError: 400 for a truncated element, or an element count that differs from the shape's.
    """
    count = math.prod(shape)
    out, offset = [], 0
    while offset < len(data):
        if len(out) == count:
            raise RequestError(400, f"{what} has shape {shape} but more than {count} elements")
        if offset + 4 > len(data):
            raise RequestError(400, f"{what}: truncated BYTES element length")
        (size,) = struct.unpack_from("<I", data, offset)
        offset += 4
        if offset + size > len(data):
            raise RequestError(400, f"{what}: BYTES element runs past the binary data")
        out.append(bytes(data[offset : offset + size]))
        offset += size
    if len(out) != count:
        raise RequestError(400, f"{what} has shape {shape} but {len(out)} elements")
    return out


def _pack_bytes(values: np.ndarray) -> bytes:
    parts = []
    for value in values:
        raw = value if isinstance(value, bytes) else str(value).encode("utf-8")
        parts.append(struct.pack("<I", len(raw)) + raw)
    return b"".join(parts)


def _json_default(value: Any) -> Any:
    """What orjson cannot write natively: non-contiguous arrays and NumPy scalars."""
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def json_bytes(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON, NumPy arrays included (written directly by orjson, float32
    as its shortest round-tripping decimal): 7 us for a 384-float embedding where ``tolist`` then
    ``json.dumps`` took 170 us. NaN and infinity become ``null``."""
    return orjson.dumps(value, default=_json_default, option=orjson.OPT_SERIALIZE_NUMPY)


class JSONResponse(Response):
    """A JSON response written with :func:`json_bytes`."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return json_bytes(content)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def _read_body(request: Request, limit: int) -> bytes:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise RequestError(413, f"request body of {int(length)} bytes is over the limit of {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(413, f"request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(
    predictor: Predictor | Translator,
    name: str,
    max_batch: int = 32,
    max_delay_ms: float = 5.0,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_request_rows: int = DEFAULT_MAX_REQUEST_ROWS,
    generation_slots: int = DEFAULT_GENERATION_SLOTS,
) -> Starlette:
    """The ASGI application serving ``predictor`` as model ``name`` (see the module docstring).

    Args:
        predictor: a loaded :class:`ptmkit_export.Predictor`, or a :class:`ptmkit_export.Translator`
            (:class:`TranslationService`).
        name: the model name in URLs.
        max_batch: most rows per model call (>= 1; 1 turns dynamic batching off).
        max_delay_ms: longest wait, in milliseconds, for requests on their way to join a batch
            (see :class:`ptmkit_export.batching.DynamicBatcher`).
        max_body_bytes: larger request bodies get 413.
        max_request_rows: more rows (texts) in one request get 400.
        generation_slots: generations (generate extension, decoder exports) that run at once,
            each in its own thread (:class:`ptmkit_export.generation_slots.GenerationSlots`).

    Returns:
        A Starlette app; ``app.state.service`` (:class:`ModelService`), ``app.state.metrics``
        (:class:`ptmkit_export.metrics.ServerMetrics`) and ``app.state.batcher`` are its parts;
        ``app.state.serving`` (:class:`Serving`) holds them for the route handlers.
        The batcher starts and stops with the app's lifespan (uvicorn runs it).
    """
    if isinstance(predictor, Translator):
        service: ModelService = TranslationService(predictor, name, max_request_rows)
    else:
        service = ModelService(predictor, name, max_request_rows=max_request_rows)
    predictor.batch_size = max(predictor.batch_size, max_batch)  # one batch, one ONNX Runtime call
    metrics = ServerMetrics(name)
    # inline_lone=False: the model (tokenization included) always runs in the batcher's worker
    # thread, never on the event loop, so that a long request cannot delay the others.
    batcher = DynamicBatcher(service.run_batch, max_batch=max_batch, max_delay_ms=max_delay_ms, on_batch=metrics.batch, inline_lone=False)
    app = Starlette(routes=_routes(), lifespan=_lifespan, exception_handlers={HTTPException: _http_error})
    app.state.service, app.state.metrics, app.state.batcher = service, metrics, batcher
    app.state.serving = Serving(service, batcher, metrics, max_body_bytes, GenerationSlots(generation_slots, metrics.generation))
    return app


class Serving:
    """What the route handlers of :func:`create_app` share, as ``app.state.serving``.

    Holds the :class:`ModelService`, its :class:`ptmkit_export.batching.DynamicBatcher` and
    :class:`ptmkit_export.metrics.ServerMetrics`, the request body limit (bytes), the
    :class:`ptmkit_export.generation_slots.GenerationSlots` of a decoder export, and ``ready``:
    true between the app's lifespan start and stop.
    """

    def __init__(
        self, service: ModelService, batcher: DynamicBatcher, metrics: ServerMetrics, max_body_bytes: int, generations: GenerationSlots | None = None
    ) -> None:
        self.service = service
        self.name = service.name
        self.batcher = batcher
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.generations = generations or GenerationSlots(DEFAULT_GENERATION_SLOTS, metrics.generation)
        self.ready = False

    def check_model(self, request: Request) -> None:
        """``RequestError`` 404 when the path's model name or version is not this server's."""
        if request.path_params["name"] != self.name:
            raise RequestError(404, f"unknown model {request.path_params['name']!r}; this server has {self.name!r}")
        version = request.path_params.get("version")
        if version is not None and version != VERSION:
            raise RequestError(404, f"model {self.name!r} has no version {version!r}; it has {VERSION!r}")

    async def answer(self, request: Request, endpoint: str, decode: Callable[[bytes], Prepared]) -> Response:
        """Read the body, ``decode`` it, run it in a batch and encode the response; count it in the metrics.

        Every failure is a one-line JSON error: the :class:`RequestError`'s status, 503 once the
        batcher is closed, 500 for a bug.
        """
        arrived = time.perf_counter()
        self.metrics.started()
        status = 500
        try:
            with self.batcher.arriving():  # until queued: the batcher may wait for it to join a batch
                body = await _read_body(request, self.max_body_bytes)
                # Decoding costs about the body's size: a large body is decoded in a thread, so
                # that the loop goes on answering (health probes, other requests) meanwhile.
                if len(body) <= INLINE_DECODE_BYTES:
                    kind, payload, rows, finish = decode(body)
                else:
                    kind, payload, rows, finish = await run_in_threadpool(decode, body)
            result = await self.run(kind, payload, rows, arrived)
            if sum(array.size for array in result.values()) <= INLINE_ENCODE_ELEMENTS:
                response = finish(result)
            else:
                response = await run_in_threadpool(finish, result)
            status = response.status_code
            return response
        except RequestError as error:
            status = error.status
            return _error(error.status, str(error))
        except BatcherClosed as error:
            status = 503
            return _error(503, str(error))
        except Exception as error:  # a bug: still one JSON line, and the server goes on
            status = 500
            return _error(500, f"internal error: {type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}")
        finally:
            self.metrics.finished(endpoint, status, time.perf_counter() - arrived)

    async def run(self, kind: Hashable, payload: Any, rows: int, arrived: float) -> dict[str, np.ndarray]:
        """The batcher's result for one request; ONNX Runtime refusing its tensors is a 400."""
        try:
            return await self.batcher.submit(kind, payload, rows, arrived)
        except BatcherClosed:
            raise
        except Exception as error:  # ONNX Runtime refused this request's tensors
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise RequestError(400, f"inference failed on this request: {first}") from None


    async def generate(self, request: Request, stream: bool) -> Response:
        """Answer a generate extension request: ``{"model_name", "model_version", "text_output"}``
        once the text is whole, or (``stream``) server-sent events, one per decoded piece, each
        ``data: {"model_name", "model_version", "text_output": piece}``, as Triton's
        ``generate_stream`` sends them; an error after the first event is a last ``data:
        {"error": ...}`` event. A bad request is a one-line JSON 400 before any event.
        """
        endpoint = "generate_stream" if stream else "generate"
        arrived = time.perf_counter()
        self.metrics.started()
        status, streaming = 500, False
        try:
            self.check_model(request)
            body = await _read_body(request, self.max_body_bytes)
            if self.service.is_translator:  # one translation, through the batcher: one piece
                kind, text = self.service.decode_generate(body)  # type: ignore[misc]
                pieces = _one_piece(str((await self.run(kind, [text], 1, arrived))["translation"][0]))
            else:  # Tokenizing the prompt costs about the body's size: a large one is read in a thread.
                pieces = self._pieces(body) if len(body) <= INLINE_DECODE_BYTES else await run_in_threadpool(self._pieces, body)
            if stream:
                status, streaming = 200, True
                outcome = [499]  # nginx's "client closed request", unless the stream ends

                def closed() -> None:
                    self.metrics.finished(endpoint, outcome[0], time.perf_counter() - arrived)

                return _EventStream(self._events(pieces, outcome), closed)
            text = "".join([piece async for piece in pieces])
            status = 200
            return JSONResponse({"model_name": self.name, "model_version": VERSION, GENERATE_OUTPUT: text})
        except RequestError as error:
            status = error.status
            return _error(error.status, str(error))
        except Exception as error:  # a bug: still one JSON line, and the server goes on
            return _error(500, f"internal error: {_first_line(error)}")
        finally:
            if not streaming:
                self.metrics.finished(endpoint, status, time.perf_counter() - arrived)

    def _pieces(self, body: bytes) -> AsyncIterator[str]:
        """The generation's text pieces (not started yet); RequestError 400 for a bad body or prompt."""
        decoded = self.service.decode_generate(body)
        predictor = self.service.predictor
        decoder = predictor.new_decoder()  # a cache of its own: several generations run at once
        try:  # checks the prompt at once; decoding starts when the slot's thread reads it
            settings = dataclasses.asdict(decoded.settings)
            generation = predictor.generate_stream(decoded.prompt, **settings, stop=decoded.stop, truncate=decoded.truncate, decoder=decoder)
        except (ValueError, TypeError) as error:  # the prompt: too long for the model's positions
            message = _first_line(error, with_type=False).replace("--truncate left", "parameters.truncate 'left'")
            raise RequestError(400, f"'{GENERATE_INPUT}': {message}") from None
        return self.generations.pieces(generation, lambda: decoder.cached_steps + decoder.full_steps)

    async def _events(self, pieces: AsyncIterator[str], outcome: list[int]) -> AsyncIterator[bytes]:
        """The stream's events; ``outcome[0]`` becomes 200 at its end, 500 after an error."""
        try:
            async for piece in pieces:
                yield b"data: " + json_bytes({"model_name": self.name, "model_version": VERSION, GENERATE_OUTPUT: piece}) + b"\n\n"
            outcome[0] = 200
        except Exception as error:  # the headers are gone: the error is the stream's last event
            outcome[0] = 500
            yield b"data: " + json_bytes({"error": f"internal error: {_first_line(error)}"}) + b"\n\n"
        finally:
            await pieces.aclose()  # type: ignore[attr-defined]  # stops the generation's thread


async def _one_piece(text: str) -> AsyncIterator[str]:
    yield text


class _EventStream(StreamingResponse):
    """Server-sent events (``text/event-stream``) that close their source when the client goes
    away: Starlette cancels the stream, and the source's ``finally`` then runs at once rather
    than when the garbage collector finds it; ``closed()`` is called once the stream is over.
    A stream the client left counts as status 499 in the metrics."""

    media_type = "text/event-stream"

    def __init__(self, events: AsyncIterator[bytes], closed: Callable[[], None]) -> None:
        super().__init__(events, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self.closed = closed

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            try:
                await self.body_iterator.aclose()  # type: ignore[attr-defined]
            finally:
                self.closed()


def _first_line(error: BaseException, with_type: bool = True) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}" if with_type else text or type(error).__name__


def _serving(request: Request) -> Serving:
    serving: Serving = request.app.state.serving
    return serving


@asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    serving: Serving = app.state.serving
    serving.batcher.start()
    serving.ready = True
    try:
        yield
    finally:
        serving.ready = False
        await serving.batcher.close()  # uvicorn has already answered the requests in flight


async def _live(request: Request) -> Response:
    return JSONResponse({"live": True})


async def _ready(request: Request) -> Response:
    ready = _serving(request).ready
    return JSONResponse({"ready": ready}, status_code=200 if ready else 503)


async def _server_metadata(request: Request) -> Response:
    service = _serving(request).service
    extensions = ["binary_tensor_data", *(["generate"] if service.is_generator or service.is_translator else [])]
    return JSONResponse({"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": extensions})


async def _model_metadata(request: Request) -> Response:
    serving = _serving(request)
    try:
        serving.check_model(request)
    except RequestError as error:
        return _error(error.status, str(error))
    return JSONResponse(serving.service.metadata())


async def _model_ready(request: Request) -> Response:
    serving = _serving(request)
    try:
        serving.check_model(request)
    except RequestError as error:
        return _error(error.status, str(error))
    return JSONResponse({"name": serving.name, "ready": serving.ready}, status_code=200 if serving.ready else 503)


async def _infer(request: Request) -> Response:
    serving = _serving(request)
    service = serving.service

    def decode(body: bytes) -> Prepared:
        serving.check_model(request)
        decoded = service.decode_infer(body, request.headers.get("inference-header-content-length"))
        return decoded.kind, decoded.payload, decoded.rows, lambda result: service.encode_infer(result, decoded.outputs, decoded.request_id)

    return await serving.answer(request, "infer", decode)


async def _predict(request: Request) -> Response:
    serving = _serving(request)
    service = serving.service

    def decode(body: bytes) -> Prepared:
        texts = service.decode_predict(body)
        return TEXT_INPUT, texts, len(texts), lambda result: JSONResponse(service.encode_predict(result))

    return await serving.answer(request, "predict", decode)


async def _generate(request: Request) -> Response:
    return await _serving(request).generate(request, stream=False)


async def _generate_stream(request: Request) -> Response:
    return await _serving(request).generate(request, stream=True)


async def _prometheus(request: Request) -> Response:
    return Response(_serving(request).metrics.render(), media_type=CONTENT_TYPE)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    messages = {404: f"no such path {request.url.path}", 405: f"method {request.method} not allowed on {request.url.path}"}
    return _error(exc.status_code, messages.get(exc.status_code, str(exc.detail)))


def _routes() -> list[Route]:
    return [
        Route("/v2/health/live", _live, methods=["GET"]),
        Route("/v2/health/ready", _ready, methods=["GET"]),
        Route("/v2", _server_metadata, methods=["GET"]),
        Route("/v2/models/{name}", _model_metadata, methods=["GET"]),
        Route("/v2/models/{name}/versions/{version}", _model_metadata, methods=["GET"]),
        Route("/v2/models/{name}/ready", _model_ready, methods=["GET"]),
        Route("/v2/models/{name}/versions/{version}/ready", _model_ready, methods=["GET"]),
        Route("/v2/models/{name}/infer", _infer, methods=["POST"]),
        Route("/v2/models/{name}/versions/{version}/infer", _infer, methods=["POST"]),
        Route("/v2/models/{name}/generate", _generate, methods=["POST"]),
        Route("/v2/models/{name}/versions/{version}/generate", _generate, methods=["POST"]),
        Route("/v2/models/{name}/generate_stream", _generate_stream, methods=["POST"]),
        Route("/v2/models/{name}/versions/{version}/generate_stream", _generate_stream, methods=["POST"]),
        Route("/v1/predict", _predict, methods=["POST"]),
        Route("/metrics", _prometheus, methods=["GET"]),
    ]


def uvicorn_config(app: Starlette, graceful_timeout_s: float = 30.0) -> uvicorn.Config:
    """The uvicorn configuration :func:`serve` runs ``app`` with: no access log, lifespan on,
    ``graceful_timeout_s`` (seconds) for requests in flight at shutdown, 30 s keep-alive, no
    WebSockets. uvicorn parses HTTP with httptools when it is installed, else with h11."""
    return uvicorn.Config(
        app,
        ws="none",
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=max(1, math.ceil(graceful_timeout_s)),
        timeout_keep_alive=30,
    )


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``port=0``: a free port); IPv4 or IPv6.

    Raises:
        OSError: the address cannot be resolved or bound (e.g. the port is taken).
    """
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def load_model(export_dir: str | os.PathLike[str], variant: str | None, threads: int | None, device: str, task: str | None) -> Predictor | Translator:
    """The export's :class:`ptmkit_export.Predictor`, or its :class:`ptmkit_export.Translator` for
    a translation export.

    Raises:
        ExportDirError: a missing or broken export. ValueError: a ``task`` for a translation export.
    """
    if read_manifest(export_dir).get("task") != TRANSLATION_TASK:
        return Predictor(export_dir, variant=variant, threads=threads, device=device, task=task)
    if task is not None:
        raise ValueError(f"{export_dir}: a translation export has no tasks; drop --task {task}")
    return Translator(export_dir, variant=variant, threads=threads, providers=device_providers(device))


def serve(
    export_dir: str | os.PathLike[str],
    name: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_batch: int = 32,
    max_delay_ms: float = 5.0,
    variant: str | None = None,
    threads: int | None = None,
    device: str = "cpu",
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    graceful_timeout_s: float = 30.0,
    log: Callable[[str], None] | None = None,
    generation_slots: int = DEFAULT_GENERATION_SLOTS,
    task: str | None = None,
) -> None:
    """Serve ``export_dir`` until SIGTERM or SIGINT; blocks.

    Binds to loopback unless ``host`` says otherwise (``0.0.0.0`` for every interface). On SIGTERM
    the server stops accepting connections, answers the requests in flight (at most
    ``graceful_timeout_s`` seconds), then returns normally.

    Args:
        export_dir: an export directory (manifest.json, tokenizer.json, model files).
        name: the model name in URLs (default: :func:`default_name`).
        host, port: where to listen; ``port=0`` picks a free port (the ``log`` line says which).
        max_batch, max_delay_ms: dynamic batching (see :func:`create_app`).
        variant, threads, device: passed to :class:`ptmkit_export.Predictor`.
        max_body_bytes: larger request bodies get 413.
        graceful_timeout_s: longest wait for requests in flight at shutdown, in seconds.
        log: called with one line once the server listens (default: print to stdout, flushed).
        generation_slots: generations (decoder exports) that run at once (see :func:`create_app`).
        task: a multi-task export's head to serve (default: its first task); the KServe v2
            tensor path returns every task's ``logits_NAME`` output all the same.

    Raises:
        ExportDirError: the export directory is missing or broken.
        ValueError: an invalid name, ``max_batch < 1``, ``max_delay_ms < 0``, ``device`` or
            ``generation_slots < 1``.
        OSError: ``host:port`` cannot be bound.
    """
    predictor = load_model(export_dir, variant, threads, device, task)
    name = name or default_name(export_dir)
    app = create_app(predictor, name, max_batch=max_batch, max_delay_ms=max_delay_ms, max_body_bytes=max_body_bytes, generation_slots=generation_slots)
    sock = bind(host, port)
    bound = sock.getsockname()
    url_host = f"[{bound[0]}]" if sock.family == socket.AF_INET6 else bound[0]
    server = uvicorn.Server(uvicorn_config(app, graceful_timeout_s))
    task = predictor.manifest.get("task", "") + (f" {predictor.task}" if predictor.task is not None else "")
    line = (
        f"serving {name} ({task}, {predictor.variant}, {', '.join(predictor.session.get_providers())}) on "
        f"http://{url_host}:{bound[1]}  max batch {max_batch}, max delay {max_delay_ms:g} ms"
    )
    say = log or (lambda text: print(text, flush=True))
    say(line)
    # uvicorn re-raises SIGTERM/SIGINT once it has drained; with a no-op handler in place, that
    # re-raise lands here and serve() returns normally (exit status 0 after a graceful stop).
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for number in (signal.SIGINT, signal.SIGTERM):
            previous[number] = signal.signal(number, lambda *_: None)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        for number, handler in previous.items():
            signal.signal(number, handler)
    say(f"stopped serving {name}")

