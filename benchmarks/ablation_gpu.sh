#!/usr/bin/env bash
# GPU check of the ablation trainer, for the `device` tool (one script, under 5 minutes): a ~25M-parameter decoder
# trained on one variant's token shards with bf16 autocast and torch.compile; prints tokens/s and MFU per interval.
# Needs only torch (CUDA), numpy and pyarrow on the machine: the project is imported from this checkout.
#
#   benchmarks/ablation_gpu.sh [RUN]    RUN: a run or variant folder with tokens/ (default: the unfiltered variant
#                                        of `python benchmarks/ablation_shared.py`, ~1.2M tokens)
# Goal (issue 7): >= 40 % MFU on an H200.  STEPS, BATCH and DEVICE override the defaults (DEVICE=cpu STEPS=2 BATCH=1
# checks the script itself on a CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
run="${1:-runs/ablation-shared/variants/unfiltered}"
[ -f "$run/tokens/manifest.json" ] || { echo "no token shards in $run: run the ablation first" >&2; exit 2; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
PYTHONPATH=. timeout 280 python - "$run" <<'PY'
import json, os, sys, time

import torch

from corpus.trainer import LanguageModel, ModelConfig, TrainOptions, train_language_model

run = sys.argv[1]
vocab = json.load(open(f"{run}/tokens/manifest.json"))["tokenizer"]["vocab_size"]
config = ModelConfig(vocab_size=vocab, seq_len=1024, d_model=512, n_layers=8, n_heads=8)
steps, batch = int(os.environ.get("STEPS", 300)), int(os.environ.get("BATCH", 32))
device = os.environ.get("DEVICE", "cuda")
print(f"torch {torch.__version__}, device {device}, {LanguageModel(config).parameter_count() / 1e6:.1f}M parameters, "
      f"batch {batch} x {config.seq_len} tokens, {steps} steps")
torch.backends.cuda.matmul.allow_tf32 = True
started = time.perf_counter()
rows = train_language_model(
    run, [], config,
    TrainOptions(steps=steps, batch_size=batch, lr=1e-3, warmup=min(30, steps), eval_every=max(1, steps // 4), device=device),
)
for row in rows:
    mfu = f"{row['mfu']:.1%}" if row["mfu"] is not None else "n/a (no known peak)"
    print(f"step {row['step']:>4}  loss {row['train_loss']:.3f}  {row['tokens_per_s']:>12,.0f} tokens/s  MFU {mfu}  "
          f"({row['device']})")
print(f"wall {time.perf_counter() - started:.0f} s (the first interval includes torch.compile)")
PY
