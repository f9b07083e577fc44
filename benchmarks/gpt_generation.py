"""GPT generation through ONNX Runtime: ptmkit's decoder export with its key/value cache against
recomputing the prefix, and against Hugging Face optimum's ``ORTModelForCausalLM``.

The model: a random-init GPT-2, transformers' ``GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=256,
n_head=4, n_positions=1024))`` (5.47M parameters with the 8,000-entry vocabulary), torch seed 0,
every weight then multiplied by 2 so that greedy decoding does not repeat one token
(``plugins/ptmkit_gpt/tests/test_gpt_hf.py``'s recipe; its factor 4 leaves the logits of this
larger model too large for the export's 1e-4 parity check). Its vocabulary: a byte-level BPE of
8,000 entries trained on ``data/corpus/enwiki-106.txt`` by ``ptmkit_gpt.tokenizer`` (no package
ships GPT-2's own tokenizer files, and no hub is reached). ``save_pretrained`` writes WORK/checkpoint;
ptmkit: ``ptmkit import-hf WORK/checkpoint --out WORK/run`` then ``ptmkit export WORK/run`` (the fp32
decoder with a key/value cache that ``onnx.helper`` writes); optimum:
``ORTModelForCausalLM.from_pretrained(WORK/checkpoint, export=True)``, saved to WORK/optimum and
loaded from there.

Table 1, the key/value cache against recomputing the prefix (ptmkit only, batch 1, greedy): a
prompt of exactly C tokens (``--contexts``, default 64, 256, 512: the start of the corpus's token
stream) decoded for ``--new-tokens`` tokens by ``ptmkit_export.generation.generate_steps``, the
time of every step taken between its yields (model call, argmax, bookkeeping; wall and process
CPU time). Per-new-token latency: the median step after the first; the first step (the prefill: the C prompt tokens with an
empty cache) is the same work both ways and is its own column. ``cache``: ``CachedDecoder.next_logits``
of ``ptmkit_export.Predictor(export).decoder`` (what ``Predictor.generate`` runs: the new token and
the past keys and values). ``recompute``: the same graph fed the whole prefix with an empty past at
every step and its last position's logits (the export holds no separate no-cache graph, so this
also projects every position onto the vocabulary, as a decoder without a cache does).

Table 2, against optimum: the same 8 prompts (the first tokens of the corpus's first 8 lines, 8 to
32 tokens) at batch 1 (each prompt alone) and batch 8 (all at once, left-padded with
``<|endoftext|>``, attention mask 0 there), greedy, ``--new-tokens`` tokens each, the end-of-text
token ignored on both sides (every row runs the full count). Per-token latency: the wall time of a
whole generation, prefill included, over the new tokens of a row: ptmkit's
``ptmkit_export.generation.generate_ids`` over ``Predictor(export, threads=T).decoder.next_logits``;
optimum's ``model.generate(input_ids, attention_mask=..., do_sample=False, max_new_tokens=N,
eos_token_id=None)``. Batch 1: the 8 prompts' times summed over 8 N; batch 8: a generation's time
over N (each step gives 8 tokens). ratio = ptmkit / optimum (goal: <= 1.0). CPU columns: the
process CPU time of the same spans (``time.process_time``), steadier than wall time on a shared
machine. ``in session.run``: the wall time inside ONNX Runtime's ``InferenceSession.run`` (the
instance's ``run`` wrapped on both sides), so that the rest is each side's decoding loop (ptmkit:
NumPy; optimum: transformers' ``generate`` with torch tensors). Identical rows: generated token ids
equal, row for row.

Table 3, the ONNX graphs alone: one call of each export's ``model.onnx`` in its own ONNX Runtime
session (same options), one new token over a past of random keys and values (batch x past:
1 x 64, 1 x 512, 8 x 64), called alternately ``GRAPH_CALLS`` times, the first fifth dropped;
median process-CPU and wall ms per call. ptmkit's export is made with ``--optimize 2 --int8 --dev
CORPUS`` (the gate decodes the corpus's first 64 lines), and its ``model.opt.onnx`` (fused
``MultiHeadAttention`` with the cache, ``SkipLayerNormalization``, ``FastGelu``) and
``model.int8.onnx`` (dynamic int8 of the optimized graph) are timed in the same rotation; tables 1
and 2 use the fp32 ``model.onnx``, as optimum's side is fp32. optimum's graph takes ``input_ids``, ``attention_mask``,
``position_ids`` (int64) and ``past_key_values.{i}.key/value``; ptmkit's ``token_ids``, ``padding_mask``
(int32) and ``past_key_{i}``/``past_value_{i}``.

Fairness: ONNX Runtime ``intra_op_num_threads = --threads`` (default 1) and one inter-op thread on
both sides, default graph optimisations on both, ``torch.set_num_threads(--threads)`` for optimum's
tensor work around the session. In each of ``--rounds`` rounds every measurement runs once per
side, the order flipped each round; the first round is a warm-up and is dropped; medians of the
rounds' figures.

Processes: torch crashes when it is imported after TensorFlow, and optimum-onnx 0.1.0 (the latest
release) pins transformers < 4.58 while ptmkit runs transformers 5, so nothing heavy is imported
here: a child with this interpreter (transformers 5) writes the checkpoint, a child runs ptmkit's
``import-hf`` and ``export``, and optimum runs in a child worker under ``--optimum-python`` (default
``/work/venv-optimum/bin/python`` when it exists) that answers JSON lines (token ids and timings).
That interpreter is a separate virtual environment, so that installing optimum changes nothing in
ptmkit's::

    python -m venv --system-site-packages /work/venv-optimum
    /work/venv-optimum/bin/python -m pip install "optimum-onnx[onnxruntime]==0.1.0"

(it adds optimum 2.1.0 and, inside the venv only, transformers 4.57.6, tokenizers 0.22.2 and
huggingface_hub 0.36.2; torch, onnxruntime, onnx and numpy are the system's). Without optimum the
script measures ptmkit alone and says so (``--out`` then refuses: a results page needs its anchor).

Run (about 2 minutes on two shared cores)::

    python benchmarks/gpt_generation.py --out benchmarks/results/gpt_generation.md

``--quick``: a tiny model (2 layers, hidden 64, vocabulary 500, 128 positions), contexts 16 and 48,
6 new tokens, 2 rounds: a smoke test (tests/test_benchmark_gpt_generation.py). ``--json FILE``: the
figures and token ids as JSON.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "data" / "corpus" / "enwiki-106.txt"
VENV_PYTHON = Path("/work/venv-optimum/bin/python")
PROMPT_LENGTHS = (32, 8, 24, 16, 28, 12, 20, 30)  # tokens of each of the 8 prompts of table 2
FULL = {"layers": 4, "hidden": 256, "heads": 4, "vocabulary": 8000, "positions": 1024, "scale": 2.0}
QUICK = {"layers": 2, "hidden": 64, "heads": 2, "vocabulary": 500, "positions": 128, "scale": 2.0}

#: Writes the random-init GPT-2 (job on stdin as JSON; this interpreter's transformers and torch).
CHECKPOINT_SCRIPT = """
import json, sys
import torch
from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast
job = json.load(sys.stdin)
m = job["model"]
tokenizer = GPT2TokenizerFast(tokenizer_file=job["tokenizer"], bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>")
eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")
config = GPT2Config(vocab_size=len(tokenizer), n_positions=m["positions"], n_embd=m["hidden"], n_layer=m["layers"], n_head=m["heads"],
                    bos_token_id=eot, eos_token_id=eot)
torch.manual_seed(0)
model = GPT2LMHeadModel(config).eval()
with torch.no_grad():  # a larger spread than the 0.02 init: greedy decoding that does not repeat one token
    for p in model.parameters():
        p.mul_(m["scale"])
model.save_pretrained(job["out"])
tokenizer.save_pretrained(job["out"])
print(json.dumps({"eot": eot, "parameters": sum(p.numel() for p in model.parameters())}))
"""

#: Runs ``ptmkit import-hf`` and ``ptmkit export`` in one child (one TensorFlow start): it imports
#: while the checkpoint is written, then reads the checkpoint's and the run's paths on stdin.
PTMKIT_SCRIPT = """
import sys
from ptmkit.cli import main
import ptmkit_gpt.backbone  # keras-hub, Keras and TensorFlow: the slow imports
checkpoint, run, prompts = sys.stdin.read().split()
for argv in (["import-hf", checkpoint, "--out", run], ["export", run, "--optimize", "2", "--int8", "--dev", prompts]):
    code = main(argv)
    if code:
        raise SystemExit(f"ptmkit {' '.join(argv)}: exit {code}")
"""

#: The optimum worker (argv: threads): imports, reads its job line (checkpoint, out), exports,
#: then answers one JSON line per request line.
WORKER_SCRIPT = """
import json, sys, time
import importlib.metadata as md
import onnxruntime as ort
import torch
from optimum.onnxruntime import ORTModelForCausalLM
threads = int(sys.argv[1])
torch.set_num_threads(threads)
job = json.loads(sys.stdin.readline())
started = time.perf_counter()
ORTModelForCausalLM.from_pretrained(job["checkpoint"], export=True).save_pretrained(job["out"])
exported = time.perf_counter() - started
options = ort.SessionOptions()
options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
model = ORTModelForCausalLM.from_pretrained(job["out"], session_options=options, provider="CPUExecutionProvider")
in_session = [0.0]
run = model.session.run
def timed_run(*args, **kwargs):
    start = time.perf_counter()
    try:
        return run(*args, **kwargs)
    finally:
        in_session[0] += time.perf_counter() - start
model.session.run = timed_run
versions = {name: md.version(name) for name in ("optimum", "optimum-onnx", "transformers", "torch", "onnxruntime", "tokenizers")}
print(json.dumps({"versions": versions, "export_seconds": exported, "inputs": [i.name for i in model.session.get_inputs()][:4]}), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    ids, mask = torch.tensor(request["ids"]), torch.tensor(request["mask"])
    wall, cpu, in_session[0] = time.perf_counter(), time.process_time(), 0.0
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=request["new"],
                             eos_token_id=None, pad_token_id=request["pad"])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(json.dumps({"tokens": out[:, ids.shape[1]:].tolist(), "wall": wall, "cpu": cpu, "session": in_session[0]}), flush=True)
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, help="checkpoint, runs and exports (default /tmp/gpt-generation[-quick]); rebuilt each run")
    parser.add_argument("--contexts", default="64,256,512", help="prompt lengths of table 1, in tokens")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens generated per prompt")
    parser.add_argument("--rounds", type=int, default=6, help="rounds, the first a dropped warm-up (>= 2)")
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads (and torch's), both sides")
    parser.add_argument("--optimum-python", type=Path, help=f"the interpreter with optimum-onnx (default {VENV_PYTHON} if present, else this one)")
    parser.add_argument("--quick", action="store_true", help="a tiny model, few tokens, 2 rounds: a smoke test")
    parser.add_argument("--json", type=Path, help="write the figures and token ids here as JSON")
    parser.add_argument("--out", type=Path, help="write the Markdown results page here (atomically)")
    args = parser.parse_args(argv)
    if args.quick:
        args.contexts, args.new_tokens, args.rounds = "16,48", 6, 2
    args.model = dict(QUICK if args.quick else FULL)
    args.work = args.work or Path("/tmp/gpt-generation" + ("-quick" if args.quick else ""))
    args.optimum_python = args.optimum_python or (VENV_PYTHON if VENV_PYTHON.exists() else Path(sys.executable))
    try:
        args.context_list = [int(c) for c in args.contexts.split(",")]
    except ValueError:
        parser.error(f"--contexts {args.contexts!r}: comma-separated token counts expected")
    if args.rounds < 2 or args.new_tokens < 2 or args.threads < 1 or min(args.context_list) < 1:
        parser.error("--rounds and --new-tokens must be >= 2, --threads and every context >= 1")
    if max(args.context_list + [max(PROMPT_LENGTHS)]) + args.new_tokens > args.model["positions"]:
        parser.error(f"a context plus --new-tokens passes the model's {args.model['positions']} positions")
    return args


# ---------------------------------------------------------------- the model, both exports


def child_env() -> dict[str, str]:
    """This environment with the repository's packages first on ``PYTHONPATH`` (the worktree's
    ptmkit, plugins and lean runtime, whatever is installed)."""
    paths = [str(ROOT), str(ROOT / "plugins"), str(ROOT / "export"), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p), TF_CPP_MIN_LOG_LEVEL="3")


def build_model(args: argparse.Namespace) -> dict[str, Any]:
    """Tokenizer, checkpoint and ptmkit export in ``args.work`` (rebuilt); returns the checkpoint's
    facts (``eot``, ``parameters``) and the seconds each step took."""
    from tokenizers import processors

    from ptmkit_gpt.tokenizer import train_byte_level_bpe

    for name in ("checkpoint", "run", "optimum"):
        shutil.rmtree(args.work / name, ignore_errors=True)
    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    tokenizer = train_byte_level_bpe(lines[:400] if args.quick else lines, args.model["vocabulary"], 2)
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)  # GPT-2's: no specials around a text
    tokenizer.save(str(args.work / "tokenizer.json"))
    job = {"tokenizer": str(args.work / "tokenizer.json"), "out": str(args.work / "checkpoint"), "model": args.model}
    started = time.perf_counter()
    made = subprocess.run([sys.executable, "-c", CHECKPOINT_SCRIPT], input=json.dumps(job), capture_output=True, text=True, env=child_env())
    if made.returncode:
        raise SystemExit(f"writing the transformers checkpoint failed:\n{made.stderr[-3000:]}")
    facts = json.loads(made.stdout.strip().splitlines()[-1])
    facts["checkpoint_seconds"] = time.perf_counter() - started
    return facts


def start_ptmkit() -> subprocess.Popen[str]:
    """The child that runs ``ptmkit import-hf`` and ``ptmkit export`` (:data:`PTMKIT_SCRIPT`),
    started so that it imports while the checkpoint is written."""
    return subprocess.Popen([sys.executable, "-c", PTMKIT_SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(child_env(), KERAS_BACKEND="tensorflow"))


def export_ptmkit(child: subprocess.Popen[str], args: argparse.Namespace) -> float:
    """Hand ``child`` the checkpoint; the seconds until its import and export are done."""
    started = time.perf_counter()
    out, err = child.communicate(f"{args.work / 'checkpoint'}\n{args.work / 'run'}\n{CORPUS}\n")
    if child.returncode:
        raise SystemExit(f"ptmkit import-hf / export failed:\n{out[-2000:]}\n{err[-3000:]}")
    return time.perf_counter() - started


class OptimumWorker:
    """optimum's side in a child process (module docstring), started at once so that it imports
    while the checkpoint is written: ``export`` hands it the checkpoint, ``generate`` runs
    ``model.generate`` on left-padded ids and returns ``(new token ids, [wall s, CPU s, s in session.run])``.

    Attributes:
        ready: the worker's first answer (``versions``, ``export_seconds``, ``inputs``), or None.
        problem: why the worker could not start (its stderr's last line), or None.
    """

    def __init__(self, python: Path, log: Path, threads: int) -> None:
        env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
        env.update(USE_TF="0", USE_TORCH="1", TF_CPP_MIN_LOG_LEVEL="3", TRANSFORMERS_VERBOSITY="error", HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore")
        self.log = log
        self._stderr = self.log.open("w")
        self.process = subprocess.Popen([str(python), "-c", WORKER_SCRIPT, str(threads)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self._stderr, text=True, env=env, cwd=log.parent)
        self.ready: dict[str, Any] | None = None
        self.problem: str | None = None

    def _send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(message) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:  # it died (e.g. no optimum): wait_ready tells why
            pass

    def export(self, checkpoint: Path, out: Path) -> None:
        """Hand the worker the checkpoint to export to ``out`` (answered by :meth:`wait_ready`)."""
        self._send({"checkpoint": str(checkpoint), "out": str(out)})

    def _receive(self) -> dict[str, Any] | None:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        return json.loads(line) if line else None

    def wait_ready(self) -> bool:
        """Wait for the export; False (and ``problem`` set) when the worker died."""
        self.ready = self._receive()
        if self.ready is None:
            self.process.wait()
            self._stderr.flush()
            lines = [line for line in self.log.read_text(errors="replace").splitlines() if line.strip()]
            self.problem = lines[-1] if lines else f"exit {self.process.returncode}"
        return self.ready is not None

    def generate(self, ids: Any, mask: Any, new: int, pad: int) -> tuple[list[list[int]], list[float]]:
        self._send({"ids": ids.tolist(), "mask": mask.tolist(), "new": new, "pad": pad})
        answer = self._receive()
        if answer is None:
            raise SystemExit(f"the optimum worker died; see {self.log}")
        return answer["tokens"], [answer["wall"], answer["cpu"], answer["session"]]

    def close(self) -> None:
        if self.process.stdin:
            try:
                self.process.stdin.close()
            except BrokenPipeError:
                pass
        self.process.wait(timeout=60)
        self._stderr.close()


# ---------------------------------------------------------------- measurements


def corpus_ids(tokenizer: Any, quick: bool) -> tuple[list[int], list[list[int]]]:
    """The corpus's token stream (its lines joined by spaces; enough for the longest context) and
    the 8 prompts of table 2 (the first :data:`PROMPT_LENGTHS` tokens of its first 8 lines)."""
    lines = [line for line in CORPUS.read_text(encoding="utf-8").splitlines() if line.strip()]
    stream = tokenizer.encode(" ".join(lines[:40]), add_special_tokens=False).ids
    lengths = [max(2, n // 2) for n in PROMPT_LENGTHS] if quick else list(PROMPT_LENGTHS)
    prompts = [e.ids[:n] for e, n in zip(tokenizer.encode_batch(lines[:8], add_special_tokens=False), lengths, strict=True)]
    return stream, prompts


def step_times(next_logits: Any, prompt: list[int], new: int) -> tuple[list[int], list[float], list[float]]:
    """Greedy tokens of one prompt and the wall and process-CPU seconds of each step (between the
    loop's yields)."""
    from ptmkit_export.generation import GenerationSettings, generate_steps

    tokens: list[int] = []
    wall: list[float] = []
    cpu: list[float] = []
    start, start_cpu = time.perf_counter(), time.process_time()
    for added in generate_steps(next_logits, [prompt], GenerationSettings(max_new_tokens=new), 0, None):
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        tokens += added[0]
        start, start_cpu = time.perf_counter(), time.process_time()
    return tokens, wall, cpu


def cache_table(predictor: Any, stream: list[int], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Table 1 (module docstring): per context, the per-new-token and prefill ms with and without
    the cache, and whether the two gave the same tokens."""
    decoder = predictor.decoder

    def cached(ids: Any, mask: Any) -> Any:
        return decoder.next_logits(ids, mask)

    def recompute(ids: Any, mask: Any) -> Any:
        return decoder.run(ids, mask)[0][:, -1, :]

    rows = []
    for context in args.context_list:
        prompt = stream[:context]
        kept: dict[str, dict[str, list[float]]] = {name: {"step": [], "cpu step": [], "prefill": []} for name in ("cache", "recompute")}
        tokens: dict[str, list[int]] = {}
        for round_ in range(args.rounds):
            order = [("cache", cached), ("recompute", recompute)]
            for name, backend in order if round_ % 2 == 0 else order[::-1]:
                decoder.reset()
                tokens[name], wall, cpu = step_times(backend, prompt, args.new_tokens)
                if round_ > 0:
                    kept[name]["prefill"].append(wall[0])
                    kept[name]["step"].append(statistics.median(wall[1:]))
                    kept[name]["cpu step"].append(statistics.median(cpu[1:]))
        figures = {f"{name} {kind}": statistics.median(values) * 1000 for name, parts in kept.items() for kind, values in parts.items()}
        rows.append({"context": context, **figures, "identical": tokens["cache"] == tokens["recompute"], "tokens": tokens})
        print(f"context {context}: cache {figures['cache step']:.2f} ms/token, recompute {figures['recompute step']:.2f}", flush=True)
    return rows


class SessionClock:
    """Counts the wall seconds an ONNX Runtime session spends in ``run`` (its ``run`` wrapped on
    the instance, as the worker wraps optimum's)."""

    def __init__(self, session: Any) -> None:
        self.seconds = 0.0
        run = session.run

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return run(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        session.run = timed


def ptmkit_generate(predictor: Any, clock: SessionClock, prompts: list[list[int]], new: int, pad: int) -> tuple[list[list[int]], list[float]]:
    """``generate_ids`` over the predictor's cached decoder, eos ignored: (tokens, [wall s, CPU s,
    s in session.run])."""
    from ptmkit_export.generation import GenerationSettings, generate_ids

    clock.seconds = 0.0
    wall, cpu = time.perf_counter(), time.process_time()
    predictor.decoder.reset()
    tokens = generate_ids(predictor.decoder.next_logits, prompts, GenerationSettings(max_new_tokens=new), pad, None)
    return tokens, [time.perf_counter() - wall, time.process_time() - cpu, clock.seconds]


GRAPH_SHAPES = {False: ((1, 64), (1, 512), (8, 64)), True: ((1, 16), (8, 16))}  # (batch, past) of table 3
GRAPH_CALLS = {False: 500, True: 50}
#: ptmkit's graphs in table 3: the export's fp32, ``--optimize 2`` and int8 (quantized from the
#: optimized graph) files.
PTMKIT_GRAPHS = {"ptmkit": "model.onnx", "ptmkit optimized": "model.opt.onnx", "ptmkit int8": "model.int8.onnx"}
MEASURES = ("ms", "cpu ms", "session ms")  # per token: wall, process CPU, wall inside session.run


def optimum_table(predictor: Any, worker: OptimumWorker | None, prompts: list[list[int]], pad: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Table 2 (module docstring): per batch size, ptmkit's and optimum's per-token ms (wall, CPU
    and inside ``session.run``; medians of the kept rounds), and the identical rows."""
    from ptmkit_export.generation import left_pad

    clock = SessionClock(predictor.session)
    rows = []
    for size, groups in {1: [[p] for p in prompts], 8: [prompts]}.items():
        per_round: dict[str, list[list[float]]] = {"ptmkit": [], "optimum": []}
        tokens: dict[str, list[list[int]]] = {}
        for round_ in range(args.rounds):
            sides = ["ptmkit", "optimum"] if worker else ["ptmkit"]
            for side in sides if round_ % 2 == 0 else sides[::-1]:
                spent = [0.0, 0.0, 0.0]
                tokens[side] = []
                for group in groups:
                    if side == "ptmkit":
                        new, seconds = ptmkit_generate(predictor, clock, group, args.new_tokens, pad)
                    else:
                        assert worker is not None
                        new, seconds = worker.generate(*left_pad(group, pad), args.new_tokens, pad)
                    tokens[side] += new
                    spent = [a + b for a, b in zip(spent, seconds, strict=True)]
                if round_ > 0:
                    per_round[side].append([x * 1000 / (args.new_tokens * len(groups)) for x in spent])
        row: dict[str, Any] = {"batch": size, "tokens": tokens, "rows": len(prompts)}
        for side, values in per_round.items():
            for k, measure in enumerate(MEASURES):
                row[f"{side} {measure}"] = statistics.median(v[k] for v in values) if values else None
        row["identical rows"] = sum(a == b for a, b in zip(tokens["ptmkit"], tokens["optimum"], strict=True)) if worker else None
        rows.append(row)
        print(f"batch {size}: ptmkit {row['ptmkit ms']:.3f} ms/token" + (f", optimum {row['optimum ms']:.3f}" if worker else ""), flush=True)
    return rows


def graph_table(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Table 3 (module docstring): one decoder call of each export's ONNX graph, ``session.run``
    alone, one new token over a past of random keys and values; median process-CPU and wall ms."""
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = args.threads, 1
    export = args.work / "run" / "export"
    sessions = {side: ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
                for side, path in (*((side, export / file) for side, file in PTMKIT_GRAPHS.items()), ("optimum", args.work / "optimum" / "model.onnx"))}
    wanted = {i.name for i in sessions["optimum"].get_inputs()}
    m, rng, rows = args.model, np.random.default_rng(0), []
    for batch, past in GRAPH_SHAPES[args.quick]:
        ids, mask = rng.integers(0, m["vocabulary"], (batch, 1)), np.ones((batch, past + 1), np.int64)
        feeds = {"ptmkit": {"token_ids": ids.astype(np.int32), "padding_mask": mask.astype(np.int32)},
                 "optimum": {"input_ids": ids, "attention_mask": mask, "position_ids": np.full((batch, 1), past, np.int64)}}
        for i in range(m["layers"]):
            for kind in ("key", "value"):
                cache = rng.standard_normal((batch, m["heads"], past, m["hidden"] // m["heads"])).astype(np.float32)
                feeds["ptmkit"][f"past_{kind}_{i}"] = feeds["optimum"][f"past_key_values.{i}.{kind}"] = cache
        feeds["optimum"] = {name: value for name, value in feeds["optimum"].items() if name in wanted}
        feeds |= {side: feeds["ptmkit"] for side in PTMKIT_GRAPHS}
        times: dict[str, list[tuple[float, float]]] = {side: [] for side in sessions}
        for call in range(GRAPH_CALLS[args.quick]):
            for side in list(sessions) if call % 2 == 0 else list(sessions)[::-1]:
                wall, cpu = time.perf_counter(), time.process_time()
                sessions[side].run(None, feeds[side])
                times[side].append((time.perf_counter() - wall, time.process_time() - cpu))
        row: dict[str, Any] = {"batch": batch, "past": past}
        for side, kept in times.items():
            kept = kept[len(kept) // 5 :]  # the first fifth: warm-up
            row[f"{side} ms"], row[f"{side} cpu ms"] = (statistics.median(t[k] for t in kept) * 1000 for k in (0, 1))
        rows.append(row)
    return rows


# ---------------------------------------------------------------- report


def tables(results: dict[str, Any]) -> str:
    """Markdown of tables 1 and 2."""
    lines = [
        "| context (tokens) | with cache: ms / new token | recomputing the prefix: ms / new token | recompute / cache | "
        "CPU ms / new token: cache / recompute (ratio) | prefill ms (cache / recompute) | same tokens |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in results["cache"]:
        lines.append(f"| {row['context']} | {row['cache step']:.3f} | {row['recompute step']:.3f} | {row['recompute step'] / row['cache step']:.1f}x | "
                     f"{row['cache cpu step']:.3f} / {row['recompute cpu step']:.3f} ({row['recompute cpu step'] / row['cache cpu step']:.1f}x) | "
                     f"{row['cache prefill']:.2f} / {row['recompute prefill']:.2f} | {'yes' if row['identical'] else 'NO'} |")
    lines += [
        "",
        "| batch | ptmkit ms / token | optimum ms / token | ptmkit / optimum | CPU ms / token: ptmkit / optimum (ratio) | "
        "in session.run ms / token: ptmkit / optimum | identical rows |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in results["optimum"]["rows"]:
        if row["optimum ms"] is None:
            lines.append(f"| {row['batch']} | {row['ptmkit ms']:.3f} | n/a | n/a | {row['ptmkit cpu ms']:.3f} / n/a | {row['ptmkit session ms']:.3f} / n/a | n/a |")
            continue
        lines.append(f"| {row['batch']} | {row['ptmkit ms']:.3f} | {row['optimum ms']:.3f} | **{row['ptmkit ms'] / row['optimum ms']:.2f}x** | "
                     f"{row['ptmkit cpu ms']:.3f} / {row['optimum cpu ms']:.3f} ({row['ptmkit cpu ms'] / row['optimum cpu ms']:.2f}x) | "
                     f"{row['ptmkit session ms']:.3f} / {row['optimum session ms']:.3f} | {row['identical rows']} / {row['rows']} |")
    if results["optimum"].get("graph"):
        lines += [
            "",
            "| one decoder call, session.run alone: batch x past | ptmkit CPU ms | optimum CPU ms | ptmkit / optimum | wall ms: ptmkit / optimum "
            "| `--optimize 2` CPU ms (/ optimum) | int8 CPU ms (/ optimum) |",
            "|---|---|---|---|---|---|---|",
        ]
        for row in results["optimum"]["graph"]:
            extra = " | ".join(f"{row[f'{side} cpu ms']:.3f} ({row[f'{side} cpu ms'] / row['optimum cpu ms']:.2f}x)" if f"{side} cpu ms" in row else "n/a"
                               for side in ("ptmkit optimized", "ptmkit int8"))
            lines.append(f"| {row['batch']} x {row['past']} | {row['ptmkit cpu ms']:.3f} | {row['optimum cpu ms']:.3f} | "
                         f"{row['ptmkit cpu ms'] / row['optimum cpu ms']:.2f}x | {row['ptmkit ms']:.3f} / {row['optimum ms']:.3f} | {extra} |")
    return "\n".join(lines)


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def versions(names: tuple[str, ...]) -> dict[str, str]:
    found = {}
    for name in names:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def reading(results: dict[str, Any]) -> str:
    """The figures' plain reading: the cache's gain at the longest context, the goal against optimum."""
    longest = results["cache"][-1]
    text = [f"With the cache a new token at {longest['context']} tokens of context costs {longest['cache step']:.2f} ms against "
            f"{longest['recompute step']:.2f} ms recomputing the prefix ({longest['recompute step'] / longest['cache step']:.1f}x; CPU time: "
            f"{longest['cache cpu step']:.2f} against {longest['recompute cpu step']:.2f} ms, "
            f"{longest['recompute cpu step'] / longest['cache cpu step']:.1f}x); "
            f"the tokens are {'identical' if all(r['identical'] for r in results['cache']) else 'NOT identical'} at every context."]
    rows = results["optimum"]["rows"]
    text.append(f"ptmkit's rows decoded as one left-padded batch of 8 equal the same prompts decoded alone: "
                f"{results['ptmkit batch 8 rows equal to batch 1']}/{rows[0]['rows']}.")
    if rows and rows[0]["optimum ms"] is not None:
        met = all(r["ptmkit ms"] <= r["optimum ms"] for r in rows)
        ratios = ", ".join(f"{r['ptmkit ms'] / r['optimum ms']:.2f}x at batch {r['batch']}" for r in rows)
        text.append(f"Against optimum, ptmkit's per-token wall time is {ratios} (goal <= 1.0x: {'met' if met else 'NOT met'}); "
                    f"identical rows: {', '.join(str(r['identical rows']) + '/' + str(r['rows']) for r in rows)}.")
        graph = results["optimum"].get("graph") or []
        if graph:
            text.append("One call of the ONNX graphs alone, ptmkit's CPU time over optimum's: "
                        + ", ".join(f"{g['ptmkit cpu ms'] / g['optimum cpu ms']:.2f}x at {g['batch']} x {g['past']}" for g in graph) + ".")
    else:
        text.append(f"optimum was not measured: {results['optimum']['problem']}.")
    return " ".join(text)


def page(results: dict[str, Any], args: argparse.Namespace, command: str) -> str:
    m, optimum = results["model"], results["optimum"]
    own = versions(("onnxruntime", "onnx", "numpy", "tokenizers", "transformers", "torch"))
    theirs = optimum.get("versions") or {}
    return (
        f"# GPT generation: key/value cache, and ptmkit against optimum\n\n"
        f"Date {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, commit {commit()}, load average before "
        f"{results['load_before']}, after {results['load_after']} (2 CPU cores shared with other jobs), {results['seconds']:.0f} s in all.\n\n"
        f"Command: `{command}`\n\n"
        f"Versions: ptmkit side {', '.join(f'{k} {v}' for k, v in own.items())} (transformers and torch: the checkpoint only); "
        f"optimum side (`{args.optimum_python}`, a venv over the system's packages) {', '.join(f'{k} {v}' for k, v in theirs.items()) or 'n/a'}.\n\n"
        f"Model: random-init GPT-2, {m['layers']} layers, n_embd {m['hidden']}, {m['heads']} heads, byte-level BPE of {m['vocabulary']:,} "
        f"entries, {m['positions']} positions, {results['parameters']:,} parameters, fp32. Greedy, {args.new_tokens} new tokens, "
        f"end-of-text ignored; ONNX Runtime {args.threads} intra-op thread(s), 1 inter-op, both sides; {args.rounds} rounds, the first "
        f"dropped, sessions interleaved and the order flipped each round; medians. Definitions: the script's docstring.\n\n"
        f"{tables(results)}\n\n## Reading\n\n{reading(results)}\n"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sys.path[:0] = [p for p in (str(ROOT), str(ROOT / "plugins"), str(ROOT / "export")) if p not in sys.path]
    started, load_before = time.time(), " ".join(f"{x:.2f}" for x in os.getloadavg())
    args.work.mkdir(parents=True, exist_ok=True)
    worker = OptimumWorker(args.optimum_python, args.work / "optimum-worker.log", args.threads)
    child = start_ptmkit()
    facts = build_model(args)
    worker.export(args.work / "checkpoint", args.work / "optimum")
    export_seconds = export_ptmkit(child, args)  # while the worker exports optimum's model
    optimum: dict[str, Any] = {"rows": []}
    if worker.wait_ready():
        assert worker.ready is not None
        optimum.update(versions=worker.ready["versions"], export_seconds=worker.ready["export_seconds"], problem=None)
    else:
        optimum["problem"] = f"optimum could not run under {args.optimum_python}: {worker.problem}"
        print(optimum["problem"], file=sys.stderr)
        if args.out:
            print("--out: a results page needs optimum; see the docstring for the venv", file=sys.stderr)
            return 2
        worker.close()
    from ptmkit_export import Predictor

    predictor = Predictor(args.work / "run" / "export", variant="fp32", threads=args.threads)  # tables 1-2: fp32 against fp32
    stream, prompts = corpus_ids(predictor.tokenizer, args.quick)
    results: dict[str, Any] = {"model": args.model, "parameters": facts["parameters"], "eot": facts["eot"], "load_before": load_before,
                               "setup_seconds": {"checkpoint": facts["checkpoint_seconds"], "ptmkit import-hf + export": export_seconds}}
    results["cache"] = cache_table(predictor, stream, args)
    optimum["rows"] = optimum_table(predictor, worker if optimum.get("versions") else None, prompts, facts["eot"], args)
    if optimum.get("versions"):
        optimum["graph"] = graph_table(args)
    results["optimum"] = optimum
    results["prompts"] = prompts
    alone, together = (row["tokens"]["ptmkit"] for row in optimum["rows"])
    results["ptmkit batch 8 rows equal to batch 1"] = sum(a == b for a, b in zip(alone, together, strict=True))
    if optimum.get("versions"):
        worker.close()
    results["load_after"], results["seconds"] = " ".join(f"{x:.2f}" for x in os.getloadavg()), time.time() - started
    print(tables(results) + "\n\n" + reading(results))
    command = "python benchmarks/gpt_generation.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    if args.out:
        from ptmkit.io import atomic_write_text

        atomic_write_text(args.out, page(results, args, command.strip()))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
