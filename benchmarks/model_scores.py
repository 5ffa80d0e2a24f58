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

    args = benchmark_arguments(
        __doc__, more=lambda parser: parser.add_argument("--documents", type=int, default=256, help="pages scored")
    )
    import torch
    from scipy.stats import spearmanr
    from transformers import pipeline

    from corpus.models.sequence_classifier import ClassifierOptions, SequenceClassifier, packed_batches

    torch.set_num_threads(1)
    texts = real_documents(args.shared).column("text").to_pylist()[: args.documents]
    with tempfile.TemporaryDirectory() as scratch:
        folder = write_random_classifier(Path(scratch) / "edu-shaped", texts)
        options = ClassifierOptions(model=str(folder))
        ours = SequenceClassifier(str(folder), options, "cpu")
        ids = ours.token_ids(texts)
        tokens = sum(len(row) for row in ids)
        print(f"{len(texts)} documents, {tokens:,} tokens (at most 512 each), BERT-base shape, 1 thread")

        started = time.perf_counter()
        scores = ours.scores(texts)
        ours_s = time.perf_counter() - started

        lengths = np.array([len(row) for row in ids])
        batches = [([ids[i] for i in rows], int(lengths[rows].max())) for rows in packed_batches(lengths, 16_384)]
        started = time.perf_counter()
        for rows, width in batches:
            ours._forward(rows, width)
        bare_s = time.perf_counter() - started

        card = pipeline("text-classification", model=str(folder), device="cpu", function_to_apply="none")
        started = time.perf_counter()
        card_scores = [out["score"] for out in card(texts, batch_size=32, truncation=True, max_length=512,
                                                    padding="longest")]  # fmt: skip
        card_s = time.perf_counter() - started
        agreement = np.abs(np.asarray(card_scores) - scores["score"]).max()

        print(f"{'':34}{'docs/s':>10}{'tokens/s':>12}{'ratio':>8}")
        for name, seconds in (("model card (pipeline, batch 32)", card_s), ("corpus (packed, fp32)", ours_s),
                              ("bare forward, pre-packed", bare_s)):  # fmt: skip
            print(f"{name:34}{len(texts) / seconds:10.2f}{tokens / seconds:12.0f}{card_s / seconds:7.2f}x")
        print(f"corpus vs model card: {card_s / ours_s:.2f}x documents/s (goal >= 2x); corpus vs bare forward: "
              f"{ours_s / bare_s:.2f}x its time (goal <= 1.25x); largest score difference {agreement:.2e}")  # fmt: skip
        for dtype in ("bfloat16", "int8"):
            other = SequenceClassifier(str(folder), options.model_copy(update={"dtype": dtype}), "cpu")
            started = time.perf_counter()
            low = other.scores(texts)
            seconds = time.perf_counter() - started
            same = (low["int_score"] == scores["int_score"]).mean()
            rho = spearmanr(low["score"], scores["score"]).statistic
            counts = "counts" if same >= 0.99 and rho >= 0.99 else "does not count"
            print(
                f"{dtype:10} {len(texts) / seconds:8.2f} docs/s, {ours_s / seconds:.2f}x fp32; "
                f"int_score equal {same:.1%}, Spearman {rho:.4f}: {counts}"
            )


if __name__ == "__main__":
    main()
