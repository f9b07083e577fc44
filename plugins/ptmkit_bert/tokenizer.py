"""WordPiece tokenization for BERT with Hugging Face ``tokenizers``.

The trained ``tokenizer.json`` carries the normaliser (BERT's: clean text, CJK spacing, and
lower-casing plus accent stripping only for an uncased vocabulary), BERT's pre-tokeniser, the
WordPiece model and a post-processor that adds ``[CLS] A [SEP] (B [SEP])`` with segment ids 0/1,
so that any runtime holding the file (``ptmkit_export`` included) encodes exactly like training.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from ptmkit.api import DataError, SpecialTokens

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def _bert_tokenizer(lowercase: bool, model: Any) -> Any:
    """A ``Tokenizer`` with BERT's normaliser, pre-tokeniser and WordPiece decoder around ``model``."""
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers

    tokenizer = Tokenizer(model)
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=lowercase, lowercase=lowercase
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    return tokenizer


def _learn(texts: Iterable[str], vocabulary_size: int, lowercase: bool, min_frequency: int, specials: list[str]) -> dict[str, int]:
    """One run of Hugging Face's WordPiece trainer (BPE merges, ``##`` continuations) on ``texts``;
    the vocabulary it learned, ``specials`` first."""
    from tokenizers import models, trainers

    tokenizer = _bert_tokenizer(lowercase, models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocabulary_size,
        min_frequency=min_frequency,
        special_tokens=specials,
        continuing_subword_prefix="##",
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    return dict(tokenizer.get_vocab())


def train_wordpiece(texts: Iterable[str], vocabulary_size: int, lowercase: bool, min_frequency: int = 2) -> Any:
    """Train a WordPiece vocabulary of at most ``vocabulary_size`` entries on ``texts``.

    The vocabulary is Hugging Face ``tokenizers``' (its ``WordPieceTrainer``: BPE merges with a
    ``##`` continuation prefix), made the same from process to process, whatever the trainer's
    threading. That trainer numbers the ``##x`` continuation characters in hash-map order
    (a new order each process) and breaks ties between equally frequent merges by those numbers,
    so one corpus gave different vocabularies (huggingface/tokenizers#1794, fixed upstream by
    sorting them in PR #2066, not released). Here a first pass collects the continuation
    characters, and the second pass hands them to the trainer in sorted order, ahead of its own
    numbering; merges then tie-break in one order. Ids are renumbered at the end: BERT's specials
    (``[PAD]`` 0 ... ``[MASK]`` 4), then the learned tokens sorted by their text.

    Args:
        texts: the corpus' paragraphs; iterated twice (an iterator is read into memory first).
        vocabulary_size: the most entries, specials included.
        lowercase: an uncased vocabulary (lower-casing and accent stripping before WordPiece).
        min_frequency: a merge must occur this often to enter the vocabulary.

    Raises:
        DataError: the texts produced no token (e.g. only whitespace or control characters).
    """
    from tokenizers import models, processors

    if isinstance(texts, Iterator):
        texts = list(texts)
    alphabet = _learn(texts, 1, lowercase, min_frequency, list(SPECIALS))  # no merges: characters, ##characters
    continuations = sorted(token for token in alphabet if token.startswith("##"))
    learned = _learn(texts, vocabulary_size, lowercase, min_frequency, [*SPECIALS, *continuations])
    if len(learned) <= len(SPECIALS):
        raise DataError("the corpus gave no token to build a vocabulary from (only whitespace or control characters?)")
    ordered = sorted(token for token in learned if token not in SPECIALS)
    vocab = {token: i for i, token in enumerate([*SPECIALS, *ordered])}
    tokenizer = _bert_tokenizer(
        lowercase, models.WordPiece(vocab=vocab, unk_token="[UNK]", max_input_chars_per_word=100, continuing_subword_prefix="##")
    )
    tokenizer.add_special_tokens(list(SPECIALS))
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return tokenizer


#: The names each special-token role goes by when the tokenizer file does not declare it:
#: BERT's, then SentencePiece / RoBERTa's (XLM-R, multilingual-e5 put BERT weights behind those).
ROLE_NAMES = {
    "pad": ("[PAD]", "<pad>"),
    "unk": ("[UNK]", "<unk>"),
    "cls": ("[CLS]", "<s>"),
    "sep": ("[SEP]", "</s>"),
    "mask": ("[MASK]", "<mask>"),
}


def declared_special_tokens(tokenizer: Any) -> dict[str, int]:
    """The special-token ids that ``tokenizer.json`` itself declares, by role.

    ``pad`` from its ``padding`` section, ``unk`` from its model (``unk_token`` / ``unk_id``),
    ``cls`` and ``sep`` from its post-processor (the first and last special token of the
    single-sequence template: BertProcessing, RobertaProcessing, TemplateProcessing, inside a
    Sequence too). A role the file does not declare is absent.
    """
    spec = json.loads(tokenizer.to_str())
    roles: dict[str, int] = {}
    padding = spec.get("padding") or {}
    if isinstance(padding.get("pad_id"), int):
        roles["pad"] = padding["pad_id"]
    model = spec.get("model") or {}
    if isinstance(model.get("unk_id"), int):
        roles["unk"] = model["unk_id"]
    elif isinstance(model.get("unk_token"), str) and tokenizer.token_to_id(model["unk_token"]) is not None:
        roles["unk"] = tokenizer.token_to_id(model["unk_token"])
    processors = [spec.get("post_processor") or {}]
    while processors:
        processor = processors.pop(0)
        kind = processor.get("type")
        if kind == "Sequence":
            processors.extend(processor.get("processors") or [])
        elif kind in ("BertProcessing", "RobertaProcessing"):
            roles["cls"], roles["sep"] = int(processor["cls"][1]), int(processor["sep"][1])
        elif kind == "TemplateProcessing":
            single = [item["SpecialToken"]["id"] if "SpecialToken" in item else None for item in processor.get("single") or []]
            ids = {name: entry["ids"] for name, entry in (processor.get("special_tokens") or {}).items()}
            for role, name in (("cls", single[0] if single else None), ("sep", single[-1] if single else None)):
                if name is not None and len(ids.get(name, [])) == 1:
                    roles[role] = int(ids[name][0])
    return roles


def special_tokens(tokenizer: Any) -> SpecialTokens:
    """Ids of BERT's special tokens in ``tokenizer``.

    Each role is what the tokenizer file declares (:func:`declared_special_tokens`), else the
    first of its :data:`ROLE_NAMES` in the vocabulary: a ptmkit-trained WordPiece tokenizer gives
    ``[PAD]``, ``[UNK]``, ``[CLS]``, ``[SEP]``, ``[MASK]``; an imported SentencePiece one
    ``<pad>``, ``<unk>``, ``<s>``, ``</s>``, ``<mask>``.

    Raises:
        DataError: a role is neither declared nor named in the vocabulary.
    """
    declared = declared_special_tokens(tokenizer)
    ids = {}
    for role, names in ROLE_NAMES.items():
        token_id = declared.get(role)
        for name in names:
            if token_id is None:
                token_id = tokenizer.token_to_id(name)
        if token_id is None:
            raise DataError(f"tokenizer has no {role} token ({' or '.join(names)}); a BERT vocabulary needs {', '.join(SPECIALS)}")
        ids[role] = token_id
    return SpecialTokens(ids)
