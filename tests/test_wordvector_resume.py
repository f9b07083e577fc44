"""Interrupted word2vec, fastText, GloVe and NNLM runs resume from their last epoch checkpoint and end with the
vectors of the uninterrupted run, bit for bit; a checkpoint of another corpus is refused, and
families without checkpoints refuse --resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from inplugins import in_tree_plugins, registered  # noqa: F401 - the fixture
from tinyconfig import DATA

from ptmkit.cli import main
from ptmkit.wordvectors.training import EpochCheckpoints

pytestmark = pytest.mark.usefixtures("in_tree_plugins")
SMALL = ["--set", "model.epochs=3", "--set", "model.min_count=2", "--set", "model.vector_size=16", "--set", "model.checkpoint_seconds=0"]
FAMILIES = {
    # both output layers; the CPU kernel (HogBatch windows) on one thread, and the Keras step (window batches off)
    "word2vec": ["--set", "model.hs=true", "--set", "model.negative=2", "--set", "model.backend=cpu-kernel", "--set", "model.threads=1"],
    "word2vec-pairs": ["--set", "model.negative=2", "--set", "model.backend=cpu-kernel", "--set", "model.threads=1", "--set", "model.batching=pairs"],
    "word2vec-keras": ["--set", "model.hs=true", "--set", "model.negative=2", "--set", "model.backend=keras"],
    "fasttext": ["--set", "model.bucket=5000", "--set", "model.maxn=4", "--set", "model.backend=cpu-kernel", "--set", "model.threads=1"],
    "fasttext-keras": ["--set", "model.bucket=5000", "--set", "model.maxn=4", "--set", "model.backend=keras"],
    "glove": ["--set", "model.window=5", "--set", "model.batch_size=512"],
    "nnlm": ["--set", "model.heldout_lines=20", "--set", "model.hidden=20"],
    # early stopping: the best epoch's weights and the patience count travel in the checkpoint
    "nnlm-early": ["--set", "model.heldout_lines=20", "--set", "model.hidden=20", "--set", "model.validation_lines=20", "--set", "model.patience=1",
                   "--set", "model.learning_rate=0.02"],
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """100 lower-cased Wikipedia paragraphs (~7K tokens): resuming is bit for bit at any size."""
    lines = (DATA / "corpus" / "enwiki-106.txt").read_text(encoding="utf-8").lower().splitlines()[:100]
    path = tmp_path_factory.mktemp("resume") / "wiki-100.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def interrupt_after_first_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C right after the first epoch checkpoint is on disk (as a user's would land)."""
    save = EpochCheckpoints.save

    def save_then_interrupt(self: EpochCheckpoints, *args: object, **kwargs: object) -> None:
        save(self, *args, **kwargs)  # type: ignore[arg-type]
        raise KeyboardInterrupt

    monkeypatch.setattr(EpochCheckpoints, "save", save_then_interrupt)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_an_interrupted_run_resumes_to_the_uninterrupted_vectors(
    family: str, corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    settings, family = FAMILIES[family], family.split("-")[0]
    argv = ["train", family, "--corpus", str(corpus), *SMALL, *settings]
    with registered():
        assert main([*argv, "--out", str(tmp_path / "whole")]) == 0
        with monkeypatch.context() as patch:
            interrupt_after_first_checkpoint(patch)
            assert main([*argv, "--out", str(tmp_path / "cut")]) == 130
        err = capsys.readouterr().err
        assert "--resume` continues it" in err
        cut = tmp_path / "cut"
        state = json.loads((cut / "checkpoint" / "state.json").read_text())
        assert state["epochs_done"] == 1 and not (cut / "manifest.json").exists()
        assert main(["train", family, "--corpus", str(corpus), "--out", str(cut), "--resume"]) == 0
    metrics = json.loads((cut / "metrics.json").read_text())
    assert metrics["resumed_after_epoch"] == 1
    assert metrics["train_seconds_all_sessions"] > metrics["train_seconds"] > 0  # the first epoch's session counted
    if family in ("word2vec", "fasttext"):  # the words of the two epochs trained after resuming
        assert metrics["raw_words"] * 3 == json.loads((tmp_path / "whole" / "metrics.json").read_text())["raw_words"] * 2
    assert not (cut / "checkpoint").exists() and (cut / "manifest.json").exists()
    np.testing.assert_array_equal(np.load(cut / "vectors.npy"), np.load(tmp_path / "whole" / "vectors.npy"))


def test_a_checkpoint_of_another_corpus_or_none_is_refused(corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other.txt"
    other.write_text(corpus.read_text(encoding="utf-8").replace(" the ", " a "), encoding="utf-8")
    out = tmp_path / "cut"
    with registered():
        with monkeypatch.context() as patch:
            interrupt_after_first_checkpoint(patch)
            assert main(["train", "word2vec", "--corpus", str(corpus), "--out", str(out), *SMALL]) == 130
        capsys.readouterr()
        assert main(["train", "word2vec", "--corpus", str(other), "--out", str(out), "--resume"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith(f"error: {out / 'checkpoint' / 'state.json'}: the checkpoint is of another run (counts_sha1")
        half = tmp_path / "half.txt"  # fewer words: matrices of another shape, but the cause is the corpus
        half.write_text("".join(corpus.read_text(encoding="utf-8").splitlines(keepends=True)[:50]), encoding="utf-8")
        assert main(["train", "word2vec", "--corpus", str(half), "--out", str(out), "--resume"]) == 2
        assert capsys.readouterr().err.strip().splitlines()[-1].startswith(f"error: {out / 'checkpoint' / 'state.json'}: the checkpoint is of another run (")
        lines = corpus.read_text(encoding="utf-8").splitlines(keepends=True)
        reordered = tmp_path / "reordered.txt"
        reordered.write_text("".join(lines[1:] + lines[:1]), encoding="utf-8")  # the same counts
        assert main(["train", "word2vec", "--corpus", str(reordered), "--out", str(out), "--resume"]) == 2
        assert "the checkpoint is of another run (tokens_sha1 differ" in capsys.readouterr().err
        (state,) = (out / "checkpoint").glob("state-*.npz")
        with np.load(state) as arrays:
            saved = {name: arrays[name] for name in arrays.files}
        narrow = tmp_path / "narrow.npz"
        np.savez(narrow, **{**saved, "input": saved["input"][:, :8]})
        original = state.read_bytes()
        state.write_bytes(narrow.read_bytes())
        assert main(["train", "word2vec", "--corpus", str(corpus), "--out", str(out), "--resume"]) == 2
        rows = saved["input"].shape[0]
        assert f"its input matrix is float32 ({rows}, 8), this run needs float32 ({rows}, 16)" in capsys.readouterr().err
        state.write_bytes(original)
        state.write_bytes(state.read_bytes()[:1000])  # a disk that filled up under someone else's write
        assert main(["train", "word2vec", "--corpus", str(corpus), "--out", str(out), "--resume"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith(f"error: {state}: unreadable checkpoint (BadZipFile") and "--resume` continues it" not in "".join(err)
        assert main(["train", "word2vec", "--corpus", str(corpus), "--out", str(tmp_path / "never"), "--resume"]) == 2
        assert "nothing to resume" in capsys.readouterr().err
        assert main(["train", "fasttext-supervised", "--corpus", str(corpus), "--out", str(tmp_path / "n"), "--resume"]) == 2
        assert "the fasttext-supervised family trains in one pass without checkpoints; drop --resume" in capsys.readouterr().err


def test_the_shared_epoch_loop_saves_between_epochs_and_resumes_where_it_stopped(tmp_path: Path) -> None:
    """``ResumableEpochs`` on a toy trainer (a running sum of each epoch's draws): saves after
    epochs 1 .. E-1 (never after the last), and a loop resumed from epoch 2's state draws what
    the uninterrupted one drew and ends with its sum, bit for bit."""
    from ptmkit.wordvectors.training import ResumableEpochs

    def train(checkpoints: EpochCheckpoints, stop_after: int | None = None) -> tuple[np.ndarray, list[int], ResumableEpochs]:
        loop = ResumableEpochs(4, 7, checkpoints, lambda: {"corpus": "toy", "shape": (3,)})
        params = {"total": np.zeros(3)}
        state = loop.resume({"total": (3,)}, {"total": np.float64})
        if state is not None:
            params["total"] = state["total"].copy()
        saved: list[int] = []
        loop.start()
        for epoch in loop.run(lambda: {"total": params["total"].copy()}):
            params["total"] += loop.rng(epoch).random(3)
            if checkpoints.exists:
                saved.append(json.loads((checkpoints.directory / "state.json").read_text())["epochs_done"])
            if epoch + 1 == stop_after:
                break
        return params["total"], saved, loop

    whole, _, loop = train(EpochCheckpoints(tmp_path / "whole", every_seconds=0))
    assert sorted(p.name for p in (tmp_path / "whole").iterdir()) == ["state-3.npz", "state.json"]  # epochs 1, 2, 3 saved; not 4
    assert loop.stats()["checkpoint_seconds"] >= 0 and "resumed_after_epoch" not in loop.stats()
    _, saved, _ = train(EpochCheckpoints(tmp_path / "cut", every_seconds=0), stop_after=3)  # stopped inside epoch 3, after epoch 2's save
    assert saved == [1, 2]
    resumed, _, loop = train(EpochCheckpoints(tmp_path / "cut", every_seconds=0, resume=True))
    assert loop.start_epoch == 2 and loop.stats()["resumed_after_epoch"] == 2
    np.testing.assert_array_equal(resumed, whole)
    expected = sum(np.random.default_rng([7, epoch]).random(3) for epoch in range(4))
    np.testing.assert_array_equal(whole, expected)
