"""`ptmkit serve` as a real process: loopback by default, no TensorFlow, SIGTERM drains requests in flight."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
from export_fixtures import EXPORT_SRC, REPO, TEXTS, TinyExport
from serve_fixtures import request

from ptmkit_export import Predictor

# The model call is slowed to 1.5 s so that a request is surely in flight when SIGTERM comes.
SCRIPT = """
import json, sys, time
from ptmkit_export import server
original = server.ModelService.run_batch
def slow(self, kind, payloads):
    time.sleep(1.5)
    return original(self, kind, payloads)
server.ModelService.run_batch = slow
from ptmkit.cli import main
code = main(["serve", sys.argv[1], "--port", "0", "--name", "tiny", "--threads", "1", "--variant", "fp32"])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras", "keras_hub", "tf2onnx"))
print(json.dumps({"code": code, "heavy": heavy}), flush=True)
sys.exit(code)
"""


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "plugins"), str(EXPORT_SRC), *filter(None, [env.get("PYTHONPATH")])])
    return env


def test_sigterm_drains_in_flight_requests(tiny_export: TinyExport) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(tiny_export.directory)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(),
    )
    watchdog = threading.Timer(120, process.kill)
    watchdog.start()
    try:
        assert process.stderr is not None
        lines = []
        for line in process.stderr:
            lines.append(line)
            if line.startswith("serving "):
                break
        match = re.search(r"on http://(127\.0\.0\.1):(\d+) ", lines[-1] if lines else "")
        assert match, "".join(lines)[-2000:]  # bound to loopback, as by default
        url = f"{match.group(1)}:{match.group(2)}"
        assert request(url, "GET", "/v2/health/ready")[0] == 200

        answers: list[tuple[int, bytes]] = []
        client = threading.Thread(target=lambda: answers.append(request(url, "POST", "/v1/predict", {"texts": TEXTS})[::2]))
        client.start()
        time.sleep(0.7)  # the request is inside its 1.5 s model call
        process.send_signal(signal.SIGTERM)
        client.join(timeout=30)
        assert answers and answers[0][0] == 200, answers
        got = [p["label"] for p in json.loads(answers[0][1])["predictions"]]
        assert got == [p.label for p in Predictor(tiny_export.directory, variant="fp32").predict(TEXTS)]
        out, err = process.communicate(timeout=60)
    finally:
        watchdog.cancel()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err[-2000:]
    report = json.loads(out.strip().splitlines()[-1])
    assert report == {"code": 0, "heavy": []}  # the server process never loaded TensorFlow or Keras
    try:
        request(url, "GET", "/v2/health/live")
        raise AssertionError("the server still answers after SIGTERM")
    except OSError:
        pass


def test_serve_errors_are_one_line_exit_2(tmp_path, tiny_export: TinyExport) -> None:
    from ptmkit.cli import main
    from ptmkit_export.server import bind

    assert main(["serve", str(tmp_path / "missing")]) == 2
    taken = bind("127.0.0.1", 0)
    try:
        port = taken.getsockname()[1]
        assert main(["serve", str(tiny_export.directory), "--port", str(port), "--variant", "fp32"]) == 2
    finally:
        taken.close()
    assert main(["serve", str(tiny_export.directory), "--name", "bad/name"]) == 2
    assert main(["serve", str(tiny_export.directory), "--device", "tpu"]) == 2


def test_ptmkit_serve_script_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ptmkit_export.serve_cli", "--help"], capture_output=True, text=True, env=environment(), timeout=60, check=False
    )
    assert result.returncode == 0 and "--max-delay-ms" in result.stdout and "127.0.0.1" in result.stdout
    np.testing.assert_equal(result.stderr, "")


def entry_point() -> str:
    """The ``ptmkit-serve`` script's target in export/pyproject.toml, as ``module:function``."""
    import tomllib

    return tomllib.loads((EXPORT_SRC / "pyproject.toml").read_text())["project"]["scripts"]["ptmkit-serve"]


# Runs a command as if the `serve` extra were not installed: importing starlette fails.
WITHOUT_STARLETTE = """
import sys
sys.modules["starlette"] = None
{call}
"""


def test_missing_serve_extra_is_one_line_exit_2(tiny_export: TinyExport) -> None:
    module, function = entry_point().split(":")
    calls = {
        "ptmkit-serve": f"from {module} import {function} as main; sys.exit(main([sys.argv[1]]))",
        "ptmkit serve": "from ptmkit.cli import main; sys.exit(main(['serve', sys.argv[1]]))",
    }
    for command, call in calls.items():
        result = subprocess.run(
            [sys.executable, "-c", WITHOUT_STARLETTE.format(call=call), str(tiny_export.directory)],
            capture_output=True, text=True, env={**environment(), "TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=120, check=False,
        )
        lines = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("error") or "Traceback" in line]
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert lines == ["error: ptmkit serving needs the 'serve' extra (missing module 'starlette'): pip install 'ptmkit-export[serve]' (from a ptmkit checkout: pip install -e './export[serve]')"], (command, result.stderr)
        assert "Traceback" not in result.stderr, command
