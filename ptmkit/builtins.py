"""ptmkit's own objectives, heads and corpus readers, registered through the plugin hooks like
any plugin's (pytest's ``default_plugins``): the core has no private back door."""

from __future__ import annotations

from ptmkit import hookimpl
from ptmkit.contract import CorpusReader, Head, Objective


@hookimpl
def ptmkit_objectives() -> list[Objective]:
    """Masked LM (static/dynamic, whole-word), SpanBERT's span masking with its boundary
    objective, next-sentence and sentence-order prediction, ELECTRA's replaced-token detection,
    StructBERT's word and sentence structural objectives, UniLM's mixed attention masks, XLM's
    translation LM over parallel pairs, XLNet's permutation LM."""
    from ptmkit.objectives.mlm import MaskedLM
    from ptmkit.objectives.nsp import NextSentencePrediction
    from ptmkit.objectives.plm import PermutationLM
    from ptmkit.objectives.rtd import ReplacedTokenDetection
    from ptmkit.objectives.sop import SentenceOrderPrediction
    from ptmkit.objectives.span import SpanMasking
    from ptmkit.objectives.structbert import SentenceStructuralObjective, WordStructuralObjective
    from ptmkit.objectives.tlm import TranslationLM
    from ptmkit.objectives.unilm import UnifiedLM

    return [
        MaskedLM(), NextSentencePrediction(), SentenceOrderPrediction(), SpanMasking(), ReplacedTokenDetection(),
        WordStructuralObjective(), SentenceStructuralObjective(), UnifiedLM(), TranslationLM(), PermutationLM(),
    ]


@hookimpl
def ptmkit_heads() -> list[Head]:
    """Sequence classification."""
    from ptmkit.heads.classification import SequenceClassification

    return [SequenceClassification()]


@hookimpl
def ptmkit_corpus_readers() -> list[CorpusReader]:
    """Plain text, fastText ``__label__`` lines, TSV, CSV and JSON lines."""
    from ptmkit.data.readers import BUILTIN_READERS

    return list(BUILTIN_READERS)
