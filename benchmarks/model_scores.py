"""Model scores, one CPU core: `corpus`'s packed scoring against the model card's way, on the shared pages.

An encoder of FineWeb-Edu's classifier's shape (BERT-base: 12 layers, hidden 768, a regression head; 512 tokens)
with random weights (they cost the same as trained ones), and a WordPiece tokenizer trained here on the shared
text. The peer is what FineWeb-Edu's model card does: `transformers.pipeline("text-classification")`, batch 32,
padding to the longest text of each batch, fp32. The bare forward pass on pre-packed batches is the floor: the
model alone, no tokenizing, no packing. bf16 and int8 are printed with their agreement with fp32 (integer score
equal, Spearman), as they count only where those are >= 99 % and >= 0.99.

    python benchmarks/model_scores.py [--documents 256] [--shared ../shared/data]

Goals (issue 48): documents/s >= 2x the pipeline; tokens/s within 1.25x of the bare forward pass.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np


def write_random_classifier(
    folder: Path,
    texts: list[str],
    *,
    layers: int = 12,
    hidden: int = 768,
    heads: int = 12,
    vocabulary: int = 30_522,
    labels: list[str] | None = None,
    max_positions: int = 512,
    seed: int = 0,
    initializer_range: float = 0.02,
    encoder_only: bool = False,
) -> Path:
    """A BERT-shaped sequence classifier with random weights and a WordPiece tokenizer trained on `texts`,
    saved as `save_pretrained` saves one (what a job's `[models.NAME] model` names). `labels`: classes (a
    regression head when None); a large `initializer_range` spreads the scores of random weights apart;
    `encoder_only`: the encoder without a head (what `corpus classifier train --kind encoder` starts from)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertForSequenceClassification, BertModel, PreTrainedTokenizerFast

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.train_from_iterator(
        texts, trainers.WordPieceTrainer(vocab_size=vocabulary, special_tokens=special, show_progress=False)
    )
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_max_length=max_positions,
    )  # fmt: skip
    head = (
        {"num_labels": 1, "problem_type": "regression"}
        if labels is None
        else {"num_labels": len(labels), "id2label": dict(enumerate(labels)),
              "label2id": {label: i for i, label in enumerate(labels)}}
    )  # fmt: skip
    config = BertConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=hidden, num_hidden_layers=layers,
        num_attention_heads=heads, intermediate_size=4 * hidden, max_position_embeddings=max_positions,
        initializer_range=initializer_range, **head,
    )  # fmt: skip
    torch.manual_seed(seed)
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    (BertModel if encoder_only else BertForSequenceClassification)(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def main() -> None:
    from real_documents import benchmark_arguments, real_documents  # beside this script

    def options(parser) -> None:
        parser.add_argument("--documents", type=int, default=128, help="pages scored (%(default)s)")
        parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="(%(default)s)")
        parser.add_argument("--model", help="a trained classifier's folder instead of random weights: the only way "
                            "the low-precision agreement means anything")  # fmt: skip
        parser.add_argument("--dtypes", help="low precisions to compare (default: bfloat16,int8 on CPU; "
                            "bfloat16,float16 on CUDA)")  # fmt: skip

    args = benchmark_arguments(__doc__, more=options)
    import torch
    from scipy.stats import spearmanr
    from transformers import AutoTokenizer, pipeline

    from corpus.models.sequence_classifier import ClassifierOptions, SequenceClassifier, packed_batches

    cpu = args.device == "cpu"
    if cpu:
        torch.set_num_threads(1)
    dtypes = (args.dtypes or ("bfloat16,int8" if cpu else "bfloat16,float16")).split(",")
    texts = real_documents(args.shared).column("text").to_pylist()[: args.documents]
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(args.model) if args.model else write_random_classifier(Path(scratch) / "edu-shaped", texts)
        gpus = 0 if cpu else 1
        base = ClassifierOptions(model=str(folder), gpus_per_task=gpus, batch_tokens=16_384 if cpu else 131_072)
        ours = SequenceClassifier(str(folder), base, args.device)
        ids = ours.token_ids(texts)
        tokens = sum(len(row) for row in ids)
        whole = sum(len(row) for row in AutoTokenizer.from_pretrained(folder)(texts)["input_ids"])
        where = "1 CPU thread" if cpu else torch.cuda.get_device_name()
        weights = f"the model in {folder}" if args.model else "BERT-base shape, random weights"
        print(f"{len(texts)} documents, {tokens:,} tokens scored (512 at most each, {whole / len(texts):,.0f} in a "
              f"whole document on average), {weights}, {where}")  # fmt: skip

        def timed(function, warm):
            warm()  # first-call allocations and kernels, outside the clock
            if not cpu:
                torch.cuda.synchronize()
            started = time.perf_counter()
            result = function()
            if not cpu:
                torch.cuda.synchronize()
            return result, time.perf_counter() - started

        scores, ours_s = timed(lambda: ours.scores(texts), lambda: ours.scores(texts[:2]))
        lengths = np.array([len(row) for row in ids])
        packed = [
            ([ids[i] for i in rows], int(lengths[rows].max())) for rows in packed_batches(lengths, base.batch_tokens)
        ]
        _, bare_s = timed(
            lambda: [ours._forward(rows, width) for rows, width in packed], lambda: ours.scores(texts[:2])
        )
        card = pipeline("text-classification", model=str(folder), device=args.device, function_to_apply="none")
        settings = {"batch_size": 32, "truncation": True, "max_length": 512, "padding": "longest"}
        card_out, card_s = timed(lambda: card(texts, **settings), lambda: card(texts[:2], **settings))
        difference = np.abs(np.asarray([out["score"] for out in card_out]) - scores["score"]).max()

        print(f"{'':34}{'docs/s':>10}{'tokens/s':>12}{'ratio':>8}")
        for name, seconds in (("model card (pipeline, batch 32)", card_s), ("corpus (packed, fp32)", ours_s),
                              ("bare forward, pre-packed", bare_s)):  # fmt: skip
            print(f"{name:34}{len(texts) / seconds:10.2f}{tokens / seconds:12.0f}{card_s / seconds:7.2f}x")
        print(f"corpus vs model card: {card_s / ours_s:.2f}x documents/s (goal >= 2x); corpus vs bare forward: "
              f"{ours_s / bare_s:.2f}x its time (goal <= 1.25x); largest difference {difference:.1e}")  # fmt: skip
        fastest = ours_s
        for dtype in dtypes:
            other = SequenceClassifier(str(folder), base.model_copy(update={"dtype": dtype}), args.device)
            low, seconds = timed(lambda other=other: other.scores(texts), lambda other=other: other.scores(texts[:2]))
            same = (low["int_score"] == scores["int_score"]).mean()
            rho = spearmanr(low["score"], scores["score"]).statistic
            counts = same >= 0.99 and rho >= 0.99
            fastest = min(fastest, seconds) if counts else fastest
            print(f"{dtype:10} {len(texts) / seconds:8.2f} docs/s, {ours_s / seconds:.2f}x fp32, "
                  f"{card_s / seconds:.2f}x the model card; int_score equal {same:.1%}, Spearman {rho:.4f}: "
                  f"{'counts' if counts else 'does not count'}")  # fmt: skip
        documents = 15e12 / (whole / len(texts))  # 15T tokens of documents this long on average
        hours = documents / (len(texts) / fastest) / 3600
        unit = "CPU-core" if cpu else f"{torch.cuda.get_device_name()} GPU"
        print(f"projected: {hours:,.0f} {unit}-hours to score 15T tokens of such documents at the fastest precision "
              f"that counts (FineWeb-Edu: ~6,000 H100-hours); {len(texts) / fastest:,.1f} documents/s "
              f"(goal on an H100: >= 1,500)")  # fmt: skip


if __name__ == "__main__":
    main()
