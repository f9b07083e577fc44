"""The transformer family on Keras's JAX and torch backends with TensorFlow absent (a GPU machine
with JAX and no TensorFlow; torch, which trains this family ~1.4x faster than TensorFlow on a 2-core
AVX2 CPU): ``ptmkit train transformer`` trains (the same steps as on TensorFlow, fed by a
``PyDataset``) and checkpoints, and ``ptmkit export`` writes the ONNX encoder and decoder, whose greedy
translations the lean runtime reproduces from the weights trained there. Runs in a child process
whose every import of TensorFlow fails; each backend skipped where it is not installed."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from transformer_pairs import TINY_TRANSFORMER

ROOT = Path(__file__).resolve().parents[3]

#: The ptmkit CLI as on a machine without TensorFlow: importing it fails, as there.
NO_TENSORFLOW = """
import importlib.abc, importlib.machinery, os, sys
class NoTensorFlow(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            return importlib.machinery.ModuleSpec(name, self)  # found by find_spec (torch._dynamo asks, origin None), fails on import
        return None
    def create_module(self, spec):
        raise ModuleNotFoundError(f"No module named {spec.name!r} (this test blocks it)", name=spec.name)
    def exec_module(self, module):
        pass
sys.meta_path.insert(0, NoTensorFlow())
os.environ["KERAS_BACKEND"] = sys.argv.pop(1)
from ptmkit.testing import main
sys.exit(main(sys.argv[1:]))
"""


def _ptmkit_without_tensorflow(backend: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, KERAS_BACKEND=backend, JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "plugins"), str(ROOT / "export"), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", NO_TENSORFLOW, backend, *args], env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_trains_and_exports_without_tensorflow(backend: str, pairs_file: Path, tmp_path: Path) -> None:
    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"{backend} is not installed")
    from ptmkit_export import Translator as ExportTranslator

    run = tmp_path / "run"
    sets = [a for s in [*TINY_TRANSFORMER, "model.max_steps=2", "model.checkpoint_every=1", "model.dev_sentences=0"] for a in ("--set", s)]
    first = _ptmkit_without_tensorflow(backend, "train", "transformer", "--parallel", str(pairs_file), "--out", str(run), *sets)
    assert first.returncode == 0, first.stderr[-3000:]
    losses = [json.loads(line)["loss"] for line in (run / "logs" / "steps.jsonl").read_text().splitlines()]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    assert json.loads((run / "metrics.json").read_text())["steps"] == 2

    assert sorted(p.name for p in (run / "checkpoints").glob("ckpt-*")) != []  # what --resume reads

    exported = _ptmkit_without_tensorflow(backend, "export", str(run), "--out", str(tmp_path / "export"))
    assert exported.returncode == 0, exported.stderr[-3000:]
    manifest = json.loads((tmp_path / "export" / "manifest.json").read_text())
    assert manifest["variants"]["fp32"]["parity_max_abs_diff"] <= 1e-4  # ONNX against the Keras model on that backend
    assert len(ExportTranslator(tmp_path / "export").translate(["Good morning.", "Thank you."])) == 2
