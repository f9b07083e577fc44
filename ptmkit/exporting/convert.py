"""Stage 1 of ``ptmkit export``, convert: the run's Keras model to one self-contained ONNX file.

tf2onnx as Keras' ``model.export(format="onnx")`` drives it, in less memory
(:func:`convert_to_onnx`: 2.2 GB peak for all-MiniLM-L6-v2 where ``model.export`` took 5.9 GB),
inputs as the family declares them (:class:`ptmkit.contract.InputSpec`) with their named axes
symbolic, the output renamed ``logits`` (a fine-tuned head) or ``embeddings`` (a run without a
head: the backbone with its sentence pooling, :mod:`ptmkit.embedding`). :func:`release_memory`
hands what a stage freed back to the OS before the next one starts.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from ptmkit.contract import InputSpec
from ptmkit.errors import ExportError
from ptmkit.exporting.source import ExportSource


def convert_to_onnx(model: Any, path: Path, inputs: Sequence[InputSpec], output_name: str | Sequence[str] = "logits", fuse_lstm: bool = False) -> None:
    """Export ``model`` to ONNX at ``path``: one graph input per declared input (its dtype, its
    named axes as symbolic dimensions, fixed sizes kept) and one output named ``output_name``
    with a symbolic ``batch`` axis (a sequence of names: a model returning a list of as many
    tensors, e.g. a multi-task run's logits, gets one output per name, in order). With ``fuse_lstm``, each fusible Keras ``LSTM`` layer becomes
    one ONNX ``LSTM`` node with ``sequence_lens`` from its mask, which must then have each row's
    padding at its end (:mod:`ptmkit.exporting.recurrent`); without, tf2onnx writes a masked
    LSTM as a ``Loop``.

    tf2onnx (``from_function``, as Keras' ``model.export(format="onnx")`` calls it) in its
    ``large_model`` mode: the weights are frozen straight into NumPy values, not run through a
    TensorFlow graph and grappler (for all-MiniLM-L6-v2 that step alone took 1.8 GB), then put
    back into one self-contained file. tf2onnx's graph optimizers run as in its default mode (each
    on a copy of the graph; one that fails is skipped), with the garbage of each collected before
    the next (:func:`_collecting_tf2onnx_optimizers`): left to Python's collector, those copies
    held 3.7 GB. The copies share the weights (:func:`_weights_shared_by_graph_copies`), and the
    frozen weights go once converted (:func:`_frozen_weights_dropped_once_converted`). Peak memory
    for all-MiniLM-L6-v2 (22M parameters): 5.9 GB at first, 1.9 GB now, of which 1.05 GB is
    TensorFlow and the loaded model (benchmarks/export_memory.py).
    """
    import onnx
    import tensorflow as tf
    import tf2onnx

    from ptmkit.exporting import recurrent

    signature = [{s.name: tf.TensorSpec((None, *s.shape), tf.as_dtype(s.dtype), name=s.name) for s in inputs}]
    function = tf.function(lambda inputs: model(inputs, training=False), input_signature=signature)
    fused = recurrent.fused_lstm_calls(model) if fuse_lstm else contextlib.nullcontext({})
    collect = model.count_params() >= COLLECT_BETWEEN_PASSES_PARAMETERS
    with warnings.catch_warnings(), _collecting_tf2onnx_optimizers(collect), fused as found:
        warnings.simplefilter("ignore", FutureWarning)  # tf2onnx probes np.object
        try:
            from keras.src.export.tf2onnx_lib import patch_tf2onnx

            patch_tf2onnx()  # what model.export does: tf2onnx 1.17 on NumPy 2
        except ImportError:  # a Keras that no longer needs it
            pass
        extra = {"custom_op_handlers": dict(recurrent.TF2ONNX_HANDLERS), "extra_opset": [recurrent.placeholder_opset()]} if fuse_lstm else {}
        graph_model, storage = tf2onnx.convert.from_function(function, signature, large_model=True, **extra)
    del function
    _inline_external_tensors(graph_model, storage.name_to_tensor_data)
    del storage
    if fuse_lstm:
        recurrent.build_lstm_nodes(graph_model, found)
    graph = graph_model.graph
    axes = {s.name: s.axes for s in inputs}
    for value in graph.input:
        for dim, axis in zip(value.type.tensor_type.shape.dim, axes[value.name], strict=True):
            if not dim.HasField("dim_value"):
                dim.dim_param = axis
    names = [output_name] if isinstance(output_name, str) else list(output_name)
    if len(graph.output) != len(names):
        raise ExportError(f"the converted graph has {len(graph.output)} outputs, expected {len(names)} ({', '.join(names)})")
    renamed = {output.name: name for output, name in zip(graph.output, names, strict=True)}
    for node in graph.node:
        node.output[:] = [renamed.get(name, name) for name in node.output]
    for output in graph.output:
        output.name = renamed[output.name]
        output.type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.checker.check_model(graph_model)
    onnx.save(graph_model, str(path))
    del graph_model
    release_memory()


def _inline_external_tensors(graph_model: Any, data: dict[str, bytes]) -> None:
    """Move tf2onnx's ``large_model`` tensors (``data``: location -> raw bytes) into the graph, so
    the model is one file (all-MiniLM-L6-v2: 101 MB, far below protobuf's 2 GB)."""
    from onnx import TensorProto, external_data_helper

    for tensor in external_data_helper._get_all_tensors(graph_model):
        if tensor.data_location == TensorProto.EXTERNAL:
            location = next(entry.value for entry in tensor.external_data if entry.key == "location")
            tensor.raw_data = data.pop(location)
            del tensor.external_data[:]
            tensor.data_location = TensorProto.DEFAULT


#: Models with fewer parameters skip the collection between tf2onnx's passes: it frees little and
#: costs a full collection of the process (0.5-1 s each with TensorFlow loaded, 24 passes).
COLLECT_BETWEEN_PASSES_PARAMETERS = 4_000_000


@contextlib.contextmanager
def _collecting_tf2onnx_optimizers(collect: bool = True) -> Iterator[None]:
    """Within the block, tf2onnx's ONNX optimizers run each on a copy of the graph (its default
    mode, which ``large_model`` turns off: optimising in place kept 3 GB alive) and, with
    ``collect``, the garbage of each pass (reference cycles holding NumPy copies of the weights)
    is collected before the next."""
    import tf2onnx.optimizer as optimizer

    original = optimizer.optimize_graph
    passes = getattr(optimizer, "_optimizers", None)
    if passes is None:  # another tf2onnx layout: convert as it is
        yield
        return

    def collected(factory: Any) -> Any:
        def make() -> Any:
            if collect:
                gc.collect()
            return factory()

        return make

    def optimize_graph(graph: Any, catch_errors: bool = True, optimizers: Any = None) -> Any:
        wrapped = {name: collected(factory) for name, factory in (optimizers or passes).items()}
        return original(graph, True, optimizers=wrapped)

    optimizer.optimize_graph = optimize_graph
    try:
        with _weights_shared_by_graph_copies(), _frozen_weights_dropped_once_converted():
            yield
    finally:
        optimizer.optimize_graph = original
        gc.collect()


@contextlib.contextmanager
def _frozen_weights_dropped_once_converted() -> Iterator[None]:
    """Within the block, the frozen TensorFlow weights that tf2onnx's ``large_model`` mode keeps
    beside the graph (``const_node_values``: node name -> bytes) are dropped as soon as the ONNX
    graph holds its own copies (after ``process_tf_graph``), not after the optimizers: 91 MB less
    for all-MiniLM-L6-v2 during the passes."""
    import tf2onnx.convert as convert

    original = getattr(convert, "process_tf_graph", None)
    if original is None:  # another tf2onnx layout: convert as it is
        yield
        return

    def process_tf_graph(*args: Any, **kwargs: Any) -> Any:
        graph = original(*args, **kwargs)
        values = kwargs.get("const_node_values")
        if isinstance(values, dict):
            values.clear()
        return graph

    convert.process_tf_graph = process_tf_graph
    try:
        yield
    finally:
        convert.process_tf_graph = original


#: Tensor attributes of at least this many bytes are shared, not copied, by :func:`copy.deepcopy`.
SHARED_TENSOR_BYTES = 4096


@contextlib.contextmanager
def _weights_shared_by_graph_copies() -> Iterator[None]:
    """Within the block, :func:`copy.deepcopy` of an ONNX ``AttributeProto`` holding a tensor of
    :data:`SHARED_TENSOR_BYTES` or more returns the attribute itself; smaller ones are copied.

    tf2onnx copies the whole graph before each optimizer pass (to restore it if the pass fails),
    weights included, while the graph before optimisation is still held by its caller: three or
    four copies of the weights at once. Its optimizers never change a tensor in place (they set a
    new ``value`` attribute), so the copies can share them: all-MiniLM-L6-v2's conversion peak
    fell from 2,223 MB to 1,971 MB, and the graph is the same
    (``tests/test_export_variants.py::test_conversion_matches_keras_model_export``).
    """
    import copy

    from onnx import AttributeProto

    def share_weights(attribute: AttributeProto, memo: dict[int, Any]) -> AttributeProto:
        if attribute.type == AttributeProto.TENSOR and attribute.t.ByteSize() >= SHARED_TENSOR_BYTES:
            return attribute
        duplicate = AttributeProto()
        duplicate.CopyFrom(attribute)
        return duplicate

    dispatch = copy._deepcopy_dispatch  # type: ignore[attr-defined]
    previous = dispatch.get(AttributeProto)
    dispatch[AttributeProto] = share_weights
    try:
        yield
    finally:
        if previous is None:
            dispatch.pop(AttributeProto, None)
        else:
            dispatch[AttributeProto] = previous


@contextlib.contextmanager
def collections_skip_live_objects() -> Iterator[None]:
    """Within the block, Python's full collections (:func:`release_memory` after each export stage,
    one per tf2onnx pass of a large model) scan only the objects made in it.

    What is alive at its start (TensorFlow's, Keras' and tf2onnx's modules and the caller's objects:
    300,000 or more, about 0.5 s a collection) is set aside with :func:`gc.freeze` and handed back
    with :func:`gc.unfreeze` at its end, to be collected as before. A tiny BERT's export (fp32 and
    int8, in a fresh process) spent 4.3 of its 13.5 s in eight such scans. A no-op when the caller
    has frozen objects itself (a test process, which freezes before each module): freezing does not
    nest, and the unfreeze would hand back the caller's too.
    """
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def release_memory() -> None:
    """Collect Python's garbage and hand freed heap memory back to the OS (glibc's
    ``malloc_trim``; elsewhere only the collection): after a stage that freed gigabytes, the next
    one then starts from what is really in use, not from the stage's peak."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def release_keras() -> None:
    """Drop Keras' global state (layer name counters, cached graphs) once no model is needed."""
    import keras

    keras.backend.clear_session()
    release_memory()


def convert_run(model: Any, path: Path, source: ExportSource, console: Console) -> None:
    """:func:`convert_to_onnx` of the run's ``model`` to ``path`` (fp32), under a status line.

    Raises:
        ExportError: the conversion or the ONNX checker failed, naming the run and the error's
            first line.
    """
    release_memory()  # loading the weights left freed buffers behind
    with console.status("converting to ONNX (tf2onnx)"):
        try:
            convert_to_onnx(model, path, source.family.inputs, source.outputs or source.output, fuse_lstm=source.family.fuse_lstm_export)
        except Exception as exc:
            raise ExportError(f"ONNX conversion of {source.run.path} failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
