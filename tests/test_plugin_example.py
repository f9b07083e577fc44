"""The example plugin distribution (``examples/ptmkit-plugin-example``) installed as a user would:
``pip install`` into a private directory (``--target``, so the real site-packages is untouched),
then ``ptmkit`` in subprocesses with that directory on ``PYTHONPATH``: listed by ``ptmkit plugins``
with its distribution and version, trained, fine-tuned and exported (three commands in one process:
one TensorFlow import) and used for prediction.

References: an untrained masked LM predicts about uniformly, a held-out loss near ``ln(V)``;
held-out perplexity is ``exp`` of the held-out loss; the export's parity check (ONNX against Keras)
and a predicted label that is one of the labelled files' labels.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ptmkit.testing import write_tiny_corpus, write_tiny_labelled

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "ptmkit-plugin-example"
TINY = (
    "model.vocabulary_size=200", "model.hidden_dim=16", "model.intermediate_dim=32", "model.max_sequence_length=32",
    "train.sequence_length=32", "finetune.sequence_length=32", "train.batch_size=16", "train.max_steps=60",
    "train.heldout_lines=20", "train.learning_rate=3e-3",
)  # fmt: skip

Cli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Holds ``src`` (a copy of the example) and ``site`` (where pip installs it)."""
    return tmp_path_factory.mktemp("plugin-example")


@pytest.fixture(scope="module")
def installed(work: Path) -> Cli:
    """``pip install`` the example (a copy, so no build/ lands in the checkout) into a private
    ``--target``; returns a runner of ``ptmkit ARGS...`` that sees it."""
    source = shutil.copytree(EXAMPLE, work / "src", ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    site = work / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index", "--target", str(site), str(source)]
    done = subprocess.run(pip, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (site / "ptmkit_example" / "__init__.py").is_file() and (site / "ptmkit_plugin_example-0.1.0.dist-info").is_dir()
    path = os.pathsep.join([str(site), str(ROOT), str(ROOT / "plugins"), str(ROOT / "export")])

    def ptmkit(*args: str, then: tuple[list[str], ...] = ()) -> subprocess.CompletedProcess[str]:
        """``ptmkit ARGS``, and each command of ``then`` after it in the same process (one
        TensorFlow import for a train, a fine-tuning and an export); stops at the first failure."""
        env = {**os.environ, "PYTHONPATH": path, "COLUMNS": "200"}
        command = [sys.executable, "-m", "ptmkit.cli", *args] if not then else [sys.executable, "-c", CHAIN, json.dumps([list(args), *then])]
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
        assert result.returncode == 0, f"ptmkit {' '.join(args)}: {result.stderr[-2000:]}"
        return result

    return ptmkit


#: Run ``ptmkit`` commands (a JSON list of argument lists) one after another in one process.
CHAIN = "import json, sys\nfrom ptmkit.cli import main\nfor argv in json.loads(sys.argv[1]):\n    code = main(argv)\n    if code:\n        sys.exit(code)"


def test_the_installed_example_is_listed_with_its_distribution_and_version(installed: Cli) -> None:
    listed = {p["name"]: p for p in json.loads(installed("plugins", "--json").stdout)}
    example = listed["example"]
    assert (example["distribution"], example["version"], example["families"], example["ok"]) == ("ptmkit-plugin-example", "0.1.0", ["tiny-encoder"], True)
    assert "bert" in listed["bert"]["families"]  # the built-in plugins are still there


def test_the_example_passes_its_own_contract_tests(installed: Cli, work: Path, tmp_path: Path) -> None:
    """The example's tests (those without the CLI fixtures, which the next test covers) in this
    process, with the installed distribution on ``sys.path``: check_family among them."""
    import importlib.util

    from ptmkit.plugins import get_registry

    sys.path.insert(0, str(work / "site"))
    get_registry.cache_clear()
    try:
        spec = importlib.util.spec_from_file_location("example_tests", work / "src" / "tests" / "test_tiny_encoder.py")
        assert spec is not None and spec.loader is not None
        tests = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tests)
        tests.test_the_family_is_installed_and_matched_by_capability()
        tests.test_config_validation_names_the_key()
        tests.test_tokenizer_adds_cls_and_sep_as_pack_does()
        tests.test_the_family_passes_check_family(tmp_path)
        assert type(get_registry().family("tiny-encoder")).__module__ == "ptmkit_example"
        assert str(work / "site") in sys.modules["ptmkit_example"].__file__
    finally:
        sys.path.remove(str(work / "site"))
        sys.modules.pop("ptmkit_example", None)
        get_registry.cache_clear()


def test_the_installed_example_trains_finetunes_exports_and_predicts(installed: Cli, tmp_path: Path) -> None:
    corpus = write_tiny_corpus(tmp_path / "corpus.txt", lines=300)
    train, dev = write_tiny_labelled(tmp_path)
    run, tuned = tmp_path / "run", tmp_path / "tuned"
    sets = [arg for key in TINY for arg in ("--set", key)]

    finetune = ["finetune", str(run), "--train", str(train), "--dev", str(dev), "--out", str(tuned), "--set", "finetune.epochs=3", "--set", "finetune.batch_size=8"]
    trained = installed("train", "tiny-encoder", "--corpus", str(corpus), "--out", str(run), *sets, then=(finetune, ["export", str(tuned)]))
    losses = [float(x) for x in re.findall(r"pre-training step \d+/60 .*?loss ([0-9.]+)", trained.stdout + trained.stderr)]
    assert len(losses) >= 2 and all(math.isfinite(x) for x in losses) and losses[-1] < losses[0], losses
    metrics = json.loads((run / "metrics.json").read_text())
    vocabulary = len(json.loads((run / "tokenizer.json").read_text())["model"]["vocab"])
    assert metrics["steps"] == 60 and math.isfinite(metrics["heldout_mlm_loss"])
    assert metrics["heldout_mlm_loss"] < math.log(vocabulary) - 1.0  # learnt: well below uniform guessing
    assert metrics["heldout_mlm_perplexity"] == pytest.approx(math.exp(metrics["heldout_mlm_loss"]), rel=1e-3)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["plugin"] == {"name": "example", "distribution": "ptmkit-plugin-example", "version": "0.1.0"}
    assert manifest["inputs"] == ["token_ids", "padding_mask"]  # declared: no segment ids

    scores = json.loads((tuned / "metrics.json").read_text())
    assert scores["dev_examples"] == 16 and 0.0 <= scores["dev_accuracy"] <= 1.0

    exported = json.loads((tuned / "export" / "manifest.json").read_text())
    assert [i["name"] for i in exported["inputs"]] == ["token_ids", "padding_mask"]
    parity = exported["variants"]["fp32"]["parity_max_abs_diff"]
    assert parity and max(parity.values()) < 1e-4 and exported["variants"]["fp32"]["ok"] is True, parity
    predicted = [json.loads(line) for line in installed("predict", str(tuned / "export"), "--text", "the cat saw the bridge, wonderful.", "--text", "dull").stdout.splitlines()]
    assert len(predicted) == 2 and {p["label"] for p in predicted} <= set(exported["labels"]) == {"pos", "neg"}
