"""The base class of the static word-vector families (word2vec, GloVe, fastText, NNLM)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from ptmkit.contract import InputSpec, ModelFamily, SentenceFeatures

if TYPE_CHECKING:
    from ptmkit.wordvectors import WordVectors


class WordVectorFamily(ModelFamily):
    """A family of static word vectors that trains itself and can resume
    (:class:`~ptmkit.contract.Resumable`, :class:`~ptmkit.contract.ProvidesWordVectors`,
    :class:`~ptmkit.contract.ProvidesSentenceFeatures`: averaged word vectors).

    Inputs ``row_ids`` ``(batch, rows)`` int32 and ``row_mask`` ``(batch, rows)`` float32 (the
    rows summed into a word's vector: one for a word, its n-grams too for a subword family);
    :meth:`load_word_vectors` reads the run's ``vocabulary.tsv`` and vector matrix with
    :func:`ptmkit.wordvectors.load_run_vectors`. Subclasses set ``name``, ``description``,
    ``config_class`` and implement ``train`` (:class:`~ptmkit.contract.TrainsItself`).
    """

    #: How training uses a machine, for ``ptmkit config`` and the refusal of ``--distribute``.
    scaling: ClassVar[str] = (
        "trains itself in one process on one host (TensorFlow's CPU thread pools use its cores); it does not run under tf.distribute"
    )
    #: ``scaling`` of the word-prediction families (word2vec, fastText: :mod:`ptmkit.wordvectors.kernel`
    #: and :mod:`ptmkit.wordvectors.training`).
    PRODUCER_AND_STEP: ClassVar[str] = (
        "trains itself on one host: the CPU kernel (model.backend) on model.threads threads that share the matrices (Hogwild), "
        "or the Keras step on two threads (one builds the examples, one runs the XLA step); it does not run under tf.distribute"
    )
    inputs: ClassVar[tuple[InputSpec, ...]] = (
        InputSpec("row_ids", ("batch", "rows"), "int32", field="row_ids"),
        InputSpec("row_mask", ("batch", "rows"), "float32", field="row_mask"),
    )

    def load_word_vectors(self, run_dir: Path) -> WordVectors:
        from ptmkit.wordvectors import load_run_vectors

        return load_run_vectors(run_dir)

    def sentence_features(self, run_dir: Path) -> SentenceFeatures:
        """The mean of a text's word vectors (:func:`ptmkit.features.averaged_word_vectors`),
        lower-cased as the run's ``model.lowercase`` says (:class:`~ptmkit.contract.ProvidesSentenceFeatures`).

        Raises:
            RunDirError: missing or corrupted vector files.
        """
        from ptmkit.features import averaged_word_vectors, run_lowercase

        return averaged_word_vectors(self.load_word_vectors(run_dir), run_lowercase(run_dir))

    def has_checkpoint(self, run_dir: Path) -> bool:
        """Whether ``run_dir`` holds an epoch checkpoint
        (:class:`ptmkit.wordvectors.training.EpochCheckpoints`, where the in-tree families save theirs
        through :class:`ptmkit.wordvectors.training.ResumableEpochs`)."""
        from ptmkit.rundir import has_epoch_checkpoint

        return has_epoch_checkpoint(run_dir)
