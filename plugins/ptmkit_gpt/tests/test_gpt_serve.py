"""``ptmkit serve`` on a gpt export: the Open Inference Protocol's generate extension
(``/generate``, ``/generate_stream``) over real HTTP, against ``Predictor.generate``."""

from __future__ import annotations

import http.client
import json
import re
import time
from collections.abc import Iterator

import numpy as np
import pytest
from serve_fixtures import ServerThread

from ptmkit_export import Predictor
from ptmkit_export.decoding import text_chunks
from ptmkit_export.server import create_app

NAME = "tiny-gpt"
PROMPTS = ["the history of", "", "in 1990 the city", "ü and ß in a prompt"]
#: Request parameters -> the same settings as Predictor.generate's keyword arguments.
PARAMETERS = [
    {"max_new_tokens": 12},
    {"max_new_tokens": 16, "strategy": "sample", "temperature": 1.3, "top_k": 50, "top_p": 0.95, "seed": 7},
    {"max_new_tokens": 10, "strategy": "beam", "num_beams": 3},
    {"max_new_tokens": 24, "strategy": "sample", "temperature": 2.0, "seed": 3, "stop": [" the", "."]},
]


@pytest.fixture(scope="module")
def served(gpt_export) -> Iterator[tuple[ServerThread, Predictor]]:
    """A server on a free port with one generation slot, and its own predictor (for the reference texts)."""
    _, out, _, _ = gpt_export
    predictor = Predictor(out, variant="fp32", threads=1)
    with ServerThread(create_app(Predictor(out, variant="fp32", threads=1), NAME, generation_slots=1)) as server:
        yield server, predictor


def _events(body: bytes) -> list[dict]:
    """The JSON payloads of a text/event-stream body's ``data:`` events."""
    assert body.endswith(b"\n\n")
    return [json.loads(event.removeprefix(b"data: ")) for event in body[:-2].split(b"\n\n")]


def _metric(server: ServerThread, name: str) -> float:
    text = server.request("GET", "/metrics")[2].decode()
    return float(re.search(rf"^{re.escape(name)} (\S+)$", text, re.M).group(1))  # type: ignore[union-attr]


@pytest.mark.parametrize("parameters", PARAMETERS)
def test_generate_and_stream_give_predictor_generate_text(served, parameters) -> None:
    server, predictor = served
    kwargs = dict(parameters)
    for prompt in PROMPTS:
        expected = predictor.generate([prompt], **kwargs)[0]
        body = {"text_input": prompt, "parameters": parameters}
        status, headers, answer = server.request("POST", f"/v2/models/{NAME}/generate", body)
        assert status == 200, answer
        assert json.loads(answer) == {"model_name": NAME, "model_version": "1", "text_output": expected}
        status, headers, answer = server.request("POST", f"/v2/models/{NAME}/generate_stream", body)
        assert status == 200 and headers["content-type"].startswith("text/event-stream")
        events = _events(answer)
        assert {(e["model_name"], e["model_version"]) for e in events} == {(NAME, "1")}
        assert "".join(e["text_output"] for e in events) == expected
        if parameters.get("strategy") != "beam" and len(expected) > 8:
            assert len(events) > 2  # a piece per token or so, not one at the end


@pytest.mark.parametrize("parameters", PARAMETERS)
def test_predictor_generate_stream_pieces_join_to_generate(served, parameters) -> None:
    """The lean runtime's stream: one piece per model call (greedy, sampling), joined the text of
    ``generate``; a closed stream makes no further model call."""
    _, predictor = served
    for prompt in PROMPTS:
        decoder = predictor.new_decoder()
        pieces = list(predictor.generate_stream(prompt, **parameters, decoder=decoder))
        assert "".join(pieces) == predictor.generate([prompt], **parameters)[0]
        if parameters.get("strategy") != "beam":
            assert decoder.cached_steps + decoder.full_steps in (len(pieces), len(pieces) - 1)  # + the held-back end
    decoder = predictor.new_decoder()
    stream = predictor.generate_stream("the history of", max_new_tokens=30, decoder=decoder)
    next(stream), next(stream)
    stream.close()
    assert decoder.cached_steps + decoder.full_steps == 2


def test_text_chunks_hold_back_partial_characters_and_stop_strings() -> None:
    """Bytes as tokens: a 3-byte character arrives in 3 steps; a stop string's beginning is
    held until the next token says whether it completes it."""

    def decode(ids: list[int]) -> str:
        return bytes(ids).decode("utf-8", errors="replace")

    euro = list("€".encode())
    assert list(text_chunks([[ord("a")], [euro[0]], [euro[1]], [euro[2]], [ord("b")]], decode)) == [
        "a",
        "",
        "",
        "€",
        "b",
    ]
    steps = [[ord(c)] for c in "ab\nc\n\nd"]
    pieces = list(text_chunks(steps, decode, ["\n\n"]))
    assert "".join(pieces) == "ab\nc" and pieces[:4] == ["a", "b", "", "\nc"]
    assert (
        "".join(text_chunks([[ord(c)] for c in "x\n"], decode, ["\n\n"])) == "x\n"
    )  # held back, then flushed at the end


def _open_stream(server: ServerThread, body: dict) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    connection = http.client.HTTPConnection(server.host, server.port, timeout=30)
    connection.request(
        "POST", f"/v2/models/{NAME}/generate_stream", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    return connection, connection.getresponse()


def test_client_that_disconnects_mid_stream_frees_the_slot(served, monkeypatch) -> None:
    """Generation slowed to 50 ms a token: a client reads two events and hangs up; the generation
    stops within a step or two (counted model calls), the one slot frees, and the next request is
    answered in full."""
    server, predictor = served
    service_predictor = server.app.state.service.predictor
    made = service_predictor.new_decoder

    def slow_decoder():
        decoder = made()
        fast = decoder.next_logits

        def next_logits(token_ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
            time.sleep(0.05)
            logits = fast(token_ids, mask)
            logits[:, predictor.manifest["decoder"]["eos_token_id"]] = -np.inf  # never ends early
            return logits

        decoder.next_logits = next_logits
        return decoder

    monkeypatch.setattr(service_predictor, "new_decoder", slow_decoder)
    slots = server.app.state.serving.generations
    body = {"text_input": "the history of", "parameters": {"max_new_tokens": 50}}
    steps_before = _metric(server, f'ptmkit_generation_steps_total{{model="{NAME}"}}')
    cancelled_before = _metric(server, f'ptmkit_generations_total{{model="{NAME}",outcome="cancelled"}}')
    connection, response = _open_stream(server, body)
    assert response.status == 200
    assert response.readline().startswith(b"data: ") and response.readline() == b"\n"
    assert response.readline().startswith(b"data: ")
    assert slots.running == 1
    connection.sock.close()  # the client goes away mid-stream
    connection.close()
    deadline = time.monotonic() + 10
    while slots.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert slots.running == 0, "the generation thread did not stop"
    steps = _metric(server, f'ptmkit_generation_steps_total{{model="{NAME}"}}') - steps_before
    assert 2 <= steps <= 20  # of the 50 asked for: it stopped soon after the client left
    assert _metric(server, f'ptmkit_generations_total{{model="{NAME}",outcome="cancelled"}}') == cancelled_before + 1
    assert _metric(server, f'ptmkit_requests_total{{model="{NAME}",endpoint="generate_stream",code="499"}}') == 1
    assert _metric(server, f"ptmkit_requests_in_flight{{model=\"{NAME}\"}}") == 0  # the stream counted as answered
    # The one slot is free: the next request is answered in full (it would wait for the slot otherwise).
    monkeypatch.undo()
    status, _, answer = server.request(
        "POST", f"/v2/models/{NAME}/generate", {"text_input": "the history of", "parameters": {"max_new_tokens": 5}}
    )
    assert (
        status == 200
        and json.loads(answer)["text_output"] == predictor.generate(["the history of"], max_new_tokens=5)[0]
    )
    assert _metric(server, f'ptmkit_generations_total{{model="{NAME}",outcome="completed"}}') >= 1


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (b"{not json", "malformed JSON"),
        ({"parameters": {}}, "'text_input' must be a string"),
        ({"text_input": ["a", "b"]}, "'text_input' must be a string"),
        ({"text_input": "a", "parameters": {"max_new_tokens": 0}}, "'parameters.max_new_tokens' 0"),
        ({"text_input": "a", "parameters": {"max_new_tokens": "5"}}, "'parameters.max_new_tokens' must be an integer"),
        ({"text_input": "a", "parameters": {"top_p": 1.5}}, "'parameters.top_p' 1.5"),
        ({"text_input": "a", "parameters": {"top_k": -1}}, "'parameters.top_k' -1"),
        ({"text_input": "a", "parameters": {"strategy": "nucleus"}}, "'parameters.strategy' 'nucleus'"),
        ({"text_input": "a", "parameters": {"temperature": True}}, "'parameters.temperature' must be a number"),
        ({"text_input": "a", "parameters": {"stop": [1]}}, "'parameters.stop' must be a string or a list"),
        ({"text_input": "a", "parameters": {"beams": 2}}, "unknown parameter 'parameters.beams'"),
        ({"text_input": "a", "prompt": "b"}, "unknown key 'prompt'"),
        ({"text_input": "word " * 200}, "'text_input': prompt 1"),
    ],
)
@pytest.mark.parametrize("endpoint", ["generate", "generate_stream"])
def test_bad_requests_are_one_line_400s_naming_the_key(served, body, named: str, endpoint: str) -> None:
    server, _ = served
    status, headers, answer = server.request("POST", f"/v2/models/{NAME}/{endpoint}", body)
    assert status == 400 and headers["content-type"] == "application/json"
    error = json.loads(answer)["error"]
    assert named in error and "\n" not in error


def test_infer_and_predict_on_a_decoder_export_point_to_generate(served) -> None:
    server, _ = served
    for path, body in [
        (f"/v2/models/{NAME}/infer", {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["a"]}]}),
        ("/v1/predict", {"texts": ["a"]}),
    ]:
        status, _, answer = server.request("POST", path, body)
        assert status == 400 and f"POST /v2/models/{NAME}/generate" in json.loads(answer)["error"]
    status, _, answer = server.request("POST", "/v2/models/other/generate", {"text_input": "a"})
    assert status == 404 and "unknown model 'other'" in json.loads(answer)["error"]
    metadata = json.loads(server.request("GET", f"/v2/models/{NAME}")[2])
    assert metadata["inputs"] == [{"name": "text_input", "datatype": "BYTES", "shape": [1]}]
    assert metadata["outputs"] == [{"name": "text_output", "datatype": "BYTES", "shape": [1]}]
    assert "generate" in json.loads(server.request("GET", "/v2")[2])["extensions"]
