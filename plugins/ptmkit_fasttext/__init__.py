"""ptmkit's fastText plugin: the ``fasttext`` family (Bojanowski et al. 2017), word vectors as
the sum of a word vector and hashed character n-gram vectors, trained with skip-gram or CBOW and
negative sampling; out-of-vocabulary words get vectors from their n-grams.

It also adds ``ptmkit import-fasttext MODEL.bin --out RUN_DIR`` (through the
``ptmkit_register_commands`` hook), which turns a Facebook fastText ``.bin`` into a run that every
word-vector command serves; the ``fasttext-supervised`` family (Joulin et al. 2017), whose runs
``ptmkit export`` writes as ONNX with their featurizer (:class:`ptmkit.contract.ClassifiesRows`); and the
``fasttext`` fine-tune head, which trains that classifier from any word-vector run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ptmkit.api import Head, InputSpec, ModelFamily, RowClassifier, WordVectorFamily, hookimpl
from ptmkit_fasttext.config import FastTextConfig
from ptmkit_fasttext.head import FastTextHead, FastTextHeadConfig
from ptmkit_fasttext.supervised import FastTextClassifierConfig

__all__ = ["FastTextClassifierConfig", "FastTextClassifierFamily", "FastTextConfig", "FastTextFamily", "FastTextHead", "FastTextHeadConfig"]


class FastTextFamily(WordVectorFamily):
    """fastText: words as bags of character n-grams."""

    name = "fasttext"
    scaling = WordVectorFamily.PRODUCER_AND_STEP
    description = "fastText skip-gram / CBOW with character n-grams (static word vectors, OOV vectors)"
    config_class = FastTextConfig

    def train(self, corpus: Path, run_dir: Path, config: FastTextConfig, console: Any, resume: bool = False) -> dict[str, Any]:
        from ptmkit_fasttext.train import train_fasttext

        return train_fasttext(corpus, run_dir, config, console, resume)

    def load_word_vectors(self, run_dir: Path) -> Any:
        from ptmkit_fasttext.train import load_run

        return load_run(Path(run_dir))


class FastTextClassifierFamily(ModelFamily):
    """fastText's supervised text classifier on ``__label__`` files."""

    name = "fasttext-supervised"
    description = "fastText supervised classifier (Joulin et al. 2017) on __label__ files"
    inputs = (
        InputSpec("row_ids", ("batch", "rows"), "int32", field="row_ids"),
        InputSpec("row_mask", ("batch", "rows"), "float32", field="row_mask"),
    )

    config_class = FastTextClassifierConfig

    def train(self, corpus: Path, run_dir: Path, config: Any, console: Any) -> dict[str, Any]:
        from ptmkit_fasttext.supervised import train_classifier

        return train_classifier(corpus, run_dir, config, console)

    def load_row_classifier(self, run_dir: Path) -> RowClassifier:
        from ptmkit_fasttext.supervised import load_row_classifier

        return load_row_classifier(Path(run_dir))


def import_fasttext(model: Path, out: Path) -> dict[str, Any]:
    """Turn a Facebook fastText ``.bin`` into a ptmkit run directory (see :func:`ptmkit_fasttext.binfile.read_bin`):
    a ``fasttext`` word-vector run, or for a supervised model (``./fasttext supervised``) a
    ``fasttext-supervised`` classifier run that ``ptmkit export --dev FILE`` and ``ptmkit predict``
    serve (:func:`ptmkit_fasttext.supervised.save_imported_classifier`).

    Raises:
        DataError: an unreadable, quantized or inconsistent model; a classifier ptmkit cannot
            serve exactly (``-loss hs`` / ``ns``, ``wordNgrams > 1``).
        RunDirError: ``out`` exists and is not empty.
    """
    import shutil

    from ptmkit.api import RunDir, RunDirError, get_registry
    from ptmkit_fasttext.binfile import read_bin

    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise RunDirError(f"{out}: exists and is not an empty directory; choose another --out")
    fasttext = read_bin(model)
    if not fasttext.words:
        raise RunDirError(f"{model}: a model without words (a supervised classifier?) has no word vectors to import")
    args = fasttext.args
    family = "fasttext-supervised" if args["model"] == "supervised" else "fasttext"
    out.mkdir(parents=True, exist_ok=True)
    try:
        if family == "fasttext-supervised":
            from ptmkit_fasttext.supervised import save_imported_classifier

            summary = save_imported_classifier(fasttext, model, out)
        else:
            summary = _save_word_vectors(fasttext, model, out)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    plugin = get_registry().owner("family", family)
    RunDir(out).write_manifest(
        stage="import",
        family=family,
        plugin={"name": plugin.name, "distribution": plugin.distribution, "version": plugin.version},
        source=str(model.resolve()),
        fasttext_args=args,
    )
    return summary


def _save_word_vectors(fasttext: Any, model: Path, out: Path) -> dict[str, Any]:
    """The run files of an unsupervised fastText model (see :func:`import_fasttext`)."""
    from ptmkit.api import Vocabulary, atomic_write_text
    from ptmkit_fasttext.train import save_run

    args = fasttext.args
    vocabulary = Vocabulary(fasttext.words, fasttext.counts, fasttext.ntokens, len(fasttext.words), 0)
    save_run(out, vocabulary, fasttext.input, int(args["minn"]), int(args["maxn"]), int(args["bucket"]), source=str(model.resolve()), args=args)
    atomic_write_text(out / "config.toml", f'family = "fasttext"\n# imported from {model.resolve()}\n')
    return {"words": len(fasttext.words), "labels": len(fasttext.labels), "dim": int(args["dim"]), "minn": args["minn"], "maxn": args["maxn"], "bucket": args["bucket"]}


@hookimpl
def ptmkit_model_families() -> list[ModelFamily]:
    """fastText (unsupervised word vectors) and fastText's supervised classifier."""
    return [FastTextFamily(), FastTextClassifierFamily()]


@hookimpl
def ptmkit_heads() -> list[Head]:
    """fastText's classifier as a fine-tune head on any word-vector run."""
    return [FastTextHead()]


@hookimpl
def ptmkit_register_commands(cli: Any) -> None:
    """``ptmkit import-fasttext MODEL.bin --out RUN_DIR``."""
    @cli.command("import-fasttext")
    def import_command(
        model: Annotated[Path, typer.Argument(help="A Facebook fastText .bin model.")],
        out: Annotated[Path, typer.Option(help="Run directory to create.")],
    ) -> None:
        """Import a Facebook fastText .bin (vocabulary, n-gram buckets, input matrix) as a run:
        vectors, including out-of-vocabulary ones, equal fastText's. A supervised model becomes a
        classifier run (softmax or -loss ova; export it with --dev FILE)."""
        summary = import_fasttext(model, out)
        print(f"imported {model} -> {out}: " + ", ".join(f"{k} {v}" for k, v in summary.items()))
