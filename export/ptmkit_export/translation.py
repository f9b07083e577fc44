"""Encoder-decoder translation (``task == "translation"``): the search that both ptmkit's Keras
translator and the lean runtime's :class:`Translator` run, and the latter over an export with ONNX
Runtime only (no TensorFlow).

A translation export holds ``encoder.onnx`` (``encoder_token_ids``, ``encoder_padding_mask``
``(batch, source)`` int32 -> ``encoder_sequence_output`` ``(batch, source, hidden)`` float32),
``decoder.onnx`` (a decoder with a self-attention key/value cache: the inputs of a generation
export, :mod:`ptmkit_export.decoding`, plus ``encoder_sequence_output`` and
``encoder_padding_mask``; outputs ``logits`` and the ``present_*`` cache), ``tokenizer.json`` and
``manifest.json`` (``decoder``: the cache's shape, the decoder start token as ``bos_token_id``, the
end-of-sentence token; each variant's ``encoder`` file beside its decoder ``file``; optionally
``source_prefix_ids``, the tokens put before every source).

Sources are encoded as ``source </s>`` (after ``source_prefix_ids``, e.g. BART's ``<s>``; cut to
the model's positions), right-padded to a multiple of
:data:`LENGTH_QUANTUM`; the decoder starts from the start token. Greedy search decodes a batch of
sentences together; beam search decodes one sentence at a time, its beams as the batch
(:func:`ptmkit_export.generation.generate_ids`, the loop ``ptmkit generate`` runs for decoders).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit_export.decoding import CachedDecoder, cache_mismatch
from ptmkit_export.errors import ExportDirError
from ptmkit_export.generation import GenerationSettings, generate_ids
from ptmkit_export.manifest import TRANSLATION_TASK

#: Source and target batches are padded to a multiple of this many positions (fewer distinct
#: shapes: fewer traced graphs on the Keras side).
LENGTH_QUANTUM = 8

NextLogits = Callable[[np.ndarray, np.ndarray], np.ndarray]


def padded_length(longest: int, limit: int) -> int:
    """``longest`` rounded up to a multiple of :data:`LENGTH_QUANTUM`, at most ``limit``."""
    return min(limit, -(-max(longest, 1) // LENGTH_QUANTUM) * LENGTH_QUANTUM)


def pack_sources(sources: Sequence[Sequence[int]], eos: int, pad: int, limit: int, prefix: Sequence[int] = ()) -> tuple[np.ndarray, np.ndarray]:
    """``(encoder_token_ids, encoder_padding_mask)``, ``(len(sources), length)`` int32: ``prefix``
    (BART's ``<s>``; none by default), each source, then ``</s>``, right-padded (sources longer
    than ``limit - 1 - len(prefix)`` are cut)."""
    rows = [[*prefix, *s[: limit - 1 - len(prefix)], eos] for s in sources]
    length = padded_length(max(len(r) for r in rows), limit)
    ids = np.full((len(rows), length), pad, np.int32)
    mask = np.zeros((len(rows), length), np.int32)
    for i, row in enumerate(rows):
        ids[i, : len(row)], mask[i, : len(row)] = row, 1
    return ids, mask


def source_prefix_ids(manifest: dict[str, Any], path: Path, vocabulary: int, limit: int) -> tuple[int, ...]:
    """The manifest's ``source_prefix_ids`` (absent: none), once each is a token id below
    ``vocabulary`` and they leave room in ``limit`` positions for a token and ``</s>``.

    Raises:
        ExportDirError: naming the key, when it is not such a list.
    """
    ids = manifest.get("source_prefix_ids", [])
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < vocabulary for i in ids):
        raise ExportDirError(f"{path}: key 'source_prefix_ids' must be a list of token ids below {vocabulary}, got {ids!r}")
    if len(ids) > limit - 2:
        raise ExportDirError(f"{path}: key 'source_prefix_ids' holds {len(ids)} tokens; max_sequence_length {limit} leaves room for {max(limit - 2, 0)}")
    return tuple(ids)


class Seq2SeqSearch:
    """Greedy and beam search over an encoder-decoder: a subclass gives :meth:`encode_sources`
    and :meth:`next_logits_over` and sets ``tokenizer`` (a ``tokenizers.Tokenizer``), ``pad``,
    ``eos``, ``bos`` (the decoder start token) and ``max_sequence_length``, and ``source_prefix``
    where sources start with a token (BART's ``<s>``)."""

    tokenizer: Any
    #: Sources per search in :meth:`translate` (the server raises it to its ``max_batch``).
    batch_size: int = 32
    pad: int
    eos: int
    bos: int
    max_sequence_length: int
    #: Token ids put before every source (``model.source_start_token``; the manifest's ``source_prefix_ids``).
    source_prefix: tuple[int, ...] = ()

    def encode_sources(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(states, mask, ids)``: the encoder's ``(batch, source, hidden)`` float32 states of
        ``texts``, the ``(batch, source)`` int32 mask and token ids (:func:`pack_sources`)."""
        raise NotImplementedError

    def next_logits_over(self, states: np.ndarray, mask: np.ndarray) -> NextLogits:
        """``next_logits(token_ids, padding_mask) -> (rows, vocabulary)`` float32 for the search
        loop against ``states``; states of one sentence serve every row (its beams)."""
        raise NotImplementedError

    def source_ids(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """:func:`pack_sources` of ``texts`` tokenized without special tokens."""
        ids = [list(e.ids) for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]
        return pack_sources(ids, self.eos, self.pad, self.max_sequence_length, self.source_prefix)

    def translate_ids(self, texts: Sequence[str], num_beams: int = 1, length_penalty: float = 1.0, max_length: int | None = None) -> list[list[int]]:
        """The target token ids of each text (without the start token and ``</s>``).

        Args:
            num_beams: 1: greedy search; more: beam search with that many beams.
            length_penalty: beam search ranks finished outputs by ``log P / length ** length_penalty``.
            max_length: the most target tokens (default: the model's positions less the start token).

        Raises:
            ValueError: ``num_beams`` or ``max_length`` below 1 (naming the option).
        """
        limit = self.max_sequence_length
        budget = limit - 1 if max_length is None else max_length
        settings = GenerationSettings(max_new_tokens=budget, strategy="beam" if num_beams > 1 else "greedy", num_beams=num_beams, length_penalty=length_penalty)
        problems = settings.problems()
        if problems:
            raise ValueError(problems[0].replace("max_new_tokens=", "max_length="))
        if not texts:
            return []
        states, mask, _ = self.encode_sources(texts)
        if num_beams == 1:
            return generate_ids(self.next_logits_over(states, mask), [[self.bos]] * len(texts), settings, self.pad, self.eos, limit)
        return [
            generate_ids(self.next_logits_over(states[row : row + 1], mask[row : row + 1]), [[self.bos]], settings, self.pad, self.eos, limit)[0]
            for row in range(len(texts))
        ]

    def translate(self, texts: Sequence[str], num_beams: int = 1, length_penalty: float = 1.0, max_length: int | None = None, batch_size: int | None = None) -> list[str]:
        """The translation of each text (:meth:`translate_ids`, decoded), ``batch_size`` sources at
        a time (default :attr:`batch_size`).

        Raises:
            TypeError: ``texts`` is a single str.
            ValueError: as :meth:`translate_ids`.
        """
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of str, not a single str (wrap it in a list)")
        out: list[str] = []
        step = batch_size or self.batch_size
        for first in range(0, len(texts), step):
            chunk = list(texts[first : first + step])
            out.extend(self.tokenizer.decode(ids) for ids in self.translate_ids(chunk, num_beams, length_penalty, max_length))
        return out


class Translator(Seq2SeqSearch):
    """A translation export (``ptmkit export TRANSLATION_RUN``) loaded for decoding with ONNX Runtime.

    Args:
        export_dir: the export directory (module docstring).
        variant: a key of the manifest's ``variants`` (``"fp32"``, ``"int8"``); None: ``int8``
            when the export's gate passed it (dev BLEU within 0.5 of fp32's), else ``fp32``. A
            variant named here that failed the gate loads with a :class:`RuntimeWarning`.
        threads: ONNX Runtime intra-op threads; None lets it decide.
        providers: ONNX Runtime execution providers (default: CPU).

    Attributes:
        variant: the variant in use.
        decoder: the :class:`~ptmkit_export.decoding.CachedDecoder` over the decoder graph (its
            ``cached_steps`` count the calls that fed one new position).

    Raises:
        ExportDirError: not a translation export; a missing or broken file (manifest, graphs,
            tokenizer); a variant the export does not have.
        ValueError: ``threads`` below 1.
    """

    def __init__(self, export_dir: str | os.PathLike[str], variant: str | None = None, threads: int | None = None, providers: Sequence[str] | None = None) -> None:
        from tokenizers import Tokenizer

        from ptmkit_export.manifest import export_file, read_manifest, variant_path
        from ptmkit_export.sessions import inference_session

        self.export_dir = Path(export_dir)
        self.manifest = read_manifest(self.export_dir)
        if self.manifest.get("task") != TRANSLATION_TASK:
            raise ExportDirError(f"{self.export_dir}: a {self.manifest.get('task')!r} export does not translate; export a run of ptmkit train transformer")
        if variant is None:
            variant = "int8" if self.manifest["variants"].get("int8", {}).get("ok") else "fp32"
        elif self.manifest["variants"].get(variant, {}).get("ok") is False:
            problems = self.manifest["variants"][variant].get("problems") or []
            detail = f" ({'; '.join(map(str, problems))})" if problems else ""
            warnings.warn(f"{self.export_dir}: variant {variant!r} did not pass the export's gate{detail}; using it anyway", RuntimeWarning, stacklevel=2)
        decoder_path = variant_path(self.export_dir, self.manifest, variant)
        encoder_path = export_file(self.export_dir, self.manifest["variants"][variant]["encoder"], f"variants.{variant}.encoder")
        chosen = list(providers or ["CPUExecutionProvider"])
        sessions = [inference_session(path, variant, threads, chosen, text_input=False) for path in (encoder_path, decoder_path)]
        self.encoder, decoder_session = sessions
        spec = self.manifest["decoder"]
        if any(value.name.startswith("past_") for value in self.encoder.get_inputs()):
            raise ExportDirError(f"{encoder_path}: a decoder graph (it takes a key/value cache) where {self.export_dir / 'manifest.json'} names the encoder")
        if problem := cache_mismatch(decoder_session, spec["layers"], spec["heads"], spec["head_dim"]):
            raise ExportDirError(f"{decoder_path}: does not match {self.export_dir / 'manifest.json'}: {problem}")
        self.decoder = CachedDecoder(decoder_session, spec["layers"], spec["heads"], spec["head_dim"])
        self.variant = variant
        tokenizer_path = export_file(self.export_dir, self.manifest["tokenizer"], "tokenizer")
        try:
            self.tokenizer = Tokenizer.from_file(str(tokenizer_path))
        except Exception as error:  # tokenizers raises a bare Exception on a bad file
            raise ExportDirError(f"{tokenizer_path}: cannot load tokenizer ({str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__})") from error
        self.pad, self.eos, self.bos = int(self.manifest["pad_token_id"]), int(spec["eos_token_id"]), int(spec["bos_token_id"])
        self.max_sequence_length = int(self.manifest["max_sequence_length"])
        self.source_prefix = source_prefix_ids(self.manifest, self.export_dir / "manifest.json", self.tokenizer.get_vocab_size(with_added_tokens=True), self.max_sequence_length)
        self.languages = self.manifest.get("languages")

    @property
    def session(self) -> Any:
        """The decoder's ``onnxruntime.InferenceSession`` (``session.get_providers()``)."""
        return self.decoder.session

    #: A translation export has no tasks (a multi-task classifier's choice).
    task = None

    def encode_sources(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ids, mask = self.source_ids(texts)
        states = self.encoder.run(["encoder_sequence_output"], {"encoder_token_ids": ids, "encoder_padding_mask": mask})[0]
        return np.asarray(states, np.float32), mask, ids

    def next_logits_over(self, states: np.ndarray, mask: np.ndarray) -> NextLogits:
        self.decoder.reset()
        self.decoder.context = {"encoder_sequence_output": states, "encoder_padding_mask": mask}
        return self.decoder.next_logits
