"""The ablation's models: OLMo-core's decoders, by the ladder's names or by a shape of the job's own.

The ladder is OLMo 2's (`TransformerConfig.olmo2_1M` ... `olmo2_1B` in `ai2-olmo-core`), the sizes DataDecide
(Magnusson et al. 2025) trained to show that small-scale rankings of pretraining corpora predict the 1B one. A
shape of the job's own (`d_model`, `n_layers`, `n_heads`) is built with OLMo 2's blocks (reordered norms, QK
norm, RoPE at theta 500,000), as the ladder's are.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    seq_len: int = 256
    size: str = ""  # a size of the ladder (`corpus.lab.ablation_job.LADDER`); empty: the shape below
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4


def transformer_config(config: ModelConfig, seed: int = 0):
    """OLMo-core's `TransformerConfig` of `config`, initialised by `seed`."""
    logging.getLogger("olmo_core").setLevel(logging.ERROR)  # its notes on missing GPU kernels are not the user's
    from olmo_core.nn.transformer import TransformerBlockType, TransformerConfig

    if config.size:
        if not config.size.startswith("olmo2_") or not hasattr(TransformerConfig, config.size):
            raise ValueError(f"model size {config.size!r} is not one of OLMo 2's ladder")
        built = getattr(TransformerConfig, config.size)(vocab_size=config.vocab_size)
    else:
        built = TransformerConfig.llama_like(
            d_model=config.d_model,
            n_layers=config.n_layers,
            n_heads=config.n_heads,
            vocab_size=config.vocab_size,
            block_name=TransformerBlockType.reordered_norm,
            qk_norm=True,
            rope_theta=500_000,
            layer_norm_eps=1e-6,
        )
    return dataclasses.replace(built, init_seed=seed)


class LanguageModel(nn.Module):
    """A decoder of `config`, built and initialised by OLMo-core on `device`: token ids in, logits out."""

    def __init__(self, config: ModelConfig, seed: int = 0, device: torch.device | None = None):
        super().__init__()
        self.config = config
        olmo = transformer_config(config, seed)
        self.shape = {"d_model": olmo.d_model, "n_layers": olmo.n_layers}
        self.transformer = olmo.build(init_device="meta")
        self.transformer.init_weights(max_seq_len=config.seq_len, device=device or torch.device("cpu"))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.transformer(tokens)

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self) -> int:
        """Training FLOPs per token: 6 per matmul weight (the input embedding is a lookup) plus causal attention's
        12 x layers x width x length (PaLM's appendix B)."""
        matmul = self.parameter_count() - self.transformer.embeddings.weight.numel()
        return 6 * matmul + 12 * self.shape["n_layers"] * self.shape["d_model"] * self.config.seq_len
