"""Shared fixtures for every test folder (``tests/``, each ``plugins/ptmkit_*/tests/``): the
repository's real data, one tiny pre-training run and one tiny export per session.

It sits at the repository root so that pytest loads it for the core's tests and for the tests
beside each plugin alike; the helper modules they import (``tinyconfig``, ``inplugins``) stay in
``tests/`` (``export_fixtures`` in ``tests/export/``), which are put on ``sys.path`` here.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

# Test this checkout's code even when the editable install points at another one (a git
# worktree): its packages go first on sys.path and, for the CLI subprocesses, on PYTHONPATH.
_ROOT = Path(__file__).resolve().parent
_PATHS = [str(_ROOT), str(_ROOT / "plugins"), str(_ROOT / "export")]
sys.path[:0] = [path for path in [*_PATHS, str(_ROOT / "tests"), str(_ROOT / "tests" / "export")] if path not in sys.path]
os.environ["PYTHONPATH"] = os.pathsep.join([*_PATHS, *filter(None, [os.environ.get("PYTHONPATH")])])

import pytest  # noqa: E402
from tinyconfig import DATA, TINY  # noqa: E402

if TYPE_CHECKING:
    from export_fixtures import TinyExport

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# The Ctrl-C tests send SIGINT to CLI subprocesses. A suite started in the background by a
# non-interactive shell inherits SIGINT ignored, and so would those subprocesses (Python then
# installs no KeyboardInterrupt handler): a Python-level handler here is reset to the default in
# every child, so they see Ctrl-C as a user's terminal would send it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

@pytest.fixture(scope="module", autouse=True)
def _collector_skips_what_earlier_modules_left() -> None:
    """Before each test module, collect the garbage and freeze what is left (:func:`gc.freeze`):
    later collections skip those objects, which are still alive (imported modules, TensorFlow's
    and Keras' state, the session's fixtures).

    ``ptmkit export`` collects the garbage before each of tf2onnx's ~50 optimizer passes (for
    memory; :func:`ptmkit.exporting.convert._collecting_tf2onnx_optimizers`). Once TensorFlow is
    imported, each full collection scans 350,000 objects or more (0.3 s or more; this process holds
    every test's imports): 32 s of a tiny BERT's 43 s export (fp32 + int8), 10 s in all with the
    freeze. The collections still run and still free each pass's garbage (made after the freeze);
    only the scan of older, live objects is skipped. The cost: an object frozen here that becomes
    cyclic garbage later is freed only when the process ends (in a whole run, the largest process,
    this one or a child, peaked at 3.6 GB).

    TensorFlow, Keras, keras-hub and tf2onnx are imported first (once per worker, ~5 s; nearly
    every module needs them): a module that imported them itself would leave their objects
    unfrozen, to be scanned by each of its exports' collections.
    """
    from ptmkit.training.setup import quiet_tensorflow

    quiet_tensorflow()
    import keras  # noqa: F401
    import keras_hub  # noqa: F401
    import tf2onnx  # noqa: F401

    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 400 paragraphs of the shipped Wikipedia corpus."""
    lines = (DATA / "corpus" / "enwiki-106.txt").read_text(encoding="utf-8").splitlines()[:400]
    path = tmp_path_factory.mktemp("corpus") / "wiki-400.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tiny_pretrained(tmp_path_factory: pytest.TempPathFactory, tiny_corpus: Path) -> Path:
    """A finished tiny pre-training run (masked LM + NSP) made through the Python API."""
    from ptmkit.training.pretrain import pretrain

    out = tmp_path_factory.mktemp("runs") / "pretrain"
    pretrain("bert", tiny_corpus, out, overrides=TINY, objectives=["mlm", "nsp"])
    return out


@pytest.fixture(scope="session")
def tiny_export(tmp_path_factory: pytest.TempPathFactory) -> TinyExport:
    """A real export directory: fp32 + int8 ONNX, tokenizer.json and manifest.json (~10 s), built
    without ptmkit (``tests/export/export_fixtures.py``), shared by the lean runtime's tests and
    ``tests/test_predict_cli.py``; they only read it (a test that writes copies it first)."""
    from export_fixtures import make_export

    return make_export(tmp_path_factory.mktemp("tiny-export"))


@pytest.fixture(scope="session")
def tiny_embedding_export(tmp_path_factory: pytest.TempPathFactory, tiny_export: TinyExport) -> Path:
    """An embedding export (bag of embeddings, mean-pooled, L2-normalised) with tiny_export's tokenizer."""
    from export_fixtures import make_embedding_export

    return make_embedding_export(tmp_path_factory.mktemp("tiny-embedding") / "export", tiny_export.directory / "tokenizer.json")


#: Test files that run for minutes (end-to-end runs in subprocesses), longest first. They are
#: collected before the others, so that pytest-xdist's ``--dist loadfile`` (which hands out files
#: in collection order under ``--no-loadscope-reorder``; by default it puts the files of most tests
#: first, which left a 4-minute quickstart file to the end) starts them first and no worker is left
#: running one alone at the end.
LONG_FIRST = (
    "tests/test_quickstart.py",
    "tests/test_finetune_resume.py",
    "plugins/ptmkit_electra/tests/test_electra.py",
    "tests/test_plugin_example.py",
    "tests/test_gpu_check.py",
    "tests/test_distribute.py",
    "tests/test_bad_input.py",
    "tests/test_export_variants.py",
    "plugins/ptmkit_transformer/tests/test_transformer.py",
    "tests/test_elmo_resume.py",
    "tests/test_reproducibility.py",
    "plugins/ptmkit_xlnet/tests/test_xlnet.py",
    "plugins/ptmkit_albert/tests/test_albert.py",
    "plugins/ptmkit_roberta/tests/test_roberta.py",
    "plugins/ptmkit_bilstm/tests/test_bilstm.py",
    "tests/test_rtd.py",
    "plugins/ptmkit_gpt/tests/test_gpt_generate.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the files of :data:`LONG_FIRST` first, in that order; the rest keep theirs."""
    rank = {name: index for index, name in enumerate(LONG_FIRST)}

    def key(item: pytest.Item) -> int:
        path = Path(str(item.path)).resolve()
        return rank.get(path.relative_to(_ROOT).as_posix(), len(LONG_FIRST)) if path.is_relative_to(_ROOT) else len(LONG_FIRST)

    items.sort(key=key)
