"""What every ``ptmkit import-hf`` importer shares: reading a Hugging Face checkpoint directory.

A Hugging Face checkpoint directory (as ``save_pretrained`` writes it) holds ``config.json``
(with its ``model_type``), ``model.safetensors`` and a tokenizer. A family that imports such
checkpoints (:class:`~ptmkit.contract.ImportsCheckpoints`) maps the config onto its own, checks
the tensors' shapes, ports the weights into its backbone and writes a run; the steps that do not
depend on the architecture are here, with one-line errors naming the file and the key or tensor:

* :func:`check_import_paths` before anything is read (the source exists, ``--out`` is free);
* :func:`read_hf_config`: ``config.json``, its ``model_type`` and required positive integers;
* :func:`read_weight_shapes`: the tensors of ``model.safetensors`` and their shapes, read with
  safetensors' NumPy API (no torch; a pickled ``pytorch_model.bin`` is refused: loading one can run
  arbitrary code); :func:`check_tensor_shapes` against what the config implies;
* :func:`porting_weights` around the port, :func:`write_imported_run` to write the run whole or
  not at all; :func:`assemble_import` runs these last steps in their order (the run config, the
  console line, the backbone, the port, the run), and :func:`open_safetensors` opens the weights
  for a family's own loader.

Importing this module imports neither TensorFlow nor safetensors.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ptmkit.errors import DataError, RunDirError
from ptmkit.io import read_json

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


class CheckpointError(DataError):
    """A Hugging Face checkpoint that ptmkit cannot import exactly; nothing was written."""


def check_import_paths(directory: str | Path, out: str | Path) -> tuple[Path, Path]:
    """``(directory, out)`` as paths, once ``directory`` exists and ``out`` is free.

    Raises:
        CheckpointError: no such checkpoint directory.
        RunDirError: ``out`` exists and is not an empty directory.
    """
    source, target = Path(directory), Path(out)
    if not source.is_dir():
        raise CheckpointError(f"{source}: no such checkpoint directory")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):  # before reading weights
        raise RunDirError(f"{target}: exists and is not an empty directory; choose another --out")
    return source, target


def read_hf_config(directory: Path, model_type: str, what: str, required: Iterable[str] = ()) -> tuple[Path, dict[str, Any]]:
    """``(path, config)``: ``DIR/config.json`` once it is a JSON object of ``model_type`` whose
    ``required`` keys are positive integers.

    Args:
        model_type: the ``model_type`` the importer reads (``"bert"``).
        what: the architecture's name in messages (``"BERT"``).
        required: keys that must be present as positive integers (sizes, counts).

    Raises:
        CheckpointError: no or unreadable ``config.json``, not an object, another ``model_type``,
            a missing required key or one that is not a positive integer.
    """
    path = directory / CONFIG_FILE
    if not path.is_file():
        raise CheckpointError(f"{directory}: no {CONFIG_FILE}; a Hugging Face checkpoint directory holds {CONFIG_FILE} and {WEIGHTS_FILE}")
    config = read_json(path, CheckpointError)
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(config).__name__}")
    if config.get("model_type") != model_type:
        raise CheckpointError(f"{path}: model_type {config.get('model_type')!r} is not a {what} checkpoint (the {what} importer reads model_type {model_type!r})")
    required = tuple(required)
    for key in required:
        if key not in config:
            raise CheckpointError(f"{path}: missing key {key!r} (a {what} config needs {', '.join(required)})")
        check_positive_key(path, config, key)
    return path, config


def check_positive_key(path: Path, config: dict[str, Any], key: str, default: Any = None) -> int:
    """``config[key]`` (or ``default`` when absent) once it is a positive integer.

    Raises:
        CheckpointError: naming ``path`` and ``key``.
    """
    value = config.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise CheckpointError(f"{path}: key {key!r} must be a positive integer, got {value!r}")
    return value


def read_weight_shapes(directory: Path) -> tuple[Path, dict[str, tuple[int, ...]]]:
    """``(path, {tensor name: shape})`` of ``DIR/model.safetensors``, read from its header.

    Raises:
        CheckpointError: sharded weights, only a pickled ``pytorch_model.bin``, no weights file, or
            one that safetensors cannot read (truncated, not safetensors).
    """
    from safetensors import SafetensorError, safe_open

    path = directory / WEIGHTS_FILE
    if not path.is_file():
        if (directory / "model.safetensors.index.json").is_file():
            raise CheckpointError(f"{directory}: sharded safetensors checkpoints are not supported yet; merge the shards into {WEIGHTS_FILE}")
        if (directory / "pytorch_model.bin").is_file():
            raise CheckpointError(
                f"{directory / 'pytorch_model.bin'}: a pickled torch checkpoint is refused (loading it can run arbitrary code); "
                f"convert it to {WEIGHTS_FILE} with transformers: AutoModel.from_pretrained(DIR).save_pretrained(DIR, safe_serialization=True)"
            )
        raise CheckpointError(f"{directory}: no {WEIGHTS_FILE}; a Hugging Face checkpoint directory holds {CONFIG_FILE} and {WEIGHTS_FILE}")
    try:
        with safe_open(str(path), framework="np") as weights:
            return path, {name: tuple(weights.get_slice(name).get_shape()) for name in weights.keys()}
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: not a readable safetensors file ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None


def check_tensor_shapes(
    path: Path,
    shapes: dict[str, tuple[int, ...]],
    expected: dict[str, tuple[int, ...]],
    resolve: Callable[[str], str | None],
    implied_by: str,
    optional: tuple[str, ...] = (),
) -> set[str]:
    """Check that every ``expected`` tensor is in ``shapes`` (through ``resolve``: the
    checkpoint's name for a key, e.g. under a ``bert.`` prefix, or None) with its shape.

    Args:
        implied_by: what the expected shapes follow from, for the missing-tensor message
            (``"12 layers, hidden 768"``).
        optional: key prefixes that may be missing (``("pooler.",)``).

    Returns:
        the ``optional`` prefixes with a missing tensor.

    Raises:
        CheckpointError: a missing tensor or one of another shape, naming it.
    """
    absent = set()
    for key, shape in expected.items():
        name = resolve(key)
        if name is None or name not in shapes:
            prefix = next((p for p in optional if key.startswith(p)), None)
            if prefix is None:
                raise CheckpointError(f"{path}: missing tensor {key!r} (expected for {implied_by})")
            absent.add(prefix)
            continue
        if shapes[name] != shape:
            raise CheckpointError(f"{path}: tensor {name!r} has shape {list(shapes[name])}, {CONFIG_FILE} implies {list(shape)}")
    return absent


@contextlib.contextmanager
def porting_weights(weights_file: str | Path) -> Iterator[None]:
    """Turn any error of the block (a port of checked weights that still fails) into one line.

    Raises:
        CheckpointError: naming ``weights_file`` and the error's type and first line.
    """
    try:
        yield
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointError(f"{weights_file}: cannot read weights ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None


def write_imported_run(
    target: Path, registry: Any, family: str, run_config: Any, tokenizer: Any, backbone: Any, tokenizer_file: Path | None,
    source: Path, weights: dict[str, Any], tokenizer_source: str, inputs: list[str], json_files: dict[str, Any] | None = None,
    **manifest_fields: Any,
) -> dict[str, Any]:
    """Write the imported run at ``target`` whole or not at all (:func:`~ptmkit.rundir.staged_run`,
    :func:`~ptmkit.rundir.write_backbone_run`), its manifest recording the checkpoint it came from.

    Args:
        run_config: the run's :class:`~ptmkit.config.RunConfig` (from
            :func:`~ptmkit.training.pretrain.imported_run_config`).
        tokenizer_file: the checkpoint's ``tokenizer.json`` to copy as it is, or None to save
            ``tokenizer``.
        weights: what :func:`read_weight_shapes`' caller reports of the weights file (its
            ``file``, ``bytes``, ``tensors``...), stored under ``imported_from``.
        tokenizer_source: where the tokenizer came from, in words (``"vocab.json + merges.txt"``).
        inputs: the backbone's input names, for the manifest.
        json_files: more files of the run, ``{name: JSON value}`` (BERT's ``pooling.json``).
        **manifest_fields: more manifest fields (``pooling``...); an ``imported_from`` dict here
            is merged into the recorded one.

    Returns:
        the manifest.

    Raises:
        RunDirError: ``target`` is taken; OutputError: its directory cannot be written.
    """
    from ptmkit.rundir import staged_run, write_backbone_run

    imported = {"format": "huggingface", "path": str(source.resolve()), "weights": weights, "tokenizer": tokenizer_source}
    imported.update(manifest_fields.pop("imported_from", {}))
    with staged_run(target, "import") as run:
        for name, value in (json_files or {}).items():
            run.write_json(name, value)
        return write_backbone_run(
            run, registry, family, run_config.to_dict(), tokenizer, backbone, tokenizer_file, imported_from=imported, inputs=inputs, **manifest_fields
        )


def open_safetensors(path: str | Path) -> Any:
    """``path`` opened with safetensors' NumPy API (no torch), for a weights loader of a family's
    own (``with open_safetensors(path) as file: file.get_tensor(name)``, a ``float32`` ... array).

    Returns:
        safetensors' ``safe_open`` handle (a context manager).

    Raises:
        safetensors.SafetensorError, OSError: an unreadable file (inside :func:`porting_weights`
            these become a :class:`CheckpointError`).
    """
    from safetensors import safe_open

    return safe_open(str(path), framework="np")


def assemble_import(
    target: Path, source: Path, family: str, config: Any, weights: dict[str, Any], tokenizer: Any, tokenizer_file: Path | None,
    tokenizer_source: str, *, build_backbone: Callable[[Any], Any], port_weights: Callable[[Any], None], description: str,
    inputs: Sequence[str], console: Any = None, json_files: dict[str, Any] | None = None, **manifest_fields: Any,
) -> dict[str, Any]:
    """The end of every ``import-hf``, once the checkpoint was read and checked: the run's config,
    one console line, the backbone with the checkpoint's weights, and the run written whole or not
    at all (:func:`write_imported_run`).

    Args:
        target: the run directory to write, from :func:`check_import_paths`.
        source: the checkpoint directory, from :func:`check_import_paths`.
        family: the family of the run (its plugin is recorded in the manifest).
        config: the family's model config (mapped from ``config.json``).
        weights: the family's report of the weights file, with its ``file``.
        tokenizer: the checkpoint's ``tokenizers.Tokenizer``.
        tokenizer_file: its ``tokenizer.json`` to copy as it is, or None (see :func:`write_imported_run`).
        tokenizer_source: where the tokenizer came from, in words.
        build_backbone: ``config`` -> the family's Keras backbone.
        port_weights: fills that backbone from the checkpoint; any error it raises that is not a
            :class:`CheckpointError` becomes one naming ``weights["file"]`` (:func:`porting_weights`).
        description: printed to ``console`` as it is (no Rich markup), before the backbone is built.
        inputs: the backbone's input names, for the manifest.
        console: a Rich console, or None for silence.
        json_files: more files of the run, passed to :func:`write_imported_run`.
        **manifest_fields: more manifest fields, passed to :func:`write_imported_run`.

    Returns:
        the manifest.

    Raises:
        CheckpointError: the port fails; RunDirError: ``target`` is taken; OutputError: its
            directory cannot be written.
    """
    from ptmkit.plugins import get_registry
    from ptmkit.training.pretrain import imported_run_config
    from ptmkit.training.setup import quiet_tensorflow

    quiet_tensorflow()
    registry = get_registry()
    run_config = imported_run_config(registry, family, config)
    if console is not None:
        console.print(description, markup=False, highlight=False)
    backbone = build_backbone(config)
    with porting_weights(weights["file"]):
        port_weights(backbone)
    return write_imported_run(
        target, registry, family, run_config, tokenizer, backbone, tokenizer_file, source, weights, tokenizer_source,
        inputs=list(inputs), json_files=json_files, **manifest_fields,
    )


SPIECE_FILE = "spiece.model"


def load_checkpoint_unigram(
    directory: Path,
    vocabulary_size: int,
    special_tokens: Sequence[str],
    model_name: str,
    post_processor: Callable[[Any], Any],
    lowercase_default: bool,
    never_split: Sequence[str] = (),
) -> tuple[Any, Path | None]:
    """A checkpoint's SentencePiece-style unigram tokenizer, as transformers' tokenizers load it:
    ``tokenizer.json`` as it is (returned with its path, to copy), else the pieces and scores of
    ``spiece.model`` (path None) as the core's unigram tokenizer (:func:`ptmkit.data.unigram.unigram_tokenizer`),
    lower-cased as ``tokenizer_config.json``'s ``do_lower_case`` says (else ``lowercase_default``:
    ALBERT's tokenizer lower-cases, XLNet's does not), accent-stripped unless it says
    ``keep_accents``, then SentencePiece's own normalisation table (``precompiled_charsmap``), the
    ``special_tokens`` of the vocabulary never split, and ``post_processor(tokenizer)`` as its template.

    Args:
        vocabulary_size: rows of the checkpoint's embedding matrix; every id needs one.
        special_tokens: the tokens the family's vocabulary must hold (e.g. ``<pad>``, ``<cls>``).
        model_name: for messages ("an ALBERT vocabulary needs ...").
        never_split: more of SentencePiece's control symbols to keep whole where the vocabulary
            has them (XLNet's ``<eod>``, ``<eop>``).

    Raises:
        CheckpointError: no tokenizer file; a ``spiece.model`` alone without the ``sentencepiece``
            package; an unreadable file; a missing special token, or a token id without an
            embedding row.
    """
    from tokenizers import Tokenizer

    json_path, spiece = directory / "tokenizer.json", directory / SPIECE_FILE
    if not json_path.is_file() and not spiece.is_file():
        raise CheckpointError(f"{directory}: no tokenizer.json nor {SPIECE_FILE}; the checkpoint's tokenizer is needed")
    where = json_path if json_path.is_file() else spiece
    try:
        if json_path.is_file():
            tokenizer, source = Tokenizer.from_file(str(json_path)), json_path
        else:
            tokenizer, source = _spiece_tokenizer(directory, [*special_tokens, *never_split], post_processor, lowercase_default), None
    except CheckpointError:
        raise
    except Exception as exc:  # tokenizers and sentencepiece raise bare Exceptions
        raise CheckpointError(f"{where}: cannot be read as a tokenizer ({str(exc).splitlines()[0]})") from None
    missing = [token for token in special_tokens if tokenizer.token_to_id(token) is None]
    if missing:
        raise CheckpointError(f"{where}: no {', '.join(missing)} token; {model_name} vocabulary needs {', '.join(special_tokens)}")
    rows = max(tokenizer.get_vocab(with_added_tokens=True).values()) + 1
    if rows > vocabulary_size:
        raise CheckpointError(f"{where}: the vocabulary has ids up to {rows - 1}, the embedding matrix {vocabulary_size} rows ({CONFIG_FILE} vocab_size)")
    return tokenizer, source


def _spiece_tokenizer(directory: Path, special_tokens: Sequence[str], post_processor: Callable[[Any], Any], lowercase_default: bool) -> Any:
    """``spiece.model``'s pieces as a unigram tokenizer (see :func:`load_checkpoint_unigram`)."""
    import importlib.util
    import json

    from tokenizers import models, normalizers

    from ptmkit.data.unigram import unigram_tokenizer

    path = directory / SPIECE_FILE
    if importlib.util.find_spec("sentencepiece") is None:
        raise CheckpointError(
            f"{path}: a SentencePiece model, which needs the sentencepiece package to read (pip install sentencepiece), or save the checkpoint's tokenizer.json"
        )
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(path.read_bytes())
    if not proto.pieces:
        raise CheckpointError(f"{path}: no pieces; not a SentencePiece model")
    settings_path = directory / "tokenizer_config.json"
    settings = json.loads(settings_path.read_text(encoding="utf-8")) if settings_path.is_file() else {}
    model = models.Unigram([(piece.piece, piece.score) for piece in proto.pieces], unk_id=proto.trainer_spec.unk_id, byte_fallback=False)
    tokenizer = unigram_tokenizer(model, bool(settings.get("do_lower_case", lowercase_default)), not settings.get("keep_accents", False))
    if proto.normalizer_spec.precompiled_charsmap:
        tokenizer.normalizer = normalizers.Sequence([tokenizer.normalizer, normalizers.Precompiled(proto.normalizer_spec.precompiled_charsmap)])
    tokenizer.add_special_tokens([token for token in special_tokens if tokenizer.token_to_id(token) is not None])  # control symbols: never split
    tokenizer.post_processor = post_processor(tokenizer)
    return tokenizer
