"""Translation training: ``ptmkit train transformer --parallel TRAIN.tsv [--dev DEV.tsv] --out RUN``;
denoising pre-training: ``ptmkit train transformer --corpus TEXTS --objective bart --out RUN``
(:func:`train_corpus`; ``t5_span`` and ``mass`` too, :mod:`ptmkit_transformer.denoising`); either
may start from another run's tokenizer and weights with ``--init RUN`` (``model.init``).

Stages, each kept by ``--resume``:

1. ``tokenizer.json``: the shared BPE vocabulary, trained on both sides of the training pairs (on
   the corpus, with ``<mask>`` and the sentinels, for denoising; copied from ``model.init``).
2. Keras ``fit`` over ``max_steps`` steps of ``batch_size`` pairs (step ``k``'s pairs a pure
   function of ``(seed, k)``, :func:`ptmkit_transformer.objectives.step_indices`), Adam with the
   paper's schedule, the label-smoothed loss; the full training state every
   ``checkpoint_every`` steps in ``checkpoints/`` (:func:`ptmkit.api.restore_state`), so a
   resumed run continues as the uninterrupted one would.
3. ``backbone.weights.h5``; the dev loss (every dev pair) and dev BLEU/chrF (greedy, the first
   ``dev_sentences``) in the returned metrics.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ptmkit.api import (
    BACKBONE_WEIGHTS,
    TOKENIZER,
    ConfigError,
    ParallelCorpus,
    RunDir,
    atomic_save,
    read_parallel,
    seed_everything,
)
from ptmkit_transformer.config import TransformerConfig
from ptmkit_transformer.data import check_known, check_languages, cut_count, encode, source_prefix


def _tokenizer(run: RunDir, texts: list[str], config: TransformerConfig, console: Any, extra_specials: list[str] | None = None) -> Any:
    """The run's vocabulary: kept by ``--resume``, copied from ``model.init``'s run, or trained on
    ``texts`` with ``extra_specials`` after the four."""
    import shutil

    from ptmkit_transformer.tokenizer import train_shared_bpe

    if (run / TOKENIZER).exists():
        return run.load_tokenizer()
    if config.init:
        source = RunDir(config.init).require(TOKENIZER)
        atomic_save(run / TOKENIZER, lambda tmp: shutil.copyfile(source, tmp))
        return run.load_tokenizer()
    started = time.perf_counter()
    tokenizer = train_shared_bpe(texts, config.vocabulary_size, config.min_frequency, extra_specials or [])
    atomic_save(run / TOKENIZER, lambda tmp: tokenizer.save(str(tmp)))
    console.print(f"trained a {tokenizer.get_vocab_size():,}-token shared BPE vocabulary on {len(texts):,} texts in {time.perf_counter() - started:.1f}s")
    return tokenizer


def compiled_model(config: TransformerConfig) -> tuple[Any, Any]:
    """``(backbone, training_model)``: the training model maps the backbone's inputs to
    ``logits`` ``(batch, target, vocabulary)`` float32, compiled with Adam (the paper's betas and
    epsilon; gradients clipped to the global norm ``clip_norm`` where set) on the
    inverse-square-root schedule and the label-smoothed loss."""
    import keras

    from ptmkit_transformer.backbone import build_backbone, output_logits
    from ptmkit_transformer.objectives import inverse_sqrt_schedule, label_smoothed_nll

    backbone = build_backbone(config)
    inputs = {name: keras.Input((None,), dtype="int32", name=name) for name in backbone.input}
    logits = keras.layers.Activation("linear", dtype="float32", name="logits")(output_logits(backbone, backbone(inputs)["decoder_sequence_output"]))
    model = keras.Model(inputs, {"logits": logits}, name="transformer_translation")
    smoothing = config.label_smoothing

    def loss(labels: Any, predicted: Any) -> Any:
        return label_smoothed_nll(labels, predicted, smoothing)

    optimizer = keras.optimizers.Adam(
        inverse_sqrt_schedule(config.hidden_dim, config.warmup_steps, config.learning_rate_scale),
        beta_1=config.adam_beta_1, beta_2=config.adam_beta_2, epsilon=config.adam_epsilon, global_clipnorm=config.clip_norm or None,
    )
    model.compile(optimizer=optimizer, loss={"logits": loss})
    return backbone, model


def step_batches(make: Any, start: int, stop: int) -> Any:
    """Steps ``start .. stop`` of ``make(step) -> (inputs, targets, weights)`` for ``fit``: on
    TensorFlow a ``tf.data.Dataset`` whose every array is ``(batch, length)`` with both axes
    dynamic (each step pads to its own longest pair, which TensorFlow's ``PyDataset`` adapter
    cannot feed: it fixes an axis that its first few batches happen to agree on); on another
    Keras backend (JAX) a ``PyDataset`` of the same steps, each batch its own shape."""
    import keras

    if keras.backend.backend() != "tensorflow":
        return _step_sequence(make, start, stop)
    import tensorflow as tf

    ids = tf.TensorSpec((None, None), tf.int32)
    names = ("encoder_token_ids", "encoder_padding_mask", "decoder_token_ids", "decoder_padding_mask")
    signature = ({name: ids for name in names}, {"logits": ids}, {"logits": tf.TensorSpec((None, None), tf.float32)})
    dataset = tf.data.Dataset.from_generator(lambda: (make(step) for step in range(start, stop)), output_signature=signature)
    return dataset.apply(tf.data.experimental.assert_cardinality(stop - start))  # Keras then knows the epoch's end


def _step_sequence(make: Any, start: int, stop: int) -> Any:
    """A ``keras.utils.PyDataset`` of steps ``start .. stop`` of ``make`` (:func:`step_batches`; defined here: Keras is imported after TensorFlow is set up)."""
    import keras

    class StepSequence(keras.utils.PyDataset):
        def __len__(self) -> int:
            return stop - start

        def __getitem__(self, index: int) -> Any:
            return make(start + index)

    return StepSequence()


def relative(weights: np.ndarray) -> np.ndarray:
    """``weights`` rescaled to mean 1 (Keras' default reduction then gives the mean over real labels)."""
    total = float(weights.sum())
    return weights if total <= 0 else (weights * (weights.size / total)).astype(np.float32)


def fit_steps(
    model: Any, backbone: Any, make: Any, run: RunDir, config: TransformerConfig, console: Any, tokens_per_step: int, data_flags: list[str], resume: bool,
) -> tuple[int, Any, float]:
    """Fit ``model`` on the steps of ``make(step) -> (inputs, targets, weights)`` up to
    ``max_steps`` (from the newest checkpoint with ``resume``; from ``model.init``'s backbone
    weights on a fresh run), checkpointing every ``checkpoint_every`` steps.

    Returns:
        ``(first step trained, the ProgressCallback, seconds)``.
    """
    from ptmkit.api import (
        CheckpointCallback,
        ProgressCallback,
        build_training_state,
        interrupt_note,
        latest_step,
        restore_state,
    )

    checkpoints = run / "checkpoints"
    start = restore_state(model, checkpoints) if resume and latest_step(checkpoints) else 0
    if start:
        console.print(f"resuming from step {start} ({checkpoints})")
    elif config.init:
        backbone.load_weights(str(RunDir(config.init).require(BACKBONE_WEIGHTS)))
        console.print(f"starting from the weights of {config.init}")
    progress = ProgressCallback(config.objective, start, config.max_steps, tokens_per_step, console, reset_metrics=True, step_log=run / "logs" / "steps.jsonl")
    started = time.perf_counter()
    if start < config.max_steps:
        command = ["ptmkit", "train", "transformer", *data_flags, "--out", str(run.path), "--resume"]
        build_training_state(model, make(start))  # one trace of the train step, not two
        with interrupt_note(checkpoints, config.max_steps, command):
            model.fit(
                step_batches(make, start, config.max_steps), epochs=1, shuffle=False, verbose=0,
                callbacks=[CheckpointCallback(checkpoints, start, config.max_steps, config.checkpoint_every), progress],
            )
    return start, progress, time.perf_counter() - started


def train_pairs(parallel: Path, dev: Path | None, run_dir: Path, config: TransformerConfig, console: Any, resume: bool = False) -> dict[str, Any]:
    """Train on ``parallel`` (module docstring); return the metrics.

    Raises:
        DataError: an unusable parallel or dev file (:func:`ptmkit.api.read_parallel`), a dev
            file of another language pair.
        RunDirError: a checkpoint that does not fit the config.
    """
    from ptmkit_transformer.objectives import pack_pairs, step_indices

    run = RunDir(run_dir)
    pairs = read_parallel(parallel)
    dev_pairs = read_parallel(dev) if dev is not None else None
    if dev is not None and dev_pairs is not None:
        check_languages(pairs, dev_pairs, parallel, dev)
    if config.objective != "translation":
        raise ConfigError(f"config key 'model.objective' = {config.objective!r} pre-trains on a --corpus; --parallel pairs train 'translation' (--objective translation)")
    tokenizer = _tokenizer(run, [*pairs.sources, *pairs.targets], config, console)
    specials = {name: tokenizer.token_to_id(token) for name, token in (("pad", "<pad>"), ("unk", "<unk>"), ("bos", config.decoder_start_token), ("eos", "</s>"))}
    if specials["bos"] is None:
        raise ConfigError(f"config key 'model.decoder_start_token' = {config.decoder_start_token!r} is not a token of the vocabulary")
    prefix = source_prefix(tokenizer, config)
    sources, targets = encode(tokenizer, pairs.sources), encode(tokenizer, pairs.targets)
    room = config.max_sequence_length - len(prefix)
    cut = cut_count(sources, room)
    if cut:
        reason = "model.max_sequence_length less </s>" + (" and the source start token" if prefix else "")
        warnings.warn(f"{parallel}: {cut:,} source(s) longer than {room - 1} tokens ({reason}) cut", stacklevel=2)
    dev_ids = None
    if dev is not None and dev_pairs is not None:
        dev_ids = (encode(tokenizer, dev_pairs.sources), encode(tokenizer, dev_pairs.targets))
        check_known(tokenizer, dev_ids[0], specials["unk"], dev)
    seed_everything(config.seed)
    backbone, model = compiled_model(config)
    limit = config.max_sequence_length

    def make(step: int) -> Any:
        rows = step_indices(config.seed, step, config.batch_size, len(sources))
        inputs, labels, weights = pack_pairs([sources[i] for i in rows], [targets[i] for i in rows], specials["bos"], specials["eos"], specials["pad"], limit, prefix)
        return inputs, {"logits": labels}, {"logits": relative(weights)}

    target_tokens = sum(len(t) + 1 for t in targets) / len(targets)
    data_flags = ["--parallel", str(parallel), *(["--dev", str(dev)] if dev else [])]
    start, progress, seconds = fit_steps(model, backbone, make, run, config, console, int(config.batch_size * target_tokens), data_flags, resume)
    checkpoints = run / "checkpoints"
    atomic_save(run / BACKBONE_WEIGHTS, lambda tmp: backbone.save_weights(str(tmp)))
    metrics: dict[str, Any] = {
        "steps": config.max_steps,
        "resumed_from_step": start,
        "train_seconds_this_session": round(seconds, 1),
        "target_tokens_per_second": round(progress.tokens_per_second, 1),
        "parameters": int(backbone.count_params()),
        "train_pairs": len(pairs),
        "train_pairs_skipped": pairs.skipped,
        "sources_cut": cut,
        "languages": "-".join(pairs.languages) if pairs.languages else None,
    }
    if dev_ids is not None and dev_pairs is not None:
        metrics.update(_dev_metrics(model, backbone, tokenizer, dev_pairs, dev_ids, specials, config))
    for old in sorted(checkpoints.glob("ckpt-*.npz"))[:-1]:  # a finished run keeps its last state only
        old.unlink()
    return metrics


def _dev_metrics(model: Any, backbone: Any, tokenizer: Any, dev: ParallelCorpus, ids: tuple[list[list[int]], list[list[int]]], specials: dict[str, int], config: TransformerConfig) -> dict[str, Any]:
    """The dev loss over every dev pair (label-smoothed, as trained) and, on the first
    ``dev_sentences``, greedy BLEU and chrF."""
    from ptmkit_transformer.objectives import pack_pairs
    from ptmkit_transformer.translate import Translator, score_translations

    total, weight = 0.0, 0.0
    for first in range(0, len(ids[0]), config.batch_size):
        rows = slice(first, first + config.batch_size)
        inputs, labels, weights = pack_pairs(ids[0][rows], ids[1][rows], specials["bos"], specials["eos"], specials["pad"], config.max_sequence_length, source_prefix(tokenizer, config))
        loss = model.evaluate(inputs, {"logits": labels}, sample_weight={"logits": relative(weights)}, verbose=0, return_dict=True)["loss"]
        total, weight = total + float(loss) * float(weights.sum()), weight + float(weights.sum())
    metrics: dict[str, Any] = {"dev_loss": round(total / weight, 4), "dev_pairs": len(dev)}
    count = min(config.dev_sentences, len(dev))
    if count:
        translator = Translator.from_parts(backbone, tokenizer, config)
        hypotheses = translator.translate(dev.sources[:count])
        scores = score_translations(hypotheses, dev.targets[:count])
        metrics.update({"dev_bleu": scores["bleu"], "dev_chrf": scores["chrf"], "dev_sentences_translated": count})
    return metrics


def read_documents(corpus: Path, tokenizer: Any, config: TransformerConfig, reserved: int = 0) -> tuple[list[list[list[int]]], int]:
    """The corpus lines as documents, each its sentences' token ids (:func:`ptmkit_transformer.denoising.split_text`),
    cut to the sentences that fit in ``max_sequence_length - 1 - reserved`` tokens (``reserved``:
    the source start token's place); lines with fewer than 2 tokens are left out. Returns
    ``(documents, lines cut)``."""
    from ptmkit.api import read_corpus
    from ptmkit_transformer.denoising import fit_document, split_text

    documents, cut = [], 0
    for text in read_corpus(corpus):
        sentences = encode(tokenizer, split_text(text))
        document = fit_document(sentences, config.max_sequence_length - 1 - reserved)
        cut += sum(len(s) for s in document) < sum(len(s) for s in sentences)
        if sum(len(s) for s in document) >= 2:
            documents.append(document)
    return documents, cut


def train_corpus(corpus: Path, run_dir: Path, config: TransformerConfig, console: Any, resume: bool = False) -> dict[str, Any]:
    """Pre-train on the documents of ``corpus`` with the denoising objective ``model.objective``
    (:mod:`ptmkit_transformer.denoising`): a vocabulary with ``<mask>`` and the sentinels, then
    the steps of :func:`fit_steps` with the translation loss on the noised pairs; return the metrics.

    Raises:
        ConfigError: ``model.objective`` is ``translation`` (it trains on ``--parallel`` pairs), or
            an ``--init`` run's vocabulary lacks the denoising specials.
        DataError: a corpus with no document of 2 tokens or more.
    """
    from ptmkit.api import DataError, read_corpus
    from ptmkit_transformer.denoising import DENOISING, denoising_specials, noised_pairs, special_ids
    from ptmkit_transformer.objectives import pack_pairs, step_indices

    if config.objective not in DENOISING:
        raise ConfigError(f"config key 'model.objective' = {config.objective!r} trains on --parallel pairs; pre-training on --corpus takes one of {', '.join(DENOISING)} (--objective bart)")
    run = RunDir(run_dir)
    tokenizer = _tokenizer(run, list(read_corpus(corpus)), config, console, denoising_specials(config))
    ids = special_ids(tokenizer, config)
    bos, eos, pad = (tokenizer.token_to_id(token) for token in (config.decoder_start_token, "</s>", "<pad>"))
    prefix = source_prefix(tokenizer, config)
    documents, cut = read_documents(corpus, tokenizer, config, len(prefix))
    if not documents:
        raise DataError(f"{corpus}: no line of 2 tokens or more to pre-train on")
    seed_everything(config.seed)
    backbone, model = compiled_model(config)

    def make(step: int) -> Any:
        sources, targets = noised_pairs(documents, step_indices(config.seed, step, config.batch_size, len(documents)), step, config, ids)
        inputs, labels, weights = pack_pairs(sources, targets, bos, eos, pad, config.max_sequence_length, prefix)
        return inputs, {"logits": labels}, {"logits": relative(weights)}

    tokens = sum(sum(len(s) for s in d) for d in documents) / len(documents)
    start, progress, seconds = fit_steps(model, backbone, make, run, config, console, int(config.batch_size * tokens), ["--corpus", str(corpus)], resume)
    atomic_save(run / BACKBONE_WEIGHTS, lambda tmp: backbone.save_weights(str(tmp)))
    for old in sorted((run / "checkpoints").glob("ckpt-*.npz"))[:-1]:  # a finished run keeps its last state only
        old.unlink()
    return {
        "objective": config.objective,
        "steps": config.max_steps,
        "resumed_from_step": start,
        "train_seconds_this_session": round(seconds, 1),
        "document_tokens_per_second": round(progress.tokens_per_second, 1),
        "parameters": int(backbone.count_params()),
        "train_documents": len(documents),
        "documents_cut": cut,
    }
