"""The lean runtime must run without TensorFlow, Keras or ptmkit: checked in a fresh interpreter, in the
wheel's declared requirements, and in a new virtual environment that has only ptmkit-export[serve]."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

from export_fixtures import EXPORT_SRC, TinyExport
from serve_fixtures import request

SCRIPT = """
import json, sys, tempfile, warnings
import ptmkit_export
from ptmkit_export import Predictor
from ptmkit_export import bag_of_rows, batching, benchmark, errors, manifest, metrics, predictor, quantize, server, tokenizer_graph, triton  # every module
import onnxruntime.quantization  # what quantize_int8 imports lazily
p = Predictor(sys.argv[1])
out = [x.to_dict() for x in p.predict(["a gorgeous , witty movie .", "tedious ."])]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    on_cuda = Predictor(sys.argv[1], device="cuda")  # CPU-only onnxruntime here: falls back, with a warning
app = server.create_app(p, "tiny")  # the server's app, and one batch through it
result = app.state.service.run_batch("text", [["a gorgeous , witty movie ."], ["tedious ."]])
triton.write_triton_repository(sys.argv[1], tempfile.mkdtemp(), name="tiny")
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras", "keras_hub", "ptmkit", "tf2onnx", "torch"))
print(json.dumps({"variant": p.variant, "predictions": out, "heavy": heavy, "providers": on_cuda.session.get_providers(),
                  "warnings": [str(w.message) for w in caught], "served": [r["labels"].tolist() for r in result]}))
"""


def test_runs_without_tensorflow_or_keras(tiny_export: TinyExport) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(EXPORT_SRC), *filter(None, [env.get("PYTHONPATH")])])
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tiny_export.directory)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["heavy"] == []
    assert report["variant"] == "int8"
    assert report["providers"] == ["CPUExecutionProvider"]
    assert any("no CUDAExecutionProvider" in w for w in report["warnings"])
    assert report["served"] == [[p["label"]] for p in report["predictions"]]
    assert len(report["predictions"]) == 2
    assert all(abs(sum(p["probabilities"].values()) - 1) < 1e-6 for p in report["predictions"])


LEAN = {"onnxruntime", "onnx", "numpy", "tokenizers"}
SERVE = {"starlette", "uvicorn", "httptools", "uvloop", "orjson"}


def requirement_name(line: str) -> str:
    return re.split(r"[ ;<>=!~\[]", line.strip(), maxsplit=1)[0].lower().replace("_", "-")


def build_wheel(tmp_path: Path) -> Path:
    """``pip wheel --no-deps`` of a copy of export/ (so the source tree gets no build/ folder)."""
    source = tmp_path / "src"
    shutil.copytree(EXPORT_SRC, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"), str(source)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("ptmkit_export-*.whl")
    return wheel


def test_wheel_declares_only_lean_requirements(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(metadata_name).decode()
        (entry_points_name,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        entry_points = archive.read(entry_points_name).decode()
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    base = {requirement_name(r) for r in requires if "extra ==" not in r}
    serve = {requirement_name(r) for r in requires if 'extra == "serve"' in r}
    tokenizer = {requirement_name(r) for r in requires if 'extra == "tokenizer"' in r}
    assert base == LEAN, requires
    assert serve == SERVE, requires
    assert tokenizer == {"onnxruntime-extensions"}, requires  # optional: only the single-file models need it
    heavy = {"tensorflow", "tensorflow-cpu", "keras", "keras-hub", "tf2onnx", "torch", "ptmkit"}
    assert not heavy & {requirement_name(r) for r in requires}
    modules = {n.split("/")[1] for n in names if n.startswith("ptmkit_export/")}
    assert {"predictor.py", "server.py", "serve_cli.py", "batching.py", "metrics.py", "triton.py"} <= modules
    assert "ptmkit-serve = ptmkit_export.serve_cli:main" in entry_points  # imports no extra: says what to install


VENV_SCRIPT = """
import importlib.util, json, sys
from ptmkit_export import Predictor
absent = [m for m in ("tensorflow", "keras", "keras_hub", "ptmkit", "torch") if importlib.util.find_spec(m) is not None]
p = Predictor(sys.argv[1], variant="fp32")
print(json.dumps({"installed_heavy": absent, "logits": p.logits(["a gorgeous , witty movie ."]).tolist()}))
"""


def test_fresh_virtual_environment_serves_without_tensorflow(tmp_path: Path, tiny_export: TinyExport) -> None:
    """`pip install ptmkit-export[serve]` into a new venv (no system site-packages, ~1 min), then
    predict and serve from it: TensorFlow and Keras are not even installed there."""
    wheel = build_wheel(tmp_path)
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}  # nothing of this checkout
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120, env=env)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", f"{wheel}[serve]"],
        capture_output=True, text=True, timeout=600, check=False, env=env, cwd=tmp_path,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    result = subprocess.run(
        [str(python), "-c", VENV_SCRIPT, str(tiny_export.directory)], capture_output=True, text=True, env=env, timeout=120, check=False, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["installed_heavy"] == []
    from ptmkit_export import Predictor

    expected = Predictor(tiny_export.directory, variant="fp32").logits(["a gorgeous , witty movie ."])
    assert abs(report["logits"][0][0] - float(expected[0, 0])) < 1e-5

    server = subprocess.Popen(
        [str(venv / "bin" / "ptmkit-serve"), str(tiny_export.directory), "--port", "0", "--variant", "fp32"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        match = re.search(r"on http://127\.0\.0\.1:(\d+) ", line)
        assert match, line + (server.stderr.read() if server.poll() is not None and server.stderr else "")
        status, _, body = request(f"127.0.0.1:{match.group(1)}", "POST", "/v1/predict", {"texts": ["a gorgeous , witty movie ."]})
        assert status == 200, body
        probabilities = list(json.loads(body)["predictions"][0]["probabilities"].values())
        assert abs(sum(probabilities) - 1) < 1e-6
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0
    finally:
        if server.poll() is None:
            server.kill()


def test_manifest_activation_picks_softmax_or_sigmoid(tmp_path: Path, tiny_export: TinyExport) -> None:
    """A classifier's ``"activation"``: absent (exports before the field) or ``softmax``, the
    probabilities are the softmax of the logits; ``sigmoid`` (one-vs-all, e.g. fastText's
    ``-loss ova``), ``1 / (1 + exp(-logit))`` of each, in ``predict`` and in the server's
    ``probabilities``; the label is the largest either way. Another value is refused, naming
    the key."""
    import numpy as np
    import pytest

    from ptmkit_export import Predictor, server
    from ptmkit_export.errors import ExportDirError

    texts = ["a gorgeous , witty movie .", "tedious ."]
    directory = tmp_path / "export"
    shutil.copytree(tiny_export.directory, directory)
    original = json.loads((directory / "manifest.json").read_text())
    assert "activation" not in original
    found = {}
    for activation in (None, "softmax", "sigmoid"):
        manifest = original if activation is None else {**original, "activation": activation}
        (directory / "manifest.json").write_text(json.dumps(manifest))
        predictor = Predictor(directory, variant="fp32")
        logits = predictor.logits(texts).astype(np.float64)
        expected = 1 / (1 + np.exp(-logits)) if activation == "sigmoid" else np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        predictions = predictor.predict(texts)
        got = np.asarray([list(p.probabilities.values()) for p in predictions])
        np.testing.assert_allclose(got, expected, rtol=1e-6)
        assert [p.label for p in predictions] == [predictor.labels[i] for i in logits.argmax(axis=1)]
        served = server.create_app(predictor, "tiny").state.service.run_batch("text", [texts])[0]
        np.testing.assert_allclose(served["probabilities"], expected, rtol=1e-6)
        found[activation] = got
    assert abs(found["sigmoid"].sum(axis=1) - 1).max() > 1e-3 and np.allclose(found[None], found["softmax"])
    (directory / "manifest.json").write_text(json.dumps({**original, "activation": "tanh"}))
    with pytest.raises(ExportDirError, match=r"manifest.json: 'activation' must be one of 'softmax', 'sigmoid', got 'tanh'"):
        Predictor(directory, variant="fp32")
