"""Run an exported model with ONNX Runtime: texts in; labels and probabilities, or sentence embeddings, out.

Texts become model inputs through the export's tokenizer (``tokenizer.json``: BERT-family exports) or
its ``featurizer`` (a bag of rows: fastText's classifier, :mod:`ptmkit_export.bag_of_rows`).
Imports neither TensorFlow nor Keras; needs only onnxruntime, numpy and tokenizers.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from ptmkit_export.bag_of_rows import BagOfRows
from ptmkit_export.clip import clip_text, plain_copy
from ptmkit_export.decoding import (
    GENERATION_TASK,
    CachedDecoder,
    cache_mismatch,
    cache_names,
    cut_at_stops,
    encode_prompts,
    text_chunks,
)
from ptmkit_export.errors import ExportDirError
from ptmkit_export.manifest import EMBEDDER_OUTPUTS, TRANSLATION_TASK, read_manifest, variant_path
from ptmkit_export.sessions import inference_session

if TYPE_CHECKING:
    from ptmkit_export.generation import GenerationSettings


class Prediction(NamedTuple):
    """One text's prediction.

    Attributes:
        label: the most probable label (ties go to the label listed first in the manifest).
        probabilities: ``{label: probability}`` for every label, in manifest order; floats in
            ``[0, 1]``: summing to 1 under the manifest's ``activation`` ``softmax`` (the
            default), each label's own probability under ``sigmoid`` (one-vs-all, multi-label).
    """

    label: str
    probabilities: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        """``{"label": str, "probabilities": {label: float}}``, ready for ``json.dumps``."""
        return {"label": self.label, "probabilities": dict(self.probabilities)}


def softmax(logits: np.ndarray) -> np.ndarray:
    """Numerically stable softmax over the last axis.

    Args:
        logits: float array of shape ``(..., num_labels)``.

    Returns:
        float64 array of the same shape; each row sums to 1. Rows of huge logits do not overflow
        (the row maximum is subtracted first).
    """
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """The logistic function of each logit (one-vs-all / multi-label classifiers, e.g. fastText's
    ``-loss ova``: ``Loss::OneVsAllLoss``).

    Args:
        logits: float array of any shape.

    Returns:
        float64 array of the same shape, in ``[0, 1]``; huge logits do not overflow.
    """
    z = np.asarray(logits, dtype=np.float64)
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


#: The manifest's ``activation`` values: how logits become probabilities.
ACTIVATIONS = {"softmax": softmax, "sigmoid": sigmoid}


def probabilities(logits: np.ndarray, activation: str = "softmax") -> np.ndarray:
    """Probabilities of ``logits`` ``(..., labels)`` under the manifest's ``activation``:
    ``softmax`` over the labels (one label per text; the default, and that of manifests without
    the field) or ``sigmoid`` of each logit (independent labels).

    Returns:
        float64 array of the same shape.

    Raises:
        ValueError: an unknown activation.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; expected one of {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[activation](logits)


#: Variants :func:`default_variant` considers on CPU, most preferred first.
CPU_PREFERENCE = ("int8", "optimized", "fp32")


def default_variant(manifest: dict[str, Any], device: str = "cpu") -> str:
    """The variant a :class:`Predictor` loads when none is named.

    On CPU: the first of ``int8``, ``optimized`` whose manifest entry has ``ok`` true (it passed
    the export's gate: agreement with fp32 on the dev set and no slower than fp32), else ``fp32``.
    On CUDA: ``fp16`` when its agreement with fp32 passed (``agreement_ok``; its CPU timing does
    not count there), else ``fp32`` (int8's dynamic-quantization kernels are CPU kernels).
    """
    variants = manifest["variants"]
    if device == "cuda":
        fp16 = variants.get("fp16")
        return "fp16" if isinstance(fp16, dict) and fp16.get("agreement_ok") is True else "fp32"
    for name in CPU_PREFERENCE:
        entry = variants.get(name)
        if name == "fp32" or (isinstance(entry, dict) and entry.get("ok") is True):
            return name
    return "fp32"


def _gate_problems(manifest: dict[str, Any], variant: str) -> list[str] | None:
    """The reasons the export's gate gave for marking ``variant`` not ok; ``None`` when it is ok."""
    entry = manifest["variants"].get(variant)
    if not isinstance(entry, dict) or entry.get("ok", True) is not False:
        return None
    problems = entry.get("problems")
    return [str(p) for p in problems] if isinstance(problems, list) and problems else ["marked not ok"]


#: ``device`` values :class:`Predictor` accepts.
DEVICES = ("cpu", "cuda")


def device_providers(device: str) -> list[str]:
    """ONNX Runtime execution providers for ``device``, most preferred first.

    ``"cpu"`` gives ``["CPUExecutionProvider"]``. ``"cuda"`` gives ``TensorrtExecutionProvider``
    (when the installed onnxruntime has it), ``CUDAExecutionProvider`` and ``CPUExecutionProvider``
    (for the nodes CUDA has no kernel for, e.g. the int8 variant's dynamic-quantization ops). Only
    the ``onnxruntime-gpu`` wheel (``pip install ptmkit-export[gpu]``) has the CUDA provider; without
    it ``"cuda"`` falls back to ``["CPUExecutionProvider"]`` with a :class:`RuntimeWarning`.

    Raises:
        ValueError: ``device`` is not ``"cpu"`` or ``"cuda"``.
    """
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "cpu":
        return ["CPUExecutionProvider"]
    available = ort.get_available_providers()
    if "CUDAExecutionProvider" not in available:
        warnings.warn(
            f"device='cuda' but this onnxruntime ({ort.__version__}) has no CUDAExecutionProvider "
            f"(has {', '.join(available)}); running on CPU. Install onnxruntime-gpu (ptmkit-export[gpu]) for CUDA.",
            RuntimeWarning,
            stacklevel=3,
        )
        return ["CPUExecutionProvider"]
    gpu = ["TensorrtExecutionProvider"] if "TensorrtExecutionProvider" in available else []
    return [*gpu, "CUDAExecutionProvider", "CPUExecutionProvider"]


def _predictor_manifest(export_dir: Path) -> dict[str, Any]:
    """:func:`read_manifest`, refusing a translation export (two graphs: :class:`ptmkit_export.Translator`)."""
    manifest = read_manifest(export_dir)
    if manifest.get("task") == TRANSLATION_TASK:
        raise ExportDirError(f"{export_dir}: a translation export (encoder and decoder): load it with ptmkit_export.Translator, or run ptmkit translate {export_dir}")
    return manifest


class Predictor:
    """Load an export directory and classify (or embed) texts with ONNX Runtime.

    A classifier export (``task`` names a head) has :meth:`predict` and :meth:`logits`; an
    embedding export (``task == "embedding"``, a run without a head) has :meth:`embed`, and so has
    a word-vector export (``task == "word-vectors"``): a text's vector is the mean of its words'
    rows (a single word: its vector; fastText: out-of-vocabulary words by their n-grams; a text
    without rows, e.g. only unknown words of word2vec: the zero vector).

    Args:
        export_dir: directory holding ``manifest.json``, ``tokenizer.json`` (or the vocabulary of the
            manifest's ``featurizer``) and the model files.
        variant: ``"fp32"``, ``"optimized"``, ``"int8"``, ``"fp16"`` or any other key of the
            manifest's ``variants``; ``None`` picks :func:`default_variant` (a variant the export's
            gate marked ``ok``). Naming a variant the gate marked not ok (below the agreement
            threshold, or slower than fp32) loads it with a :class:`RuntimeWarning` giving the
            reasons: the choice is the caller's, but never silent.
            ``"fp32+tokenizer"`` / ``"int8+tokenizer"`` (``ptmkit export --with-tokenizer``) are
            single-file models that tokenize inside the graph: texts go in as a string tensor;
            they need onnxruntime-extensions (``ptmkit-export[tokenizer]``) and give the same
            outputs as their base variant (see :mod:`ptmkit_export.tokenizer_graph`).
        threads: ONNX Runtime intra-op threads (``SessionOptions.intra_op_num_threads``);
            ``None`` lets ONNX Runtime decide (one per physical core).
        providers: ONNX Runtime execution providers, e.g. ``["CUDAExecutionProvider",
            "CPUExecutionProvider"]``; ``None`` means the providers of ``device``. Give
            ``providers`` or ``device``, not both.
        device: ``"cpu"`` (the default) or ``"cuda"``: CUDA (and TensorRT when present) through
            ``onnxruntime-gpu``; without it, CPU with a :class:`RuntimeWarning` (see
            :func:`device_providers`). The int8 variant's integer kernels are CPU kernels, so on
            CUDA the default variant is ``"fp32"``.
        task: a multi-task export (``ptmkit finetune --task ...``; its manifest's ``tasks``): the
            head whose labels :meth:`predict` and :meth:`logits` give; ``None``: the manifest's
            ``default_task`` (the first). A single-task export takes ``None`` only.

    Attributes:
        manifest: the parsed ``manifest.json`` (dict).
        variant: the variant in use (str).
        labels: label names, one per logit column (list of str); a multi-task export's: the chosen task's.
        task: the chosen task of a multi-task export (str), else None.
        batch_size: texts per ONNX Runtime call in :meth:`logits` (int, default 32).
        session: the ``onnxruntime.InferenceSession``; ``session.get_providers()`` lists the
            providers in use.
        text_input: the model's string input for a variant that tokenizes inside the graph,
            else None (the model takes the manifest's ``inputs``; :meth:`encode` makes them).
        tokenizer: the ``tokenizers.Tokenizer`` of a tokenizer export, else None.
        featurizer: the :class:`~ptmkit_export.bag_of_rows.BagOfRows` of a featurizer export
            (inputs ``row_ids``/``row_mask``), else None.

    Raises:
        ValueError: ``threads < 1``, an unknown ``device``, or both ``device`` and ``providers``.
        ExportDirError: the directory, manifest, tokenizer or chosen variant's model file is
            missing or broken; the model's inputs or outputs do not match the manifest; a variant
            that tokenizes in the graph without onnxruntime-extensions installed, or whose outputs
            on the manifest's probe texts moved since the export (e.g. with TensorFlow loaded in
            the same process; :func:`ptmkit_export.tokenizer_graph.check_probe`).
        ValueError: a ``task`` the export does not have (the message lists its tasks), or a
            ``task`` for a single-task export.
    """

    batch_size: int = 32

    def __init__(
        self,
        export_dir: str | os.PathLike[str],
        variant: str | None = None,
        threads: int | None = None,
        providers: Sequence[str] | None = None,
        device: str | None = None,
        task: str | None = None,
    ) -> None:
        if providers and device is not None:
            raise ValueError("give providers or device, not both")
        chosen = list(providers) if providers else device_providers(device or "cpu")
        self.export_dir = Path(export_dir)
        self.manifest: dict[str, Any] = _predictor_manifest(self.export_dir)
        if variant is None:  # int8's dynamic-quantization kernels are CPU-only: on CUDA, fp32 or fp16
            variant = default_variant(self.manifest, "cuda" if "CUDAExecutionProvider" in chosen else "cpu")
        else:
            problems = _gate_problems(self.manifest, variant)
            if problems:
                warnings.warn(
                    f"{self.export_dir}: variant {variant!r} did not pass the export's gate ({'; '.join(problems)}); using it anyway",
                    RuntimeWarning,
                    stacklevel=2,
                )
        self.variant: str = variant
        self.task, self.labels = self._choose_task(task)
        self.activation: str = str(self.manifest.get("activation", "softmax"))
        model_path = variant_path(self.export_dir, self.manifest, self.variant)

        self._inputs = [(spec["name"], spec["encoding"], np.dtype(spec["dtype"])) for spec in self.manifest["inputs"]]
        entry = self.manifest["variants"][self.variant]
        self.text_input: str | None = entry.get("text_input") if isinstance(entry.get("text_input"), str) else None
        self._output = self.manifest["tasks"][self.task]["output"] if self.task is not None else self.manifest["outputs"][0]["name"]
        self.tokenizer: Tokenizer | None = None
        self.featurizer: BagOfRows | None = None
        if "featurizer" in self.manifest:
            from ptmkit_export import bag_of_rows

            rows = self.manifest.get("rows")
            self.featurizer = bag_of_rows.load(self.export_dir, self.manifest["featurizer"], rows if isinstance(rows, int) else None)
        else:
            self.tokenizer = self._load_tokenizer(self.export_dir / self.manifest["tokenizer"])
        self._characters = None
        char_spec = next((spec for spec in self.manifest["inputs"] if spec["encoding"] == "char_ids"), None)
        if char_spec is not None and self.tokenizer is not None:
            from ptmkit_export.fields import tokenizer_character_table

            self._characters = tokenizer_character_table(self.tokenizer, int(char_spec["shape"][-1]))

        self.session = inference_session(model_path, self.variant, threads, chosen, self.text_input is not None)
        self.decoder: CachedDecoder | None = None
        if self.is_generator:
            spec = self.manifest["decoder"]
            if problem := cache_mismatch(self.session, spec["layers"], spec["heads"], spec["head_dim"]):
                raise ExportDirError(f"{model_path}: does not match {self.export_dir / 'manifest.json'}: {problem}")
            self.decoder = CachedDecoder(self.session, spec["layers"], spec["heads"], spec["head_dim"])
        self._check_session(model_path)
        if self.text_input is not None:
            from ptmkit_export.tokenizer_graph import check_probe

            check_probe(self.session, entry, self._output, model_path)

    def _choose_task(self, task: str | None) -> tuple[str | None, list[str]]:
        """``(task, labels)``: the head of a multi-task export to use (``task``, else the
        manifest's ``default_task``) and its labels; ``(None, the manifest's labels)`` for a
        single-task export.

        Raises:
            ValueError: a ``task`` the export does not have, or any ``task`` for a single-task export.
        """
        tasks = self.manifest.get("tasks")
        if not isinstance(tasks, dict):
            if task is not None:
                raise ValueError(f"{self.export_dir}: is a single-task export; it has no task {task!r} (drop the task)")
            return None, list(self.manifest["labels"])
        chosen = task if task is not None else str(self.manifest.get("default_task") or next(iter(tasks)))
        if chosen not in tasks:
            raise ValueError(f"{self.export_dir}: has no task {chosen!r}; its tasks: {', '.join(tasks)}")
        return chosen, list(tasks[chosen]["labels"])

    def _load_tokenizer(self, path: Path) -> Tokenizer:
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as error:  # tokenizers raises a bare Exception on a bad file
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise ExportDirError(f"{path}: cannot load tokenizer ({first})") from error
        pad_id = int(self.manifest["pad_token_id"])
        pad_token = tokenizer.id_to_token(pad_id) or "[PAD]"
        self._plain_tokenizer = plain_copy(tokenizer)
        tokenizer.enable_truncation(max_length=int(self.manifest["max_sequence_length"]))
        tokenizer.enable_padding(pad_id=pad_id, pad_token=pad_token)  # length=None: longest in batch
        return tokenizer

    def _check_session(self, model_path: Path) -> None:
        model_inputs = {value.name for value in self.session.get_inputs()}
        wanted = {self.text_input} if self.text_input is not None else {name for name, _, _ in self._inputs}
        if self.is_generator:
            wanted |= set(cache_names(self.manifest["decoder"]["layers"], "past"))
        if model_inputs != wanted:
            raise ExportDirError(
                f"{model_path}: model inputs {sorted(model_inputs)} do not match the manifest's {sorted(wanted)}"
            )
        outputs = {value.name: value for value in self.session.get_outputs()}
        if self._output not in outputs:
            raise ExportDirError(
                f"{model_path}: model has no output {self._output!r} (has {', '.join(sorted(outputs))})"
            )
        width = outputs[self._output].shape[-1] if outputs[self._output].shape else None
        if isinstance(width, int) and width != len(self.labels) and not self.is_embedder and not self.is_generator:
            raise ExportDirError(
                f"{model_path}: output {self._output!r} has {width} columns but the manifest lists {len(self.labels)} labels"
            )

    @staticmethod
    def _check_texts(texts: Sequence[str]) -> list[str]:
        if isinstance(texts, str):
            raise TypeError("texts must be a list of strings, not a single str; wrap it: [text]")
        texts = list(texts)
        if not texts:
            raise ValueError("texts is empty: pass at least one string")
        bad = [i for i, text in enumerate(texts) if not isinstance(text, str)]
        if bad:
            raise TypeError(f"texts[{bad[0]}] is {type(texts[bad[0]]).__name__}, expected str")
        return texts

    def clip(self, texts: Sequence[str]) -> list[str]:
        """``texts`` cut to prefixes that tokenize to the tokens the model reads
        (:func:`clip_text` with ``max_sequence_length``), so that a long text costs no more
        memory or time than the model's input; a featurizer export's texts are returned as they
        are (a bag of rows reads every word, as fastText does)."""
        if self.tokenizer is None:
            return list(texts)
        limit = int(self.manifest["max_sequence_length"])
        return [clip_text(self._plain_tokenizer, text, limit) for text in texts]

    def encode(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """Tokenize ``texts`` into the model's input arrays.

        Each text gets the tokenizer's special tokens (e.g. ``[CLS] ... [SEP]``), is truncated to
        ``max_sequence_length`` tokens (specials included) and padded with ``pad_token_id`` to the
        longest text of this call; every input is cut and padded the same way. A long text is cut
        to a prefix first (:meth:`clip`: the same tokens, in memory bounded by the model's
        input rather than by the text). A featurizer export
        gives ``row_ids`` ``(len(texts), rows)`` int32 and ``row_mask`` float32 instead, padded to
        the text with the most rows (:meth:`ptmkit_export.bag_of_rows.BagOfRows.encode`; no
        truncation).

        Args:
            texts: non-empty list of str.

        Returns:
            ``{input name: array}``, one entry per manifest input, each of shape
            ``(len(texts), length)`` with ``length <= max_sequence_length`` and the manifest's
            dtype (int32 unless the manifest says otherwise). ``attention_mask`` inputs are 1 on
            real tokens and 0 on padding.

        Raises:
            ValueError: ``texts`` is empty.
            TypeError: ``texts`` is a single str, or holds a non-str.
        """
        texts = self._check_texts(texts)
        if self.featurizer is not None:
            feeds = self.featurizer.encode(texts)
            return {name: feeds[encoding].astype(dtype, copy=False) for name, encoding, dtype in self._inputs}
        assert self.tokenizer is not None
        from ptmkit_export.fields import from_encodings

        return from_encodings(self.tokenizer.encode_batch(self.clip(texts)), self.manifest["inputs"], self._characters)

    @property
    def is_embedder(self) -> bool:
        """True for an export of sentence embeddings (``task == "embedding"``) or of word vectors
        (``task == "word-vectors"``), False for a classifier."""
        return self.manifest.get("task") in EMBEDDER_OUTPUTS

    @property
    def is_generator(self) -> bool:
        """True for a decoder export with a key/value cache (``task == "generation"``)."""
        return self.manifest.get("task") == GENERATION_TASK

    def generate(
        self,
        prompts: Sequence[str],
        max_new_tokens: int = 32,
        strategy: str = "greedy",
        *,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        num_beams: int = 4,
        length_penalty: float = 1.0,
        seed: int = 0,
        stop: Sequence[str] = (),
        truncate: str = "error",
    ) -> list[str]:
        """The continuation of each prompt (the prompt not repeated), decoded with the export's
        key/value cache by :func:`ptmkit_export.generation.generate_ids` (greedy, sampling with
        temperature/top-k/top-p, or beam search with length normalisation; see
        :class:`~ptmkit_export.generation.GenerationSettings`). Prompts run as one left-padded
        batch; a row ends at the end-of-text token, at a ``stop`` string (cut before it) or after
        ``max_new_tokens``. An empty prompt starts from the beginning-of-text token.

        Raises:
            TypeError: ``prompts`` is a single str.
            ValueError: not a generation export; no prompt; unusable settings; a prompt longer
                than the model's positions with ``truncate="error"`` (``"left"`` cuts it).
        """
        from ptmkit_export.generation import GenerationSettings, generate_ids

        settings = GenerationSettings(max_new_tokens, strategy, temperature, top_k, top_p, num_beams, length_penalty, seed)
        ids, stops, stopped = self._generation_inputs(prompts, settings, stop, truncate)
        assert self.decoder is not None
        self.decoder.reset()
        spec = self.manifest["decoder"]
        new = generate_ids(self.decoder.next_logits, ids, settings, int(self.manifest["pad_token_id"]), spec["eos_token_id"], int(self.manifest["max_sequence_length"]), stopped)
        return [cut_at_stops(self._plain_tokenizer.decode(row), stops) for row in new]

    def generate_stream(
        self,
        prompt: str,
        max_new_tokens: int = 32,
        strategy: str = "greedy",
        *,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        num_beams: int = 4,
        length_penalty: float = 1.0,
        seed: int = 0,
        stop: Sequence[str] = (),
        truncate: str = "error",
        decoder: CachedDecoder | None = None,
    ) -> Iterator[str]:
        """The continuation of one prompt, piece by piece as it is decoded: the pieces join to
        ``generate([prompt], ...)[0]`` with the same settings (:func:`ptmkit_export.decoding.text_chunks`
        holds back an unfinished UTF-8 character or stop string). Greedy and sampling give a
        piece per token or so; beam search one piece at the end (beams are ranked only then).

        The prompt and settings are checked at once; decoding runs as the iterator is read, one
        model call per step, and stops with no further call when the iterator is closed (a
        server's client went away).

        Args:
            prompt: the text to continue.
            max_new_tokens: as for :meth:`generate`, and so are ``strategy``, ``temperature``,
                ``top_k``, ``top_p``, ``num_beams``, ``length_penalty``, ``seed``, ``stop`` and
                ``truncate``.
            decoder: the key/value cache to decode with (default: the predictor's own); give each
                generation that runs at the same time its own, from :meth:`new_decoder`.

        Raises:
            TypeError: ``prompt`` is not a str.
            ValueError: as :meth:`generate`.
        """
        from ptmkit_export.generation import GenerationSettings, generate_steps

        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
        settings = GenerationSettings(max_new_tokens, strategy, temperature, top_k, top_p, num_beams, length_penalty, seed)
        ids, stops, stopped = self._generation_inputs([prompt], settings, stop, truncate)
        decoder = decoder or self.decoder
        assert decoder is not None
        decoder.reset()
        spec = self.manifest["decoder"]
        steps = generate_steps(decoder.next_logits, ids, settings, int(self.manifest["pad_token_id"]), spec["eos_token_id"], int(self.manifest["max_sequence_length"]), stopped)
        return text_chunks((step[0] for step in steps), self._plain_tokenizer.decode, stops)

    def new_decoder(self) -> CachedDecoder:
        """A key/value cache of its own over this export's session, so that several generations
        run at once (ONNX Runtime runs one session from several threads); see :meth:`generate_stream`.

        Raises:
            ValueError: not a generation export.
        """
        if self.decoder is None:
            raise ValueError(f"{self.export_dir}: a {self.manifest.get('task')!r} export does not generate text; export a decoder run (e.g. gpt)")
        spec = self.manifest["decoder"]
        return CachedDecoder(self.session, spec["layers"], spec["heads"], spec["head_dim"])

    def _generation_inputs(
        self, prompts: Sequence[str], settings: GenerationSettings, stop: Sequence[str], truncate: str
    ) -> tuple[list[list[int]], list[str], Callable[[int, list[int]], bool] | None]:
        """``(prompt token ids, stop strings, stop check or None)``; raises what :meth:`generate` documents."""
        if self.decoder is None or self.tokenizer is None:
            raise ValueError(f"{self.export_dir}: a {self.manifest.get('task')!r} export does not generate text; export a decoder run (e.g. gpt)")
        if isinstance(prompts, str):
            raise TypeError("prompts must be a list of strings, not a single str; wrap it: [prompt]")
        problems = settings.problems()
        if problems:
            raise ValueError(problems[0])
        if not prompts:
            raise ValueError("nothing to generate from: give at least one prompt")
        spec, plain = self.manifest["decoder"], self._plain_tokenizer
        max_length = int(self.manifest["max_sequence_length"])
        ids = encode_prompts(plain, list(prompts), spec["bos_token_id"], spec["prepend_bos"], max_length, truncate)
        stops = [s for s in stop if s]

        def stopped(row: int, new: list[int]) -> bool:
            return any(s in plain.decode(new) for s in stops)

        return ids, stops, stopped if stops else None

    def _outputs(self, texts: list[str]) -> np.ndarray:
        chunks = []
        for start in range(0, len(texts), self.batch_size):
            chunk = texts[start : start + self.batch_size]
            if self.text_input is not None:
                from ptmkit_export.tokenizer_graph import text_feed

                feeds = {self.text_input: text_feed(self.clip(chunk))}
            else:
                feeds = self.encode(chunk)
            (values,) = self.session.run([self._output], feeds)
            chunks.append(np.asarray(values, dtype=np.float32).reshape(len(chunk), -1))
        return np.concatenate(chunks, axis=0)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Sentence embeddings of ``texts`` (an export of a run without a head), or their mean word
        rows (a word-vector export: a one-word text gives that word's vector).

        The pooling (mean over the attention mask, CLS or max; optional L2 normalisation) is part
        of the ONNX graph, as the manifest's ``pooling`` records; padding to the longest text of
        each chunk does not change the result.

        Args:
            texts: non-empty list of str.

        Returns:
            float32 array of shape ``(len(texts), dim)``, rows in the order of ``texts``.

        A word-vector text without any row (every word out of the vocabulary, without n-grams
        to fall back on) gets the zero vector, as fastText's ``getWordVector`` gives a word
        without n-grams; it never fails the batch. :meth:`out_of_vocabulary` says which texts
        those are (gensim's word2vec ``KeyedVectors`` would raise ``KeyError`` for them).

        Raises:
            ValueError: ``texts`` is empty, or this export is a classifier (use :meth:`predict`).
            TypeError: ``texts`` is a single str, or holds a non-str.
        """
        texts = self._check_texts(texts)
        if not self.is_embedder:
            raise ValueError(f"{self.export_dir}: is a {self.manifest.get('task')} export with labels; use predict() or logits()")
        return self._outputs(texts)

    def out_of_vocabulary(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts),)`` bool: True where a word-vector export has no row for the text (its
        :meth:`embed` row is the zero vector); all False for a tokenizer export (every text has
        tokens)."""
        texts = self._check_texts(texts)
        if self.featurizer is None:
            return np.zeros(len(texts), dtype=bool)
        return np.asarray([not self.featurizer.rows(text) for text in texts], dtype=bool)

    def logits(self, texts: Sequence[str]) -> np.ndarray:
        """Raw model scores for ``texts``, run in chunks of :attr:`batch_size`.

        Args:
            texts: non-empty list of str.

        Returns:
            float32 array of shape ``(len(texts), len(labels))``, rows in the order of ``texts``.

        Raises:
            ValueError: ``texts`` is empty, or this is an embedding export (use :meth:`embed`).
            TypeError: ``texts`` is a single str, or holds a non-str.
        """
        texts = self._check_texts(texts)
        if self.is_embedder:
            raise ValueError(f"{self.export_dir}: is an embedding export (no labels); use embed()")
        logits = self._outputs(texts)
        if logits.shape[1] != len(self.labels):
            raise ExportDirError(
                f"{self.export_dir / 'manifest.json'}: model returned {logits.shape[1]} scores per text "
                f"but the manifest lists {len(self.labels)} labels"
            )
        return logits

    def predict(self, texts: Sequence[str]) -> list[Prediction]:
        """Classify ``texts``.

        Args:
            texts: non-empty list of str.

        Returns:
            One :class:`Prediction` per text, in order; probabilities are the softmax of
            :meth:`logits`, or their sigmoid when the manifest's ``activation`` is ``sigmoid``
            (:func:`probabilities`); the label is the most probable one either way.

        Raises:
            ValueError: ``texts`` is empty.
            TypeError: ``texts`` is a single str, or holds a non-str.
        """
        scores = probabilities(self.logits(texts), self.activation)
        return [
            Prediction(
                label=self.labels[int(np.argmax(row))],
                probabilities={label: float(p) for label, p in zip(self.labels, row, strict=True)},
            )
            for row in scores
        ]

    def __repr__(self) -> str:
        return f"Predictor({str(self.export_dir)!r}, variant={self.variant!r}, labels={self.labels!r})"
