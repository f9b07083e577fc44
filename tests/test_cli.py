"""The command line's contract for usage errors and misplaced paths (exit 2, one clear message)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptmkit.cli import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nosuchcmd"], "No such command 'nosuchcmd'"),
        (["train", "bert"], "Missing option '--out'"),
        (["predict", "x", "--threads", "0"], "Invalid value for '--threads'"),
    ],
)
def test_usage_errors_exit_2_with_clicks_message(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """One line (click prints three: usage, hint, error), which names the command's --help."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and "--debug" not in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ")
    assert f"(see 'ptmkit {argv[0] + ' ' if argv[0] != 'nosuchcmd' else ''}--help')" in err


def test_train_data_flags_fit_the_family(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--corpus for a family that trains on text, --parallel only for one that trains on pairs."""
    assert main(["train", "bert", "--out", str(tmp_path / "run")]) == 2
    assert "the bert family trains on a text corpus: give --corpus FILE" in capsys.readouterr().err
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("a b\tc d\n")
    assert main(["train", "bert", "--parallel", str(pairs), "--corpus", str(pairs), "--out", str(tmp_path / "run")]) == 2
    assert "--parallel: the bert family trains on a monolingual --corpus" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_binary_corpus_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "weights.bin"
    corpus.write_bytes(b"PK\x03\x04\x00\x00binary\n" * 10)
    assert main(["train", "bert", "--corpus", str(corpus), "--out", str(tmp_path / "run")]) == 2
    assert f"{corpus}:1: NUL bytes: this looks like a binary file" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_finished_runs_are_not_resumed_or_predicted_from(tiny_pretrained: Path, tiny_corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = (tiny_pretrained / "metrics.json").read_text()
    assert main(["train", "bert", "--corpus", str(tiny_corpus), "--out", str(tiny_pretrained), "--resume"]) == 2
    assert "already holds a finished run" in capsys.readouterr().err
    assert (tiny_pretrained / "metrics.json").read_text() == before
    assert main(["predict", str(tiny_pretrained), "--text", "hello"]) == 2
    assert "is a training run directory, not an export; fine-tune it" in capsys.readouterr().err


def test_out_that_is_a_file_is_refused(tiny_corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "bert", "--corpus", str(tiny_corpus), "--out", str(tiny_corpus)]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err


def test_finetune_refuses_keys_of_the_pretraining_sections(tiny_pretrained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = Path(__file__).resolve().parent.parent / "data" / "classify"
    argv = ["finetune", str(tiny_pretrained), "--train", str(data / "polarity-200-train.txt"), "--dev", str(data / "polarity-200-dev.txt")]
    assert main([*argv, "--out", str(tmp_path / "ft"), "--set", "train.max_steps=3"]) == 2
    assert "--set 'train.max_steps=3': fine-tuning keeps the pre-trained run's [train]" in capsys.readouterr().err
    assert not (tmp_path / "ft").exists()


def test_config_prints_the_family_keys_with_overrides_and_refuses_unknown_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "word2vec", "--set", "model.window=3"]) == 0
    out = capsys.readouterr().out
    assert "\nwindow = 3\n" in out and 'family = "word2vec"' in out and "[train]" not in out
    assert "# noise words per example for negative sampling (0: off).\nnegative = 5\n" in out
    assert main(["config", "word2vec", "--set", "model.windw=3"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: --set: unknown config key 'model.windw' (did you mean 'model.window'?)"


def test_embed_with_only_blank_words_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vectors = tmp_path / "v.txt"
    vectors.write_text("cat 1 2\ndog 2 1\n", encoding="utf-8")
    assert main(["embed", str(vectors), "--words", " "]) == 2
    assert capsys.readouterr().err.strip() == "error: --words: value 1 of 1 is empty or blank; give one word or several separated by spaces"
    assert main(["embed", str(vectors), "--words", "cat", "--words", ""]) == 2  # not silently one line short
    assert capsys.readouterr().err.strip() == "error: --words: value 2 of 2 is empty or blank; give one word or several separated by spaces"


def test_finetune_refuses_a_config_file_that_changes_the_pretrained_model(tiny_pretrained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`ptmkit config bert > f.toml` (the defaults: 4 layers) then `finetune RUN --config f.toml`
    on a 1-layer run used to record the file's [model] and fail at export; keys equal to the
    run's own are fine (one file for both commands)."""
    import tomllib

    data = Path(__file__).resolve().parent.parent / "data" / "classify"
    stored = (tiny_pretrained / "config.toml").read_text(encoding="utf-8")
    layers = tomllib.loads(stored)["model"]["num_layers"]
    changed = tmp_path / "changed.toml"
    changed.write_text(f"[model]\nnum_layers = {layers + 3}\n[finetune]\nepochs = 1\n", encoding="utf-8")
    argv = ["finetune", str(tiny_pretrained), "--train", str(data / "polarity-200-train.txt"), "--dev", str(data / "polarity-200-dev.txt")]
    assert main([*argv, "--out", str(tmp_path / "ft"), "--config", str(changed)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {changed}: config key 'model.num_layers' = {layers + 3} differs from the pre-trained run's ({layers}); "
        "fine-tuning keeps the run's [model]: drop it, and set finetune.* or head.* keys"
    )
    assert not (tmp_path / "ft").exists()




def test_words_are_taken_as_people_type_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--words king queen` (gensim and fastText users), `--words "king queen"`, repeated
    `--words`, the file before or after; a quoted GloVe entry "new york" is one word."""
    import json

    vectors = tmp_path / "glove.txt"
    vectors.write_text("king 1 2\nqueen 2 1\nnew york 3 3\nnew 0 1\nyork 1 0\n", encoding="utf-8")
    typings = [
        [str(vectors), "--words", "king", "queen", "new york"],
        [str(vectors), "--words", "king queen", "--words", "new york"],
        ["--words", "king", "queen", "new york", str(vectors)],
        [str(vectors), "--words", "king", "--words", "queen", "--words=new york"],
        ["--words", "king", "--words", "queen", "new york", str(vectors)],
    ]
    for argv in typings:
        assert main(["embed", *argv]) == 0, argv
        records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [(r["word"], r["vector"]) for r in records] == [("king", [1, 2]), ("queen", [2, 1]), ("new york", [3, 3])], argv
    assert main(["embed", str(vectors), "--words", "new  york", "york new"]) == 0  # not held whole: split
    assert [json.loads(line)["word"] for line in capsys.readouterr().out.splitlines()] == ["new", "york", "york", "new"]
    assert main(["embed", str(vectors), "--words", "king", "--json"]) == 2  # other options still parse as options
    assert "No such option: --json" in capsys.readouterr().err


def test_file_dash_reads_standard_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`--file -` reads stdin: word lists (one word a line, spaces kept) for embed and neighbors,
    texts (plain or __label__ lines) for embed and predict, through the one shared helper."""
    import io
    import json

    from ptmkit.cli import _read_texts

    vectors = tmp_path / "glove.txt"
    vectors.write_text("king 1 2\nqueen 2 1\nnew york 3 3\n", encoding="utf-8")
    monkeypatch.setattr("sys.stdin", io.StringIO("queen\n\nnew york\n"))
    assert main(["embed", str(vectors), "--words", "king", "--file", "-"]) == 0
    assert [json.loads(line)["word"] for line in capsys.readouterr().out.splitlines()] == ["king", "queen", "new york"]
    monkeypatch.setattr("sys.stdin", io.StringIO("king\n"))
    assert main(["neighbors", str(vectors), "--file", "-", "--topn", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["neighbors"][0]["word"] == "new york"
    monkeypatch.setattr("sys.stdin", io.StringIO("__label__pos a fine film\n__label__neg dull\n"))
    assert _read_texts(["first"], Path("-")) == ["first", "a fine film", "dull"]
    raw = io.TextIOWrapper(io.BytesIO(b"plain text\n\xff bad byte\n"), encoding="utf-8")
    monkeypatch.setattr("sys.stdin", raw)
    assert _read_texts(None, Path("-")) == ["plain text", "\ufffd bad byte"]
    assert "standard input: 1 line(s) had invalid UTF-8" in capsys.readouterr().err
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["predict", str(tmp_path), "--file", "-"]) == 2  # refused before the export is read
    assert capsys.readouterr().err.strip() == "error: standard input: no text in it, nothing to predict"


def test_calling_main_again_does_not_pile_up_the_plugins_commands(capsys: pytest.CaptureFixture[str]) -> None:
    """Each ``main`` call registers the plugins' commands on the one Typer app: they replace the
    last call's instead of adding copies (a test process calls main hundreds of times; each copy
    made every later call slower: 22 calls of one test took 33 s instead of 6)."""
    from ptmkit.cli import app, main

    counts = []
    for _ in range(3):
        assert main(["plugins", "--json"]) == 0
        names = [command.name or command.callback.__name__ for command in app.registered_commands]
        counts.append(len(names))
        assert len(names) == len(set(names)) and {"generate", "translate", "import-fasttext"} <= set(names), names
    assert counts[0] == counts[1] == counts[2]
    capsys.readouterr()
