"""``ptmkit translate`` and ``ptmkit evaluate --parallel``: a trained encoder-decoder run (or its
ONNX export: :class:`ptmkit_export.Translator`) translating, by the runtime's one search loop
(:class:`ptmkit_export.translation.Seq2SeqSearch` over :mod:`ptmkit_export.generation`: greedy and
beam search, the same code ``ptmkit generate`` decodes GPT with).

The encoder runs once per batch of sources; the search loop then asks for the next token's
logits given each row's target prefix, the config's ``decoder_start_token`` first (``<s>``;
``<pad>`` for an imported Marian model; ``next_logits``). The Keras decoder recomputes the prefix
against the encoder's states (no key/value cache); the ONNX export's decoder feeds one new
position a step through its cache. Greedy search decodes all sentences as one batch; beam search
decodes one sentence at a time, its beams as the batch. Scores: BLEU and chrF from sacrebleu
(Post 2018), with their signature strings.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from ptmkit.api import (
    BACKBONE_WEIGHTS,
    CONFIG,
    ConfigError,
    DataError,
    RunDir,
    RunDirError,
    get_registry,
    load_weights,
    quiet_tensorflow,
    read_parallel,
    read_toml,
    read_utf8_lines,
    resolve_config,
)
from ptmkit_export.generation import beams_problem
from ptmkit_export.translation import Seq2SeqSearch
from ptmkit_transformer.data import source_prefix

FAMILY = "transformer"


class Translator(Seq2SeqSearch):
    """A finished translation run, loaded for decoding with Keras (the search:
    :class:`ptmkit_export.translation.Seq2SeqSearch`).

    Args:
        run_dir: a run of ``ptmkit train transformer``.

    Raises:
        RunDirError: not a finished run, or a run of another family (a classifier, a decoder).
    """

    def __init__(self, run_dir: str | Path) -> None:
        run = RunDir(run_dir)
        manifest = run.manifest()
        if manifest.get("family") != FAMILY:
            raise RunDirError(f"{run.path}: a {manifest.get('family')} run (stage {manifest.get('stage')!r}) does not translate; give a run of ptmkit train transformer")
        config = resolve_config(get_registry(), FAMILY, None, None, base=read_toml(run.require(CONFIG))).model
        quiet_tensorflow()  # after the checks: TensorFlow imports without its start-up chatter
        from ptmkit_transformer.backbone import build_backbone

        backbone = build_backbone(config)
        load_weights(backbone, run.require(manifest.get("weights", BACKBONE_WEIGHTS)))
        self._set(backbone, run.load_tokenizer(), config)
        self.languages = run.read_json("metrics.json").get("languages") if (run / "metrics.json").exists() else None

    @classmethod
    def from_parts(cls, backbone: Any, tokenizer: Any, config: Any) -> Translator:
        """A translator on an in-memory ``backbone`` (e.g. right after training)."""
        translator = cls.__new__(cls)
        translator._set(backbone, tokenizer, config)
        translator.languages = None
        return translator

    def _set(self, backbone: Any, tokenizer: Any, config: Any) -> None:
        self.backbone, self.tokenizer, self.config = backbone, tokenizer, config
        self.max_sequence_length = config.max_sequence_length
        self.pad, self.unk, self.bos, self.eos = (tokenizer.token_to_id(t) for t in ("<pad>", "<unk>", config.decoder_start_token, "</s>"))
        self.source_prefix = source_prefix(tokenizer, config)
        import warnings

        import keras

        # The first step's self-attention has one key: Keras warns that its softmax is always 1, which is right.
        warnings.filterwarnings("ignore", message=r"You are using a softmax over axis 3 of a tensor of shape .*\b1, 1\]?\)")
        decoder = backbone.decoder

        def decode(token_ids: Any, padding_mask: Any, states: Any, states_mask: Any) -> Any:
            return decoder([token_ids, padding_mask, states, states_mask], training=False)[:, -1, :]

        if keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            # One traced graph for every prefix length and batch (eager calls cost ~10x more a step).
            decode = tf.function(decode, reduce_retracing=True)
        self._decode = decode

    def encode_sources(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        source_ids, mask = self.source_ids(texts)
        return self.encoder_states(source_ids, mask), mask, source_ids

    def encoder_states(self, source_ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """``(batch, source, hidden)`` float32: the Keras encoder's output on packed ``source_ids``
        (int32, ``(batch, source)``) and their ``mask``, as NumPy on any Keras backend."""
        from keras import ops

        return np.asarray(ops.convert_to_numpy(self.backbone.encoder([source_ids, mask], training=False)), np.float32)

    def next_logits_over(self, states: np.ndarray, mask: np.ndarray) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        """The decoder on each row's whole prefix against ``states`` (no key/value cache)."""
        from keras import ops

        def next_logits(token_ids: np.ndarray, padding_mask: np.ndarray) -> np.ndarray:
            rows = token_ids.shape[0]
            memory, memory_mask = (states, mask) if states.shape[0] == rows else (np.repeat(states, rows, 0), np.repeat(mask, rows, 0))
            logits = self._decode(token_ids.astype(np.int32), padding_mask.astype(np.int32), memory, memory_mask)
            return np.asarray(ops.convert_to_numpy(logits), np.float32)

        return next_logits

    def translate_ids(self, texts: Sequence[str], num_beams: int = 1, length_penalty: float = 1.0, max_length: int | None = None) -> list[list[int]]:
        """:meth:`ptmkit_export.translation.Seq2SeqSearch.translate_ids`.

        Raises:
            ConfigError: ``num_beams`` or ``max_length`` below 1.
        """
        try:
            return super().translate_ids(texts, num_beams, length_penalty, max_length)
        except ValueError as error:
            raise ConfigError(str(error)) from None


def score_translations(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """Corpus BLEU (Papineni et al. 2002) and chrF (Popović 2015) of ``hypotheses`` against one
    reference each, by sacrebleu with its default settings (BLEU: 13a tokenisation, exponential
    smoothing; chrF: character 6-grams, beta 2).

    Returns:
        ``bleu``, ``chrf`` (0-100, two decimals), ``bleu_signature``, ``chrf_signature`` (what
        sacrebleu prints, e.g. ``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0``)
        and ``sentences``.
    """
    from sacrebleu.metrics import BLEU, CHRF

    bleu, chrf = BLEU(), CHRF()
    refs = [list(references)]
    bleu_score, chrf_score = bleu.corpus_score(list(hypotheses), refs), chrf.corpus_score(list(hypotheses), refs)
    return {
        "bleu": round(float(bleu_score.score), 2),
        "bleu_signature": str(bleu.get_signature()),
        "chrf": round(float(chrf_score.score), 2),
        "chrf_signature": str(chrf.get_signature()),
        "sentences": len(hypotheses),
    }


def evaluate_run(run_dir: Path, parallel: Path, options: dict[str, Any], console: Any) -> dict[str, Any]:
    """Translate the sources of ``parallel`` with the run and score them against the targets
    (:func:`score_translations`); ``report`` holds the lines ``ptmkit evaluate`` prints.

    Raises:
        RunDirError: not a translation run. DataError: an unusable file, or one of another
            language pair (its header, or mostly unknown tokens).
    """
    from ptmkit_transformer.data import check_known, encode

    translator = Translator(run_dir)
    pairs = read_parallel(parallel)
    if translator.languages and pairs.languages and "-".join(pairs.languages) != translator.languages:
        raise DataError(f"{parallel}:1: a {'-'.join(pairs.languages)} file, but the run translates {translator.languages}")
    check_known(translator.tokenizer, encode(translator.tokenizer, pairs.sources), translator.unk, parallel)
    with console.status(f"translating {len(pairs):,} sentences"):
        hypotheses = translator.translate(pairs.sources, options.get("num_beams", 1), options.get("length_penalty", 1.0), options.get("max_length"))
    scores = score_translations(hypotheses, pairs.targets)
    search = "greedy" if options.get("num_beams", 1) == 1 else f"beam {options['num_beams']}"
    scores["search"] = search
    scores["report"] = [
        f"{parallel}: {scores['sentences']:,} sentences, {search}",
        f"BLEU {scores['bleu']:.2f}  {scores['bleu_signature']}",
        f"chrF {scores['chrf']:.2f}  {scores['chrf_signature']}",
    ]
    return scores


def load_translator(path: Path) -> Seq2SeqSearch:
    """The translator of ``path``: a run (:class:`Translator`, Keras) or a translation export
    (:class:`ptmkit_export.Translator`, ONNX Runtime, no TensorFlow).

    Raises:
        RunDirError: neither a translation run nor a translation export (the runtime's message).
    """
    import json

    try:
        manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        manifest = {}
    if isinstance(manifest, dict) and str(manifest.get("format", "")).startswith("ptmkit-export"):
        from ptmkit_export import ExportDirError
        from ptmkit_export import Translator as ExportTranslator

        try:
            return ExportTranslator(path)
        except ExportDirError as error:
            raise RunDirError(str(error)) from None
    return Translator(path)


def read_source_file(file: Path) -> list[str]:
    """The lines of ``file`` (UTF-8; ``-``: standard input), one source sentence each, stripped; a
    blank line is ``""`` (translated to a blank line, so that the output lines up with the file).

    Raises:
        DataError: a missing file, invalid UTF-8 (naming the line), no text at all.
    """
    return [line.strip() for line in read_utf8_lines(file, keep_blank=True)]


def register(cli: Any) -> None:
    """Add ``ptmkit translate`` to ``cli`` (a ``typer.Typer``)."""

    @cli.command("translate")
    def translate_command(
        run_dir: Annotated[Path, typer.Argument(help="A run of ptmkit train transformer, or its ONNX export (ptmkit export RUN).", show_default=False)],
        text: Annotated[list[str] | None, typer.Option("--text", help="A source sentence; repeat for several.", show_default=False)] = None,
        file: Annotated[Path | None, typer.Option("--file", help="UTF-8 file of source sentences, one a line (- reads standard input); a blank line gives a blank line.", show_default=False)] = None,
        num_beams: Annotated[int, typer.Option("--num-beams", help="1: greedy search; more: beam search with that many beams (at most 64).")] = 1,
        length_penalty: Annotated[float, typer.Option("--length-penalty", help="Beam search ranks outputs by log P / length ** this.")] = 1.0,
        max_length: Annotated[int | None, typer.Option("--max-length", help="The most tokens of an output (default: the model's positions).", show_default=False)] = None,
        as_json: Annotated[bool, typer.Option("--json", help="One JSON object a sentence: {\"source\", \"translation\"}.")] = False,
    ) -> None:
        """Translate sentences with an encoder-decoder run: greedy or beam search; one output line per source line."""
        import json

        if problem := beams_problem(num_beams):
            raise ConfigError(f"--num-beams {num_beams}: {problem}")
        if not math.isfinite(length_penalty):
            raise ConfigError(f"--length-penalty {length_penalty}: must be a finite number")
        if max_length is not None and max_length < 1:
            raise ConfigError(f"--max-length {max_length}: must be at least 1")
        sources = [line.strip() for line in text or []] + (read_source_file(file) if file is not None else [])
        if not any(sources):
            raise DataError("nothing to translate: give --text SENTENCE or --file FILE (- reads standard input)")
        if not run_dir.is_dir():
            raise RunDirError(f"{run_dir}: no such run directory")
        translated = iter(load_translator(run_dir).translate([s for s in sources if s], num_beams, length_penalty, max_length))
        translations = [next(translated) if source else "" for source in sources]  # a blank source: a blank line
        for source, translation in zip(sources, translations, strict=True):
            print(json.dumps({"source": source, "translation": translation}, ensure_ascii=False) if as_json else translation)
