"""``ptmkit generate`` and the runtime's search loop against keras-hub's GPT2CausalLM samplers on
the same weights (greedy, beam), batched against one-by-one, and the refusals of bad input."""

from __future__ import annotations

import numpy as np
import pytest
from inplugins import in_tree_plugins  # noqa: F401 - the fixture
from test_gpt import keras_hub_twin

from ptmkit_export.generation import GenerationSettings, cli_flag, filter_logits, generate_ids

pytestmark = pytest.mark.usefixtures("in_tree_plugins")


@pytest.fixture(scope="module")
def tiny_decoder():
    """A random-init GPT-2 backbone (vocabulary 300) and its next-token function."""
    import keras

    from ptmkit_gpt.backbone import GPTBackbone

    keras.utils.set_random_seed(3)
    backbone = GPTBackbone(300, 2, 2, 32, 64, dropout=0.0, max_sequence_length=48)
    embeddings = np.asarray(backbone.token_embedding.embeddings)

    def next_logits(token_ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        hidden = np.asarray(backbone({"token_ids": token_ids, "padding_mask": mask}, training=False)["sequence_output"])
        return hidden[:, -1] @ embeddings.T

    return backbone, next_logits


def _keras_hub_generate(lm, prompt: list[int], steps: int) -> list[int]:
    ids = np.zeros((1, len(prompt) + steps), "int32")
    ids[0, : len(prompt)] = prompt
    mask = (np.arange(ids.shape[1]) < len(prompt)).astype("int32")[None]
    return lm.generate({"token_ids": ids, "padding_mask": mask}, stop_token_ids=None)["token_ids"][0, len(prompt) :].tolist()


PROMPTS = [[5, 17, 33, 2], [250], [9, 9, 120, 44, 7, 81, 3, 60], [1, 2]]


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_search_is_keras_hubs_and_a_batch_is_its_rows(tiny_decoder, strategy: str) -> None:
    import keras_hub

    backbone, next_logits = tiny_decoder
    lm = keras_hub_twin(backbone)
    lm.compile(sampler="greedy" if strategy == "greedy" else keras_hub.samplers.BeamSampler(num_beams=3))
    settings = GenerationSettings(max_new_tokens=8, strategy=strategy, num_beams=3)
    alone = [generate_ids(next_logits, [p], settings, pad_id=0, eos_id=None)[0] for p in PROMPTS]
    for prompt, ours in zip(PROMPTS[:2], alone[:2], strict=True):  # keras-hub's generate is slow: two prompts
        assert ours == _keras_hub_generate(lm, prompt, 8)
    assert generate_ids(next_logits, PROMPTS, settings, pad_id=0, eos_id=None) == alone  # left-padded batch


def test_rows_stop_at_eos_when_pad_is_eos_and_sampling_is_seeded(tiny_decoder) -> None:
    _, next_logits = tiny_decoder
    greedy = generate_ids(next_logits, PROMPTS, GenerationSettings(max_new_tokens=10), pad_id=0, eos_id=None)
    eos = greedy[0][3]  # row 0 emits it 4th; make it end-of-text *and* padding
    stopped = generate_ids(next_logits, PROMPTS, GenerationSettings(max_new_tokens=10), pad_id=eos, eos_id=eos)
    for full, cut in zip(greedy, stopped, strict=True):
        expected = full[: full.index(eos)] if eos in full else full
        assert cut == expected
    assert stopped[0] == greedy[0][:3]
    assert generate_ids(next_logits, PROMPTS, GenerationSettings(max_new_tokens=10, strategy="sample", temperature=0.0), 0, None) == greedy
    assert generate_ids(next_logits, PROMPTS, GenerationSettings(max_new_tokens=10, strategy="sample", top_k=1), 0, None) == greedy
    one = generate_ids(next_logits, PROMPTS, GenerationSettings(max_new_tokens=10, strategy="sample", seed=7), 0, None)
    assert one == generate_ids(next_logits, PROMPTS, GenerationSettings(max_new_tokens=10, strategy="sample", seed=7), 0, None)
    assert all(len(row) == 10 for row in one) and one != greedy


def test_top_k_and_top_p_keep_huggingfaces_sets() -> None:
    """The kept tokens of Hugging Face's TopKLogitsWarper / TopPLogitsWarper, by their rule."""
    logits = np.log(np.array([[0.5, 0.2, 0.15, 0.1, 0.05], [0.05, 0.05, 0.8, 0.05, 0.05]]))
    # top-p keeps the most probable tokens until their mass reaches p (the first always)
    assert np.isfinite(filter_logits(logits, 1.0, 0, 0.65)).tolist() == [[True, True, False, False, False], [False, False, True, False, False]]
    assert np.isfinite(filter_logits(logits, 1.0, 0, 0.71)).sum(axis=1).tolist() == [3, 1]
    assert np.isfinite(filter_logits(logits, 1.0, 0, 0.88)).sum(axis=1).tolist() == [4, 3]  # row 2: 0.8 + two of the 0.05s
    # top-k keeps every token tied with the k-th (TopKLogitsWarper's ``<`` rule)
    assert np.isfinite(filter_logits(logits, 1.0, 2, 1.0)).sum(axis=1).tolist() == [2, 5]
    probs = np.exp(filter_logits(logits, 2.0, 0, 1.0))
    np.testing.assert_allclose(probs[0], np.sqrt([0.5, 0.2, 0.15, 0.1, 0.05]) / np.sqrt([0.5, 0.2, 0.15, 0.1, 0.05]).sum())


def test_settings_problems_name_the_keyword_or_the_flag() -> None:
    """The Python API's errors name its keywords; the command line's, its flags."""
    bad = GenerationSettings(max_new_tokens=0, strategy="nucleus", num_beams=65)
    assert bad.problems() == ["max_new_tokens=0: must be at least 1", "strategy='nucleus': expected one of greedy, sample, beam",
                              "num_beams=65: must be from 1 to 64"]
    assert bad.problems(cli_flag)[0] == "--max-new-tokens 0: must be at least 1"
    assert GenerationSettings().problems() == []


def test_generate_command(gpt_run, tmp_path, capsys) -> None:
    import json

    from ptmkit.testing import main
    from ptmkit_gpt.generate import TextGenerator

    run, _, _ = gpt_run
    prompts = ["the cat saw", "a dog", ""]
    generator = TextGenerator(run)
    texts = generator.generate(prompts, GenerationSettings(max_new_tokens=6))
    assert texts == [generator.generate([p], GenerationSettings(max_new_tokens=6))[0] for p in prompts]
    file = tmp_path / "prompts.txt"
    file.write_text("the cat saw\n\na dog\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["generate", str(run), "--file", str(file), "--prompt", "", "--max-new-tokens", "6", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["prompt"] for row in rows] == ["", "the cat saw", "a dog"]  # --prompt first, then the file's lines
    assert [row["text"] for row in rows] == [texts[2], texts[0], texts[1]]
    long = "the cat saw the bridge " * 20  # more tokens than the 64 positions
    with pytest.warns(UserWarning, match="cut from the left to the last 63"):
        ids = generator.prompt_ids([long], truncate="left")[0]
    assert ids == generator.tokenizer.encode(long, add_special_tokens=False).ids[-63:]
    (new,) = generate_ids(generator.next_logits, [ids], GenerationSettings(max_new_tokens=6), 0, None, generator.max_length)
    assert len(new) == 1  # the last of the 64 positions
    stop = texts[0][2:4]
    cut = generator.generate(["the cat saw"], GenerationSettings(max_new_tokens=6), stop=[stop])[0]
    assert cut == texts[0][: texts[0].index(stop)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-new-tokens", "0"], "--max-new-tokens 0"),
        (["--top-p", "1.5"], "--top-p 1.5"),
        (["--top-p", "0"], "--top-p 0"),
        (["--top-k", "-1"], "--top-k -1"),
        (["--strategy", "nucleus"], "--strategy 'nucleus'"),
        (["--temperature", "-1"], "--temperature -1"),
        (["--temperature", "inf"], "--temperature inf: must be a finite number"),
        (["--file", "EMPTY"], "no text in it (the file is empty or holds blank lines only)"),
        (["--prompt", "word " * 80], "--truncate left"),
    ],
)
def test_generate_refuses_bad_input(gpt_run, capsys, tmp_path, args: list[str], message: str) -> None:
    from ptmkit.testing import main

    run, _, _ = gpt_run
    base = [] if "--prompt" in args or "--file" in args else ["--prompt", "the cat"]
    if "EMPTY" in args:
        empty = tmp_path / "empty.txt"
        empty.write_text("\n  \n", encoding="utf-8")
        args = [str(empty) if a == "EMPTY" else a for a in args]
    assert main(["generate", str(run), *base, *args]) == 2
    captured = capsys.readouterr()
    output = (captured.out + captured.err).strip()
    assert len(output.splitlines()) == 1 and message in output, output


def test_generate_refuses_non_utf8_files_and_encoder_runs(gpt_run, tiny_pretrained, tmp_path, capsys) -> None:
    from ptmkit.testing import main

    run, _, _ = gpt_run
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\ncaf\xe9\n")
    assert main(["generate", str(run), "--file", str(bad)]) == 2
    assert f"{bad}:2: not valid UTF-8" in capsys.readouterr().err
    assert main(["generate", str(tiny_pretrained), "--prompt", "x"]) == 2
    assert "cannot generate text" in capsys.readouterr().err
    tuned = tmp_path / "tuned"
    tuned.mkdir()
    (tuned / "manifest.json").write_text('{"family": "gpt", "stage": "finetune"}')
    assert main(["generate", str(tuned), "--prompt", "x"]) == 2
    assert "a fine-tuned run (stage 'finetune': a classifier) does not generate" in capsys.readouterr().err
    (tuned / "manifest.json").write_text('{"format": "ptmkit-export/1", "family": "gpt"}')
    assert main(["generate", str(tuned), "--prompt", "x"]) == 2
    assert "missing key(s)" in capsys.readouterr().err  # a broken export: read by the lean runtime, refused
