"""corpus: web crawls in, pretraining data and evidence about filtering rules out."""

import os
import sys
from pathlib import Path

__version__ = "0.1.0"


def user_cache_dir() -> Path:
    """Where corpus keeps what it can recompute (Numba kernels, parsed lists): `$XDG_CACHE_HOME/corpus`."""
    return Path(os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")) / "corpus"


def _use_user_numba_cache() -> None:
    """Numba's compiled kernels go to the user's cache folder, not beside the sources (a read-only install fails
    there, a checkout gets dirty); the user's own NUMBA_CACHE_DIR wins. The first process to find the folder empty
    says once that the kernels compile now, so ~20 s of silence is not taken for a hang."""
    if "NUMBA_CACHE_DIR" not in os.environ:
        os.environ["NUMBA_CACHE_DIR"] = str(user_cache_dir() / "numba")
        if "numba" in sys.modules:  # imported before us: its config already read the environment
            sys.modules["numba"].config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]
    folder = Path(os.environ["NUMBA_CACHE_DIR"])
    if os.environ.get("CORPUS_NUMBA_NOTICE") != "shown" and not any(folder.rglob("*.nbi")):
        os.environ["CORPUS_NUMBA_NOTICE"] = "shown"  # once per process tree: Ray workers inherit it
        print(f"corpus: compiling Numba kernels on first use (about 20 s, once; cached in {folder})", file=sys.stderr)


_use_user_numba_cache()
