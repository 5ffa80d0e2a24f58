"""The ablation trainer on CPU: a ~0.3M-parameter model on the sample's token shards, scored on real articles."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys

import numpy as np
import pytest
from support import REPO, real_documents, shared, write_job

from corpus.config.job import load_job
from corpus.engine import run_job
from corpus.sample.generate import SAMPLE_PATH
from corpus.stages.tokenize import END_OF_TEXT, TextTokenizer, train_tokenizer

torch = pytest.importorskip("torch", reason="the trainer needs the `ablation` extra (torch)")

from corpus.lab.models import LanguageModel, ModelConfig  # noqa: E402
from corpus.lab.trainer import (  # noqa: E402
    ReferenceSet,
    TrainOptions,
    evaluate,
    scored_nats,
    train_language_model,
)


@pytest.fixture(scope="module")
def shards_and_reference(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trainer")
    tokenizer = str(folder / "tokenizer.json")
    train_tokenizer(real_documents().column("text").to_pylist()[:500], 512, tokenizer)
    shutil.copy(SAMPLE_PATH, folder / "crawl.warc.gz")
    body = f'[annotate]\nrules = ["gopher_quality"]\n[tokenize]\ntokenizer = "{tokenizer}"\n'
    run_job(load_job(write_job(folder, [str(folder / "crawl.warc.gz")], folder / "run", body)), use_ray=False)
    bodies = json.loads(shared("html-scrapinghub-aeb/ground-truth.json").read_text())
    texts = [entry["articleBody"] for _, entry in sorted(bodies.items())][:8]
    encoded = TextTokenizer(tokenizer, END_OF_TEXT).encode(texts)
    reference = ReferenceSet("articles", [np.array(t) for t in encoded], sum(len(t.encode()) for t in texts))
    return folder / "run", reference


CONFIG = ModelConfig(vocab_size=512, seq_len=64, d_model=64, n_layers=2, n_heads=4)


@pytest.mark.slow  # runs a whole job
def test_training_lowers_the_loss_and_the_same_seed_gives_the_same_losses(shards_and_reference):
    run, reference = shards_and_reference
    options = TrainOptions(steps=60, batch_size=8, lr=3e-3, warmup=5, eval_every=30, seed=1)
    rows = train_language_model(run, [reference], CONFIG, options)
    assert [row["step"] for row in rows] == [30, 60] and rows[1]["tokens"] == 60 * 8 * 64
    assert rows[0]["parameters"] == sum(p.numel() for p in LanguageModel(CONFIG).parameters())
    assert rows[1]["train_loss"] < rows[0]["train_loss"] < math.log(512)  # learning, from a uniform guess's loss
    assert rows[1]["articles.nats_per_token"] < math.log(512)
    again = train_language_model(run, [reference], CONFIG, options)
    drop = lambda rs: [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in rs]  # noqa: E731
    assert drop(again) == drop(rows)
    other = train_language_model(run, [reference], CONFIG, TrainOptions(steps=60, eval_every=30, seed=2, warmup=5))
    assert drop(other) != drop(rows)


@pytest.mark.slow  # runs a whole job
def test_bits_per_byte_is_the_token_loss_over_the_text_bytes(shards_and_reference):
    _, reference = shards_and_reference
    torch.manual_seed(0)
    model = LanguageModel(CONFIG)
    scores = evaluate(model, reference, torch.device("cpu"))
    predicted = sum(len(d) - 1 for d in reference.documents)
    assert scores["bits_per_byte"] == pytest.approx(
        scores["nats_per_token"] * predicted / math.log(2) / reference.text_bytes
    )
    assert scores["nats_per_token"] == pytest.approx(math.log(512), rel=0.05)  # an untrained model is near uniform
    # Per document, scores whose mean is the set's: each document's share of the loss, as if of mean length.
    per_document = []
    for document in reference.documents:
        windows = [
            document[start : start + CONFIG.seq_len + 1] for start in range(0, len(document) - 1, CONFIG.seq_len)
        ]
        per_document.append(sum(float(scored_nats(model, [w], [len(w) - 1], torch.device("cpu"))[0]) for w in windows))
    documents = len(reference.documents)
    assert scores["bits_per_byte.items"] == pytest.approx(
        [nats / math.log(2) * documents / reference.text_bytes for nats in per_document], rel=1e-5
    )
    assert np.mean(scores["bits_per_byte.items"]) == pytest.approx(scores["bits_per_byte"])
    assert np.mean(scores["nats_per_token.items"]) == pytest.approx(scores["nats_per_token"])
    assert len(set(scores["bits_per_byte.items"])) == documents == 8  # the articles differ: noise to measure


@pytest.mark.slow  # runs a whole job
def test_a_budget_past_the_data_repeats_it_and_says_how_often(shards_and_reference):
    run, reference = shards_and_reference
    manifest = json.loads((run / "tokens" / "manifest.json").read_text())
    per_pass = manifest["tokens"] // (CONFIG.seq_len + 1) // 8  # full batches of 8 sequences in one pass
    assert per_pass > 2
    rows = train_language_model(run, [], CONFIG, TrainOptions(steps=per_pass * 2 + 1, eval_every=10_000, warmup=1))
    assert rows[-1]["epochs"] == 3


def test_the_trainer_imports_without_the_pipelines_dependencies():
    # benchmarks/ablation_gpu.sh trains on a GPU machine whose image has torch, numpy, pyarrow, fsspec and
    # tokenizers, not Ray, pydantic or the extractors: the trainer and its token stream must not pull them in.
    absent = ["ray", "pydantic", "pydantic_core", "fastwarc", "resiliparse", "trafilatura", "fasttext", "numba"]
    script = f"""
import importlib.abc, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {absent!r}:
            raise ImportError("not on the GPU image: " + name)
sys.meta_path.insert(0, Absent())
from corpus.lab.downstream import load_items, tokenize_task
from corpus.lab.trainer import train_language_model
print(sorted(m for m in sys.modules if m.startswith("corpus")))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "corpus.engine.run'" not in done.stdout and "corpus.config.job" not in done.stdout


def test_the_ladder_sizes_are_olmo_cores_with_their_published_shapes():
    # DataDecide's smallest rungs: widths, depths and heads as OLMo-core defines them, so results compare with theirs.
    shapes = {"olmo2_1M": (12, 4, 4), "olmo2_14M": (128, 4, 8), "olmo2_30M": (256, 4, 8)}
    for size, (width, depth, heads) in shapes.items():
        model = LanguageModel(ModelConfig(vocab_size=50_280, seq_len=64, size=size))
        attention = model.transformer.blocks["0"].attention
        assert (model.shape["d_model"], model.shape["n_layers"], attention.n_heads) == (width, depth, heads), size
    # With OLMo 2's 50,280-token vocabulary (embeddings and output untied) the 14M rung holds 14.0M parameters.
    assert LanguageModel(ModelConfig(vocab_size=50_280, size="olmo2_14M")).parameter_count() == pytest.approx(
        14.0e6, rel=0.05
    )
    # A shape of the job's own gets OLMo 2's blocks too: reordered norms and QK norm.
    own = LanguageModel(ModelConfig(vocab_size=512, d_model=64, n_layers=2, n_heads=4))
    assert own.transformer.blocks["0"].attention.q_norm is not None
    # The seed initialises the weights: two seeds differ, one seed twice does not.
    first, again, other = (LanguageModel(CONFIG, seed) for seed in (0, 0, 1))
    assert torch.equal(first.transformer.embeddings.weight, again.transformer.embeddings.weight)
    assert not torch.equal(first.transformer.embeddings.weight, other.transformer.embeddings.weight)
    with pytest.raises(ValueError, match="not one of OLMo 2's ladder"):
        LanguageModel(ModelConfig(vocab_size=512, size="olmo2_15M"))


@pytest.mark.slow  # runs a whole job
def test_a_ladder_size_trains_on_the_shards(shards_and_reference):
    run, reference = shards_and_reference
    config = ModelConfig(vocab_size=512, seq_len=64, size="olmo2_1M")
    rows = train_language_model(run, [reference], config, TrainOptions(steps=20, eval_every=10, warmup=2))
    assert [row["step"] for row in rows] == [10, 20]
    assert rows[-1]["parameters"] == LanguageModel(config).parameter_count()
    assert rows[-1]["train_loss"] < rows[0]["train_loss"] < math.log(512) + 0.5
