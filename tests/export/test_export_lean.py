"""The lean runtime must run without TensorFlow, Keras or ptmkit: checked in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from export_fixtures import EXPORT_SRC, TinyExport

SCRIPT = """
import json, sys
import ptmkit_export
from ptmkit_export import Predictor
from ptmkit_export import benchmark, errors, manifest, predictor, quantize  # every module
import onnxruntime.quantization  # what quantize_int8 imports lazily
p = Predictor(sys.argv[1])
out = [x.to_dict() for x in p.predict(["a gorgeous , witty movie .", "tedious ."])]
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras", "keras_hub", "ptmkit", "tf2onnx"))
print(json.dumps({"variant": p.variant, "predictions": out, "heavy": heavy}))
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
    assert len(report["predictions"]) == 2
    assert all(abs(sum(p["probabilities"].values()) - 1) < 1e-6 for p in report["predictions"])
