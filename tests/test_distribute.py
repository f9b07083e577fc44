"""``ptmkit train bert --distribute``: tf.distribute strategies give the one-device run's weights.

Two CPU workers on loopback, each a process with its own ``TF_CONFIG``, train the tiny BERT on
a shared run directory and end with the single-device run's weights (same global batch and
seed), and so does a two-worker run whose worker was SIGKILLed mid-run, once both are restarted
with ``--resume``; MirroredStrategy on the one CPU does too; each step's global batch is split between the
workers without dropping or repeating an example; bad ``TF_CONFIG`` and batch sizes are refused
in one line before anything is written.

Tolerance: 1e-6 absolute on weights of magnitude up to ~1. The runs do the same arithmetic
except the order of the gradient sums (two half-batch sums then an all-reduce, against one sum
over the batch); float32 rounding of that order gives differences of about 1e-8 after 6 Adam
steps (measured: 1.1e-8 at 8 steps). A real difference is far larger: clipping each worker's
partial gradient before the all-reduce (Keras' default, see ptmkit.training.schedule.AdamW)
moved weights by 4e-3 in 8 steps, and one worker training on the other's rows changes them by
the learning rate (1e-3) a step.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from tinyconfig import TINY

from ptmkit.cli import main
from ptmkit.training.distribute import Cluster, read_cluster, replica_rows, worker_batches

ATOL = 1e-6
# Dropout off: each replica draws its own dropout masks for its rows, which one device draws for
# the whole batch (same distribution, other numbers); without dropout the runs must agree.
SETTINGS = [*TINY, "train.max_steps=6", "model.dropout=0"]

# Runs the ptmkit command in argv[2:] and SIGKILLs itself at the end of step argv[1].
KILLER = """
import os, signal, sys
from ptmkit.training import progress
original = progress.ProgressCallback.on_train_batch_end
def on_train_batch_end(self, batch, logs=None):
    original(self, batch, logs)
    if self.step == int(sys.argv[1]):
        os.kill(os.getpid(), signal.SIGKILL)
progress.ProgressCallback.on_train_batch_end = on_train_batch_end
from ptmkit.cli import main
sys.exit(main(sys.argv[2:]))
"""


def weights(path: Path) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {}
    with h5py.File(path, "r") as handle:
        handle.visititems(lambda name, item: arrays.__setitem__(name, item[()]) if isinstance(item, h5py.Dataset) else None)
    return arrays


def largest_difference(a: Path, b: Path) -> float:
    first, second = weights(a), weights(b)
    assert first.keys() == second.keys()
    return max(float(np.max(np.abs(first[k] - second[k]))) for k in first)


def train_args(corpus: Path, out: Path, *extra: str) -> list[str]:
    args = ["train", "bert", "--corpus", str(corpus), "--out", str(out), *extra]
    for item in SETTINGS:
        args += ["--set", item]
    return args


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def tf_config(ports: list[int], index: int) -> str:
    return json.dumps({"cluster": {"worker": [f"localhost:{p}" for p in ports]}, "task": {"type": "worker", "index": index}})


def start_workers(corpus: Path, out: Path, logs: Path, *extra: str, kill_worker_at: int | None = None) -> list[subprocess.Popen[bytes]]:
    """Two workers on free loopback ports, training into the shared ``out``; worker 1 SIGKILLs
    itself at the end of step ``kill_worker_at`` when given."""
    ports = free_ports(2)
    processes = []
    for index in range(2):
        env = {**os.environ, "TF_CONFIG": tf_config(ports, index)}
        args = train_args(corpus, out, "--distribute", "multi-worker", *extra)
        prefix = ["-c", KILLER, str(kill_worker_at)] if index == 1 and kill_worker_at else ["-m", "ptmkit.cli"]
        with open(logs / f"worker{index}.log", "ab") as log:
            processes.append(subprocess.Popen([sys.executable, *prefix, *args], stdout=log, stderr=subprocess.STDOUT, env=env))
    return processes


def wait_all(processes: list[subprocess.Popen[bytes]], timeout: float = 240) -> list[int]:
    try:
        return [process.wait(timeout=timeout) for process in processes]
    finally:
        for process in processes:
            process.kill()  # a no-op once it has ended


def stop_after_worker_killed(processes: list[subprocess.Popen[bytes]]) -> int:
    """Wait for worker 1 to SIGKILL itself, then stop the chief (it cannot go on alone: its
    all-reduce has no peer), as a Kubernetes Job restarts all of its pods. Returns worker 1's code."""
    try:
        return processes[1].wait(timeout=240)
    finally:
        processes[0].kill()
        processes[0].wait()


@pytest.fixture(scope="module")
def runs(tiny_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The one-device run (no strategy), the same run on two CPU workers
    (MultiWorkerMirroredStrategy over loopback), and a two-worker run whose worker 1 is killed
    at step 3: the workers start in the background while the one-device run trains in this
    process (they mostly wait on each other and on imports)."""
    root = tmp_path_factory.mktemp("distribute")
    (root / "killed").mkdir()
    workers = start_workers(tiny_corpus, root / "run", root)
    killed = start_workers(tiny_corpus, root / "killed" / "run", root / "killed", kill_worker_at=3)  # checkpoints at 2, 4, 6
    try:
        assert main(train_args(tiny_corpus, root / "none")) == 0
    finally:
        codes = wait_all(workers)
        killed_code = stop_after_worker_killed(killed)
    logs = [(root / f"worker{i}.log").read_text(errors="replace") for i in range(2)]
    assert codes == [0, 0], logs
    assert killed_code == -signal.SIGKILL, (root / "killed" / "worker1.log").read_text(errors="replace")
    return {"none": root / "none", "workers": root, "killed": root / "killed"}


@pytest.fixture(scope="module")
def reference(runs: dict[str, Path]) -> Path:
    return runs["none"]


@pytest.fixture(scope="module")
def two_workers(runs: dict[str, Path]) -> Path:
    return runs["workers"]


def test_two_workers_end_with_the_single_device_weights(reference: Path, two_workers: Path) -> None:
    run = two_workers / "run"
    assert largest_difference(run / "backbone.weights.h5", reference / "backbone.weights.h5") < ATOL
    chief, other = ((two_workers / f"worker{i}.log").read_text() for i in range(2))
    # the shares are derived from the global batch and printed by each worker
    assert "2 workers x 1 replica(s); global batch 8 sequences = 4 per replica, 4 per worker" in chief
    assert "this is worker 0 (chief)" in chief and "this is worker 1" in other
    assert json.loads((run / "metrics.json").read_text())["steps"] == 6
    assert json.loads((run / "checkpoints" / "latest.json").read_text())["step"] == 6


def test_mirrored_on_one_cpu_equals_no_strategy(tiny_corpus: Path, reference: Path, tmp_path: Path) -> None:
    out = tmp_path / "mirrored"
    assert main(train_args(tiny_corpus, out, "--distribute", "mirrored")) == 0
    assert largest_difference(out / "backbone.weights.h5", reference / "backbone.weights.h5") < ATOL
    assert 'distribute = "mirrored"' in (out / "config.toml").read_text()


def test_worker_killed_mid_run_resumes_to_the_uninterrupted_weights(tiny_corpus: Path, runs: dict[str, Path], reference: Path) -> None:
    logs = runs["killed"]
    run = logs / "run"
    # killed at step 3: the last checkpoint is step 2's, and the run has no final weights
    assert json.loads((run / "checkpoints" / "latest.json").read_text())["step"] == 2
    assert not (run / "backbone.weights.h5").exists()
    codes = wait_all(start_workers(tiny_corpus, run, logs, "--resume"))
    assert codes == [0, 0], (logs / "worker0.log").read_text(errors="replace")
    assert "resuming from step 2" in (logs / "worker0.log").read_text()
    assert json.loads((run / "metrics.json").read_text())["resumed_from_step"] == 2
    assert largest_difference(run / "backbone.weights.h5", reference / "backbone.weights.h5") < ATOL


@pytest.mark.parametrize(("workers", "local_replicas"), [(2, 1), (2, 2), (3, 1)])
def test_worker_shards_cover_each_example_of_an_epoch_once(workers: int, local_replicas: int) -> None:
    # One epoch of 24 examples in steps of a global batch of 12 (the example's number in its row).
    batch, examples = 12, 24

    def make(step: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
        ids = np.arange(step * batch, (step + 1) * batch)
        return {"token_ids": ids[:, None].repeat(4, 1)}, {"mlm": ids[:, None]}, {"mlm": ids[:, None].astype(np.float32)}

    seen = []
    for worker in range(workers):
        for x, y, w in worker_batches(make, 0, examples // batch, worker, workers, local_replicas):
            assert len(x["token_ids"]) == batch // (workers * local_replicas)
            # inputs, targets and weights keep their rows together
            assert (x["token_ids"][:, 0] == y["mlm"][:, 0]).all() and (x["token_ids"][:, 0] == w["mlm"][:, 0]).all()
            seen += x["token_ids"][:, 0].tolist()
    counts = np.bincount(seen, minlength=examples)
    assert len(seen) == examples and counts.min() == counts.max() == 1


def test_worker_shards_of_a_real_step_make_up_its_batch(two_workers: Path) -> None:
    # The masked-LM steps of the run: both workers' slices, in replica order, are the global batch.
    from ptmkit.data.pretraining import InstanceSampler, load_token_file, make_step, sampler_options, step_rng
    from ptmkit.plugins import get_registry
    from ptmkit.rundir import RunDir

    run = RunDir(two_workers / "run")
    registry = get_registry()
    family = registry.family("bert")
    objectives = {"mlm": (registry.objective("mlm"), registry.objective("mlm").config_class())}
    tokenizer = run.load_tokenizer()
    sampler = InstanceSampler(load_token_file(run / "tokens", "train"), family, family.special_tokens(tokenizer), 32, **sampler_options(objectives))

    def make(step: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
        return make_step(sampler, objectives, step_rng(42, step), 8, 600, family.inputs)

    shards = [list(worker_batches(make, 0, 3, worker, 2, 1)) for worker in range(2)]
    for step in range(3):
        whole = make(step)
        for part in range(3):
            for key, value in whole[part].items():
                assert np.array_equal(np.concatenate([shards[0][step][part][key], shards[1][step][part][key]]), value)
        assert replica_rows(whole, 1, 2)[0]["token_ids"].shape == (4, 32)
    sampler.close()


def test_read_cluster_numbers_a_chief_first() -> None:
    config = {"cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"]}, "task": {"type": "worker", "index": 1}}
    assert read_cluster("multi-worker", {"TF_CONFIG": json.dumps(config)}) == Cluster("multi-worker", 3, 2)
    assert read_cluster("mirrored", {}) == Cluster("mirrored")


@pytest.mark.parametrize(
    ("tf_config", "batch", "expected"),
    [
        (None, 8, "the TF_CONFIG environment variable is not set; each worker needs one like {\"cluster\""),
        ("{cluster: 1}", 8, "TF_CONFIG: not JSON (Expecting property name enclosed in double quotes at character 1); expected {"),
        ('{"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 2}}', 8, "TF_CONFIG: task.index 2 is not an index of cluster.worker (0 .. 1); expected"),
        ('{"cluster": {"worker": ["a"]}, "task": {"type": "worker", "index": 0}}', 8, "TF_CONFIG: cluster.worker must be a non-empty list of 'host:port' strings"),
        ('{"cluster": {"ps": ["a:1"], "worker": ["b:1"]}, "task": {"type": "worker", "index": 0}}', 8, "cluster role 'ps' is not used by MultiWorkerMirroredStrategy"),
        (json.dumps({"cluster": {"worker": ["a:1", "b:1", "c:1"]}, "task": {"type": "worker", "index": 0}}), 8,
         "config key 'train.batch_size' = 8 (the global batch) is not divisible by the 3 replicas (3 workers in TF_CONFIG); use a multiple of 3, e.g. 6 or 9"),
    ],
)
def test_bad_multi_worker_input_is_one_line_and_writes_nothing(
    tf_config: str | None, batch: int, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one line of text\n" * 20)
    if tf_config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", tf_config)
    out = tmp_path / "run"
    code = main(["train", "bert", "--corpus", str(corpus), "--out", str(out), "--distribute", "multi-worker", "--set", f"train.batch_size={batch}"])
    error = capsys.readouterr().err.strip()
    assert code == 2 and expected in error and len(error.splitlines()) == 1, error
    assert not out.exists()


def test_word_vector_families_refuse_distribute(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one line of text\n" * 20)
    code = main(["train", "word2vec", "--corpus", str(corpus), "--out", str(tmp_path / "run"), "--distribute", "mirrored"])
    error = capsys.readouterr().err.strip()
    assert code == 2 and len(error.splitlines()) == 1
    assert error.startswith("error: --distribute: the word2vec family trains itself on one host: the CPU kernel (model.backend)") and error.endswith("drop --distribute")
    assert not (tmp_path / "run").exists()
    assert main(["config", "glove"]) == 0
    assert "# Scaling: the glove family trains itself in one process on one host" in capsys.readouterr().out


def test_unknown_strategy_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one line of text\n" * 20)
    assert main(["train", "bert", "--corpus", str(corpus), "--out", str(tmp_path / "run"), "--distribute", "horovod"]) == 2
    assert "error: --distribute: expected one of none, mirrored, multi-worker, got 'horovod'" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
