"""``ptmkit generate``: text from a pre-trained run of a family with a causal sequence output,
decoded by the runtime's search loop (:mod:`ptmkit_export.generation`) on the Keras backbone.

On a run, the Keras backbone recomputes the whole prefix at each step: right for the small models
ptmkit trains, slow for long outputs of large ones. On an ONNX export (``ptmkit export RUN``) the
lean runtime decodes with a key/value cache (:mod:`ptmkit_export.decoding`), without TensorFlow.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from ptmkit.api import (
    CONFIG,
    TOKEN_EMBEDDING,
    ConfigError,
    DataError,
    RunDir,
    RunDirError,
    capabilities,
    derive_inputs,
    get_registry,
    load_weights,
    quiet_tensorflow,
    read_toml,
    read_utf8_lines,
    resolve_config,
)
from ptmkit_export.generation import GenerationSettings, cli_flag, generate_ids
from ptmkit_gpt.objectives import CAUSAL_SEQUENCE_OUTPUT


class TextGenerator:
    """A finished pre-training run, loaded for generation.

    Args:
        run_dir: the run directory (``ptmkit train`` or ``ptmkit import-hf``).

    Raises:
        RunDirError: not a finished run, an ONNX export (:func:`generate_from_export`), or a run whose family cannot
            generate (an encoder, a word-vector model) or that was fine-tuned into a classifier.
    """

    def __init__(self, run_dir: str | Path) -> None:
        run = RunDir(run_dir)
        if str(run.read_json("manifest.json").get("format", "")).startswith("ptmkit-export/"):
            raise RunDirError(f"{run.path}: an ONNX export; ptmkit generate runs it, or Predictor(EXPORT_DIR).generate")
        manifest = run.manifest()
        registry = get_registry()
        family = registry.family(manifest["family"])
        if not {CAUSAL_SEQUENCE_OUTPUT, TOKEN_EMBEDDING} <= capabilities(family):
            raise RunDirError(f"{run.path}: a {family.name} run cannot generate text (its backbone has no causal sequence output); generate needs a decoder run such as gpt")
        if manifest.get("stage") != "pretrain":
            raise RunDirError(f"{run.path}: a fine-tuned run (stage {manifest.get('stage')!r}: a classifier) does not generate; give its pre-trained run")
        self.config = resolve_config(registry, manifest["family"], None, None, base=read_toml(run.require(CONFIG))).model
        self.family = family
        quiet_tensorflow()  # after the checks: TensorFlow imports without its start-up chatter
        self.backbone = family.build_backbone(self.config)
        load_weights(self.backbone, run.require(manifest.get("weights", "backbone.weights.h5")))
        self.tokenizer = run.load_tokenizer()
        self.specials = family.special_tokens(self.tokenizer)
        self.max_length = family.limits(self.config).max_sequence_length
        self._embeddings = np.asarray(self.backbone.token_embedding.embeddings)

    def next_logits(self, token_ids: np.ndarray, padding_mask: np.ndarray) -> np.ndarray:
        """``(batch, vocabulary)`` float32 logits of the token after each row's last position."""
        feeds = derive_inputs(self.family.inputs, token_ids, None, padding_mask)
        hidden = np.asarray(self.backbone(feeds, training=False)["sequence_output"])[:, -1, :]
        return hidden @ self._embeddings.T

    def prompt_ids(self, prompts: Sequence[str], truncate: str = "error") -> list[list[int]]:
        """Token ids of each prompt: ``<|endoftext|>`` first when the config's ``prepend_bos`` is
        set or the prompt is empty, cut from the left with a warning (``truncate="left"``) or
        refused (``"error"``) when it leaves no position to generate into.

        Raises:
            ConfigError: a prompt too long with ``truncate="error"``; an unknown ``truncate``.
        """
        from ptmkit_export.decoding import encode_prompts  # the lean runtime's rule, shared

        try:
            return encode_prompts(self.tokenizer, list(prompts), self.specials["bos"], self.config.prepend_bos, self.max_length, truncate)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def generate(self, prompts: Sequence[str], settings: GenerationSettings, stop: Sequence[str] = (), truncate: str = "error") -> list[str]:
        """The continuation of each prompt (the prompt not repeated), cut before the first stop
        string; a row ends at ``<|endoftext|>``, at a stop string or after
        ``settings.max_new_tokens`` tokens.

        Raises:
            ConfigError: unusable ``settings``, a prompt too long (:meth:`prompt_ids`).
            DataError: no prompt.
        """
        problems = settings.problems()
        if problems:
            raise ConfigError(problems[0])
        if not prompts:
            raise DataError("nothing to generate from: give --prompt TEXT or --file FILE")
        stops = [s for s in stop if s]

        def stopped(row: int, ids: list[int]) -> bool:
            text = self.tokenizer.decode(ids)
            return any(s in text for s in stops)

        new = generate_ids(
            self.next_logits, self.prompt_ids(prompts, truncate), settings, self.specials.padding_id, self.specials.eos,
            self.max_length, stopped if stops else None,
        )
        texts = []
        for ids in new:
            text = self.tokenizer.decode(ids)
            cut = min((text.index(s) for s in stops if s in text), default=len(text))
            texts.append(text[:cut])
        return texts


def is_export(directory: Path) -> bool:
    """True when ``directory`` holds an ONNX export's manifest (``format`` ``ptmkit-export/...``)."""
    import json

    try:
        manifest = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(manifest, dict) and str(manifest.get("format", "")).startswith("ptmkit-export/")


def generate_from_export(export_dir: Path, prompts: list[str], settings: GenerationSettings, stop: Sequence[str], truncate: str) -> list[str]:
    """:meth:`ptmkit_export.Predictor.generate` on a decoder export (key/value cache, no TensorFlow).

    Raises:
        RunDirError: a broken export, or one that does not generate (a classifier, embeddings).
        ConfigError: unusable settings, a prompt too long with ``truncate="error"``.
    """
    import dataclasses

    from ptmkit_export import Predictor
    from ptmkit_export.errors import ExportDirError

    try:
        predictor = Predictor(export_dir)
    except ExportDirError as exc:
        raise RunDirError(str(exc)) from None
    if not predictor.is_generator:
        raise RunDirError(f"{export_dir}: a {predictor.manifest.get('task')!r} export does not generate text; export a pre-trained decoder run (ptmkit export RUN)")
    try:
        return predictor.generate(prompts, **dataclasses.asdict(settings), stop=stop, truncate=truncate)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def read_prompt_file(file: Path) -> list[str]:
    """The non-blank lines of ``file``, strictly UTF-8.

    Raises:
        DataError: a missing file, or invalid UTF-8 (naming the line).
    """
    return read_utf8_lines(file)


def register(cli: Any) -> None:
    """Add ``ptmkit generate`` to ``cli`` (a ``typer.Typer``)."""

    @cli.command("generate")
    def generate_command(
        run_dir: Annotated[Path, typer.Argument(help="A pre-trained decoder run (ptmkit train gpt, or import-hf of a GPT-2), or its ONNX export (ptmkit export RUN: key/value cache, no TensorFlow).", show_default=False)],
        prompt: Annotated[list[str] | None, typer.Option("--prompt", help="A prompt; repeat for several (one batch, left-padded). An empty prompt starts from <|endoftext|>.", show_default=False)] = None,
        file: Annotated[Path | None, typer.Option("--file", help="UTF-8 file of prompts, one a line.", show_default=False)] = None,
        max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", help="The most tokens to add to each prompt.")] = 32,
        strategy: Annotated[str, typer.Option("--strategy", help="greedy | sample | beam.")] = "greedy",
        temperature: Annotated[float, typer.Option("--temperature", help="Sampling temperature; 0 is greedy.")] = 1.0,
        top_k: Annotated[int, typer.Option("--top-k", help="Sample among the K most probable tokens (0: all).")] = 0,
        top_p: Annotated[float, typer.Option("--top-p", help="Nucleus sampling: the smallest set of tokens with probability >= P, in (0, 1].")] = 1.0,
        num_beams: Annotated[int, typer.Option("--num-beams", help="Beams of --strategy beam (length-normalised scores).")] = 4,
        seed: Annotated[int, typer.Option("--seed", help="Sampling seed: one seed, one output.")] = 0,
        stop: Annotated[list[str] | None, typer.Option("--stop", help="End a continuation before this string (repeatable).", show_default=False)] = None,
        truncate: Annotated[str, typer.Option("--truncate", help="A prompt longer than the model's positions: error, or left (cut from the left with a warning).")] = "error",
        as_json: Annotated[bool, typer.Option("--json", help="One JSON object a prompt: {\"prompt\", \"text\"}.")] = False,
    ) -> None:
        """Continue each prompt with a decoder run: greedy, sampling (temperature, top-k, top-p) or beam search."""
        import json

        settings = GenerationSettings(max_new_tokens, strategy, temperature, top_k, top_p, num_beams, 1.0, seed)
        problems = settings.problems(cli_flag)
        if problems:
            raise ConfigError(problems[0])
        prompts = list(prompt or []) + (read_prompt_file(file) if file is not None else [])
        if not prompts:
            raise DataError("nothing to generate from: give --prompt TEXT or --file FILE")
        if is_export(run_dir):
            texts = generate_from_export(run_dir, prompts, settings, stop or [], truncate)
        else:
            texts = TextGenerator(run_dir).generate(prompts, settings, stop or [], truncate)
        for source, text in zip(prompts, texts, strict=True):  # results on stdout, one line (JSON) or block a prompt
            print(json.dumps({"prompt": source, "text": text}, ensure_ascii=False) if as_json else source + text)
