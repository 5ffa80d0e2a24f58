"""Memory of `corpus.api.near_duplicates` as the number of texts grows, beside datasketch's MinHashLSH, one core.

Texts are made from the real documents: each unique one is a real document with every fifth word salted (so its
shingles are its own), and one text in five is a copy of an earlier one with three words changed. Each size runs in
a child process that first builds its texts and loads the word splitters they need (segmenter dictionaries load
once a process), then resets its peak RSS (Linux's clear_refs) and calls the function once: "working set" is the
peak RSS above the RSS before the call, "per text" divides it by the
texts. The goal (issue 50): a working set that does not grow with the texts beyond a small fixed cost per text, so
whatever size fits its texts fits its dedup. datasketch (`MinHash.update_batch` over whitespace 5-word shingles,
`MinHashLSH` insert then query, 14 bands x 8 rows) is run at the sizes given to `--peer-sizes`: it is slow.

    python benchmarks/near_duplicates_memory.py [--sizes 50000,200000,1000000] [--peer-sizes 50000]
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from real_documents import benchmark_arguments, real_documents  # beside this script

COPIES = 0.2  # the share of texts that are near copies of an earlier text


def texts_of(shared: Path, size: int) -> tuple[list[str], np.ndarray]:
    """`size` texts and, for each, the index of the text it copies (-1 for a unique one)."""
    real = [  # texts of 20 words or more, in ASCII: spaces split them into the words that both sides shingle, so that
        # salting every fifth makes each unique (in Chinese or Japanese, a salt between spaces leaves the words in)
        text for text in real_documents(shared).column("text").to_pylist()
        if len(text.split()) >= 20 and text.isascii()
    ]  # fmt: skip
    rng = np.random.default_rng(7)
    texts, origin = [], np.full(size, -1, np.int64)
    for i in range(size):
        if i > 100 and rng.random() < COPIES:
            origin[i] = int(rng.integers(0, i))
            while origin[origin[i]] >= 0:
                origin[i] = origin[origin[i]]
            words = texts[origin[i]].split(" ")
            for place in rng.integers(0, len(words), 3):
                words[place] = "changed"
            texts.append(" ".join(words))
        else:
            words = real[i % len(real)].split()
            words[::5] = [f"{word}{i}" for word in words[::5]]
            texts.append(" ".join(words))
    return texts, origin


def corpus_side(texts: list[str]) -> np.ndarray:
    from corpus.api import near_duplicates

    return ~near_duplicates(texts).column("kept").to_numpy(zero_copy_only=False)


def warmed(side: str, texts: list[str]) -> None:
    """Loads what a process loads once (the segmenters and their dictionaries that the texts' scripts need, ~0.7 GiB
    for Chinese, Japanese and Korean), outside the measured working set: one text at a time, so that warming does
    not raise the peak."""
    if side == "corpus":
        from corpus.text.batch import DocumentBatch

        for text in texts[:5000]:
            _ = DocumentBatch([text]).folded_words


def datasketch_side(texts: list[str]) -> np.ndarray:
    from datasketch import MinHash, MinHashLSH

    lsh, dropped = MinHashLSH(num_perm=112, params=(14, 8)), np.zeros(len(texts), bool)
    for i, text in enumerate(texts):
        words = text.lower().split()
        shingles = [" ".join(words[j : j + 5]).encode() for j in range(max(1, len(words) - 4))]
        signature = MinHash(num_perm=112, seed=1)
        signature.update_batch(shingles)
        dropped[i] = bool(lsh.query(signature))
        if not dropped[i]:
            lsh.insert(str(i), signature)
    return dropped


def _status_kib(key: str) -> int:
    """A memory figure of this process from /proc/self/status, in KiB."""
    return int(re.search(rf"^{key}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE).group(1))


def child(shared: Path, size: int, side: str) -> None:
    texts, origin = texts_of(shared, size)
    characters = sum(map(len, texts))
    warmed(side, texts)
    Path("/proc/self/clear_refs").write_text("5")  # the peak RSS starts over from here (Linux)
    before = _status_kib("VmRSS")
    started = time.perf_counter()
    dropped = (corpus_side if side == "corpus" else datasketch_side)(texts)
    seconds = time.perf_counter() - started
    peak = _status_kib("VmHWM")
    print(json.dumps({
        "characters": characters, "seconds": seconds, "before_mib": before / 1024,
        "working_mib": (peak - before) / 1024,
        "recall": float(dropped[origin >= 0].mean()), "unique_dropped": int(dropped[origin < 0].sum()),
    }))  # fmt: skip


def measured(shared: Path, size: int, side: str) -> dict:
    command = [sys.executable, __file__, "--child", side, "--sizes", str(size), "--shared", str(shared)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{side} at {size:,} texts failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    def more(parser):
        parser.add_argument("--sizes", default="50000,200000,1000000", help="numbers of texts, comma-separated")
        parser.add_argument("--peer-sizes", default="50000", help="sizes datasketch runs at too")
        parser.add_argument("--child", choices=["corpus", "datasketch"], help="(internal) run one side in this process")

    args = benchmark_arguments(__doc__, more=more)
    sizes = [int(size) for size in args.sizes.split(",")]
    if args.child:
        child(args.shared, sizes[0], args.child)
        return
    peer_sizes = {int(size) for size in args.peer_sizes.split(",") if size}
    print(
        f"{'texts':>10}{'text MiB':>10}{'side':>12}{'seconds':>9}{'process before':>16}{'working set':>13}"
        f"{'per text':>10}{'copies found':>14}{'unique dropped':>16}"
    )
    for size in sizes:
        for side in ("corpus", "datasketch") if size in peer_sizes else ("corpus",):
            m = measured(args.shared, size, side)
            print(
                f"{size:>10,}{m['characters'] / 2**20:>10,.0f}{side:>12}{m['seconds']:>9.1f}"
                f"{m['before_mib']:>12,.0f} MiB"
                f"{m['working_mib']:>9,.0f} MiB{m['working_mib'] * 2**20 / size:>8,.0f} B{m['recall']:>14.2%}"
                f"{m['unique_dropped']:>16,}"
            )


if __name__ == "__main__":
    main()
