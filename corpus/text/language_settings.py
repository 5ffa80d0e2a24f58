"""FineWeb-2's per-language filter settings: stop words and thresholds per language key (`cmn_Hani`).

FineWeb-2 (Penedo et al. 2025) tuned its filters per language and published one YAML file per language and
script (`configs/<key>.yml` of huggingface/fineweb-2): the language-score floor, Gopher quality's stop words and
word-length bounds, the share of words with a letter, Gopher repetition's line and n-gram fractions, FineWeb's line
punctuation and newline ratios. `FINEWEB2_THRESHOLDS` says which of our signals each setting bounds, and
`FINEWEB2_FIXED` the values its pipeline passed for every language (it turned paragraph repetition and short
lines off and raised the repeated-line characters to 0.1).
"""

from __future__ import annotations

import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

FINEWEB2 = "fineweb2"
FINEWEB2_ENV = "CORPUS_FINEWEB2_CONFIGS"
STOP_WORDS_MIN = 2  # FineWeb-2's min_stop_words, over the language's own list

# YAML setting -> (rule, signal, bound) it sets; the n-gram lists expand per n.
FINEWEB2_THRESHOLDS = {
    "language_score": ("language", "score", "min"),
    "dup_line_frac": ("gopher_repetition", "dup_line_frac", "max"),
    "min_avg_word_length": ("gopher_quality", "mean_word_length", "min"),
    "max_avg_word_length": ("gopher_quality", "mean_word_length", "max"),
    "max_non_alpha_words_ratio": ("gopher_quality", "alpha_words_frac", "min"),  # datatrove's name, a minimum
    "line_punct_thr": ("fineweb", "line_punct_ratio", "min"),
    "new_line_ratio": ("fineweb", "newline_ratio", "max"),
}
# What FineWeb-2's pipeline passed for every language; None turns a threshold off.
FINEWEB2_FIXED = {
    ("gopher_repetition", "dup_para_frac", "max"): None,
    ("gopher_repetition", "dup_para_char_frac", "max"): None,
    ("gopher_repetition", "dup_line_char_frac", "max"): None,
    ("fineweb", "short_line_ratio", "max"): None,
    ("fineweb", "char_dup_ratio", "max"): 0.1,
    ("gopher_quality", "stop_words", "min"): STOP_WORDS_MIN,
}


@dataclass(frozen=True)
class LanguageSettings:
    """One language's stop words and its thresholds, as (rule, signal, bound) -> value (None: off)."""

    key: str
    stop_words: tuple[str, ...]
    thresholds: dict[tuple[str, str, str], float | None]


def resolve_settings_path(given: str, job_folder: Path) -> str:
    """The folder or `.tar.xz` of YAML files `[select] per_language` names: "fineweb2" is the copy the
    `CORPUS_FINEWEB2_CONFIGS` environment variable points at; a path is taken relative to the job file."""
    if given == FINEWEB2:
        found = os.environ.get(FINEWEB2_ENV, "")
        if not found:
            raise ValueError(
                f'"{FINEWEB2}" needs FineWeb-2\'s configs on this machine: download the configs/ folder of '
                f'huggingface/fineweb-2 and set {FINEWEB2_ENV} to it (or give its path instead of "{FINEWEB2}")'
            )
        given = found
    path = Path(given).expanduser()
    path = path if path.is_absolute() else job_folder / path
    if not path.exists():
        raise ValueError(f"{path} does not exist; give a folder (or .tar.xz) of FineWeb-2's <language>_<Script>.yml")
    return str(path.resolve())


def load_language_settings(path: str) -> dict[str, LanguageSettings]:
    """Every language's settings in a folder (or `.tar.xz`) of FineWeb-2 YAML files, by language key."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser, where PyYAML has it: much faster
    settings = {}
    for name, text in _yaml_files(Path(path)):
        key = Path(name).stem
        try:
            config = yaml.load(text, Loader=loader)
            settings[key] = _settings_of(key, config)
        except (yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: {name}: not a FineWeb-2 language config ({exc})") from None
    if not settings:
        raise ValueError(f"{path} holds no <language>_<Script>.yml files")
    return settings


def _yaml_files(path: Path):
    """(name, text) of each YAML file, by name; an archive is read once, in its own order (a compressed stream
    read out of order decompresses again from its start for every file)."""
    if path.is_dir():
        files = [(file.name, file.read_text(encoding="utf-8")) for file in path.rglob("*.yml")]
    else:
        with tarfile.open(path) as archive:
            files = [
                (member.name, archive.extractfile(member).read().decode("utf-8"))
                for member in archive
                if member.isfile() and member.name.endswith(".yml")
            ]
    return sorted(files)


def _settings_of(key: str, config: dict) -> LanguageSettings:
    thresholds: dict[tuple[str, str, str], float | None] = dict(FINEWEB2_FIXED)
    for setting, target in FINEWEB2_THRESHOLDS.items():
        thresholds[target] = float(config[setting])
    for n, value in config["top_n_grams"]:
        thresholds[("gopher_repetition", f"top_{n}gram_char_frac", "max")] = float(value)
    for n, value in config["dup_n_grams"]:
        thresholds[("gopher_repetition", f"dup_{n}gram_char_frac", "max")] = float(value)
    return LanguageSettings(key, tuple(str(word) for word in config.get("stopwords") or ()), thresholds)
