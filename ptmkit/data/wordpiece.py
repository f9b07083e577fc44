"""WordPiece tokenization (Devlin et al. 2019; Wu et al. 2016) with Hugging Face ``tokenizers``,
for every family whose vocabulary is WordPiece (``[PAD] [UNK] [CLS] [SEP] [MASK]``).

A trained ``tokenizer.json`` carries the normaliser (clean text, CJK spacing, and lower-casing
plus accent stripping only for an uncased vocabulary), the WordPiece pre-tokeniser, the WordPiece
model and a post-processor that adds ``[CLS] A [SEP] (B [SEP])`` with segment ids 0/1, so that
any runtime holding the file (``ptmkit_export`` included) encodes exactly like training. The
``tokenizers`` library names these components after the model that introduced WordPiece
(``BertNormalizer``, ``BertPreTokenizer``, ``BertProcessing``); they are the format's names.

A checkpoint's WordPiece tokenizer (``tokenizer.json``, else ``vocab.txt`` and
``tokenizer_config.json``) is read as transformers' ``AutoTokenizer`` reads it
(:func:`load_checkpoint_wordpiece`), for every importer of a WordPiece checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ptmkit.contract import SpecialTokens
from ptmkit.errors import DataError

#: The special tokens of a trained WordPiece vocabulary, at ids 0-4 in this order.
SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def _wordpiece_tokenizer(lowercase: bool, model: Any) -> Any:
    """A ``Tokenizer`` with WordPiece's normaliser, pre-tokeniser and decoder around ``model``."""
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

    tokenizer = _wordpiece_tokenizer(lowercase, models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
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
    numbering; merges then tie-break in one order. Ids are renumbered at the end: the specials
    (``[PAD]`` 0 ... ``[MASK]`` 4, :data:`SPECIALS`), then the learned tokens sorted by their text.

    Args:
        texts: the corpus' paragraphs; iterated twice (an iterator is read into memory first).
        vocabulary_size: the most entries, specials included.
        lowercase: an uncased vocabulary (lower-casing and accent stripping before WordPiece).
        min_frequency: a merge must occur this often to enter the vocabulary.

    Returns:
        a ``tokenizers.Tokenizer`` with the ``[CLS] A [SEP] B [SEP]`` post-processor (segment ids
        0 then 1).

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
    tokenizer = _wordpiece_tokenizer(
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
#: WordPiece's, then SentencePiece / byte-level BPE's (XLM-R, multilingual-e5 put WordPiece-model
#: weights behind those).
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


def wordpiece_special_tokens(tokenizer: Any) -> SpecialTokens:
    """Ids of the special tokens in a WordPiece ``tokenizer``.

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
            raise DataError(f"tokenizer has no {role} token ({' or '.join(names)}); a WordPiece vocabulary needs {', '.join(SPECIALS)}")
        ids[role] = token_id
    return SpecialTokens(ids)


#: transformers' default special tokens of a WordPiece tokenizer class (``BertTokenizer``,
#: ``ElectraTokenizer``, ...), and of the byte-level / SentencePiece classes of
#: :data:`SENTENCEPIECE_CLASSES` that some WordPiece-architecture checkpoints name in
#: ``tokenizer_config.json`` (``tokenizer_class``).
WORDPIECE_TOKEN_NAMES = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]"}
SENTENCEPIECE_TOKEN_NAMES = {"unk_token": "<unk>", "sep_token": "</s>", "pad_token": "<pad>", "cls_token": "<s>", "mask_token": "<mask>"}
SENTENCEPIECE_CLASSES = ("RobertaTokenizer", "XLMRobertaTokenizer", "CamembertTokenizer")


def special_token_names(directory: Path) -> dict[str, str]:
    """The special tokens transformers' ``AutoTokenizer`` gives the checkpoint, by role.

    The tokenizer class's defaults (:data:`WORDPIECE_TOKEN_NAMES`, or
    :data:`SENTENCEPIECE_TOKEN_NAMES` for a ``tokenizer_class`` in :data:`SENTENCEPIECE_CLASSES`),
    overridden by ``tokenizer_config.json``, then by ``special_tokens_map.json`` (the order of
    ``PreTrainedTokenizerBase.from_pretrained``); a value is a string or an AddedToken dict
    (``{"content": ...}``); ``null`` removes the role.

    Returns:
        ``{"unk_token": ..., "sep_token": ..., "pad_token": ..., "cls_token": ..., "mask_token": ...}``
        (roles set to ``null`` are absent).

    Raises:
        CheckpointError: either file is not valid JSON.
    """
    files = [directory / "tokenizer_config.json", directory / "special_tokens_map.json"]
    options = [_read_json(path) if path.is_file() else {} for path in files]
    options = [option if isinstance(option, dict) else {} for option in options]
    tokenizer_class = str(options[0].get("tokenizer_class") or "").removesuffix("Fast")
    names: dict[str, str | None] = dict(SENTENCEPIECE_TOKEN_NAMES if tokenizer_class in SENTENCEPIECE_CLASSES else WORDPIECE_TOKEN_NAMES)
    for option in options:
        for role in WORDPIECE_TOKEN_NAMES:
            if role in option:
                value = option[role]
                names[role] = value.get("content") if isinstance(value, dict) else value
    return {role: str(name) for role, name in names.items() if name is not None}


def _read_json(path: Path) -> Any:
    from ptmkit.hf_checkpoints import CheckpointError
    from ptmkit.io import read_json

    return read_json(path, CheckpointError)


def read_checkpoint_tokenizer(directory: Path, names: dict[str, str]) -> tuple[Any, Path]:
    """``tokenizer.json`` as it is, else the WordPiece tokenizer transformers' ``BertTokenizer``
    builds from ``vocab.txt`` and ``tokenizer_config.json`` (a token listed twice keeps its last
    line's id, as in transformers).

    Raises:
        CheckpointError: neither file, or a file that cannot be read.
    """
    from tokenizers import Tokenizer

    from ptmkit.hf_checkpoints import CheckpointError

    json_path, vocab_path = directory / "tokenizer.json", directory / "vocab.txt"
    if json_path.is_file():
        try:
            return Tokenizer.from_file(str(json_path)), json_path
        except Exception as exc:  # tokenizers raises a bare Exception
            raise CheckpointError(f"{json_path}: cannot be read as a tokenizers file ({str(exc).splitlines()[0]})") from None
    if not vocab_path.is_file():
        raise CheckpointError(f"{directory}: no tokenizer.json or vocab.txt; the checkpoint's tokenizer is needed to encode text as it was trained")
    from tokenizers.implementations import BertWordPieceTokenizer

    options = _read_json(directory / "tokenizer_config.json") if (directory / "tokenizer_config.json").is_file() else {}
    lowercase = bool(options.get("do_lower_case", True))
    try:
        wordpiece = BertWordPieceTokenizer(
            str(vocab_path),
            lowercase=lowercase,
            strip_accents=options.get("strip_accents"),
            handle_chinese_chars=bool(options.get("tokenize_chinese_chars", True)),
            **{role: names.get(role, default) for role, default in WORDPIECE_TOKEN_NAMES.items()},
        )
    except Exception as exc:
        raise CheckpointError(f"{vocab_path}: cannot be read as a WordPiece vocabulary ({str(exc).splitlines()[0]})") from None
    return Tokenizer.from_str(wordpiece.to_str()), vocab_path


def load_checkpoint_wordpiece(directory: Path, vocabulary_size: int) -> tuple[Any, str, bool]:
    """A checkpoint's WordPiece tokenizer, as transformers' ``AutoTokenizer`` loads it.

    ``tokenizer.json`` as it is, else one built from ``vocab.txt`` (:func:`read_checkpoint_tokenizer`).
    As in transformers, the vocabulary may be smaller than the embedding matrix (rows padded to a
    multiple of 8, a duplicated ``vocab.txt`` line): every id the tokenizer gives needs a row. The
    segment ids are the post-processor's (a RoBERTa-style one gives zeros, as transformers feeds
    a tokenizer without ``token_type_ids``). The pad token is transformers'
    (:func:`special_token_names`); when the file does not declare it, the returned tokenizer
    carries it in its ``padding`` section, where :func:`wordpiece_special_tokens` reads it.

    Args:
        directory: the checkpoint directory.
        vocabulary_size: rows of the checkpoint's token embedding (``config.json`` ``vocab_size``).

    Returns:
        ``(tokenizers.Tokenizer, source file name, unchanged)``; ``unchanged`` when the run may
        copy ``tokenizer.json`` byte for byte.

    Raises:
        CheckpointError: neither file, an unreadable file, a token id without an embedding row,
            or a special token missing from the vocabulary.
    """
    from ptmkit.hf_checkpoints import CheckpointError

    names = special_token_names(directory)
    tokenizer, source = read_checkpoint_tokenizer(directory, names)
    vocabulary = tokenizer.get_vocab(with_added_tokens=True)
    rows = max(vocabulary.values(), default=-1) + 1
    if rows > vocabulary_size:
        token = max(vocabulary, key=vocabulary.__getitem__)
        raise CheckpointError(
            f"{source}: vocabulary has {len(vocabulary)} tokens, ids up to {rows - 1} ({token!r}), but the embedding matrix has "
            f"{vocabulary_size} rows (config.json vocab_size / embeddings.word_embeddings.weight)"
        )
    pad = names.get("pad_token", WORDPIECE_TOKEN_NAMES["pad_token"])
    pad_id = tokenizer.token_to_id(pad)
    if pad_id is None:
        raise CheckpointError(f"{source}: the pad token {pad!r} (tokenizer_config.json / special_tokens_map.json pad_token) is not in the vocabulary")
    unchanged = source.name == "tokenizer.json"
    try:
        if wordpiece_special_tokens(tokenizer).pad != pad_id:
            tokenizer.enable_padding(pad_id=pad_id, pad_token=pad)
            unchanged = False
        wordpiece_special_tokens(tokenizer)
    except DataError as exc:
        raise CheckpointError(f"{source}: {exc}") from None
    return tokenizer, source.name, unchanged
