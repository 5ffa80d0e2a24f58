"""`[select] per_language`: FineWeb-2's thresholds per language, merged into the job's thresholds."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from corpus.errors import JobError
from corpus.rulebook import load_once
from corpus.text.language_settings import load_language_settings, resolve_settings_path
from corpus.text.segmenters import EXTRA, missing_segmenters


def split_per_language(select: dict, rules: dict, path: Path) -> tuple[dict, dict, str]:
    """(the `[select]` table without `per_language`, the `[rules.*]` tables with Gopher quality counting each
    language's own stop words, the configs' resolved path or "" where the job sets none)."""
    select = dict(select)
    languages_path = per_language_path(select.pop("per_language", ""), path)
    if languages_path:
        rules = {**rules, "gopher_quality": {"stop_words_of": languages_path, **rules.get("gopher_quality", {})}}
    return select, rules, languages_path


def with_per_language(thresholds: list, languages_path: str, selected: list[str], path: Path) -> list:
    """The thresholds with each configured language's own values, where `languages_path` is set."""
    if not languages_path:
        return thresholds
    if "language" not in selected:
        raise JobError(
            file=path,
            key="select.per_language",
            problem="thresholds per language need the language rule; add 'language' to annotate.rules and select.rules",
        )
    return list(_merged(tuple(thresholds), languages_path, tuple(selected)))


@functools.cache
def _merged(thresholds: tuple, languages_path: str, selected: tuple) -> tuple:
    """`per_language_thresholds`, once per process for the same thresholds and configs (`apply_rules` calls)."""
    settings = load_once(load_language_settings, languages_path)
    return tuple(per_language_thresholds(list(thresholds), settings, list(selected)))


def per_language_path(given: Any, path: Path) -> str:
    """The FineWeb-2 configs `[select] per_language` names (resolved), or "" without it; refuses a job that
    would segment a language's words without its segmenter installed."""
    if not given:
        return ""
    if not isinstance(given, str):
        raise JobError(file=path, key="select.per_language", problem=f'expected "fineweb2" or a path, got {given!r}')
    try:
        resolved = resolve_settings_path(given, path.parent)
        load_once(load_language_settings, resolved)
    except ValueError as exc:
        raise JobError(file=path, key="select.per_language", problem=str(exc)) from None
    missing = [s for s in missing_segmenters() if s.in_extra]
    if missing:
        names = ", ".join(f"{s.requirement} ({s.language})" for s in missing)
        raise JobError(
            file=path,
            key="select.per_language",
            problem=f"FineWeb-2 splits words with segmenters that are not installed: {names}; {EXTRA}",
        )
    return resolved


def per_language_thresholds(thresholds: list, settings: dict, selected: list[str]) -> list:
    """The job's thresholds with FineWeb-2's value for each language that has one.

    Values go in `Threshold.by_language`; the bounds FineWeb-2 sets that the job does not are added (in force only
    for those languages), in rule and signal order."""
    from dataclasses import replace

    from corpus.rulebook import discover
    from corpus.stages.select import Threshold

    by_target: dict[tuple[str, str, str], list] = {}
    for key, language in sorted(settings.items()):
        for target, value in language.thresholds.items():
            if target[0] in selected:
                by_target.setdefault(target, []).append((key, value))
    out = []
    for threshold in thresholds:
        values = by_target.pop((threshold.rule, threshold.signal, threshold.bound), None)
        out.append(
            replace(threshold, by_language=tuple(values)) if values and threshold.quantile is None else threshold
        )
    out += [
        Threshold(rule, signal, bound, None, by_language=tuple(v)) for (rule, signal, bound), v in by_target.items()
    ]
    registry = discover()

    def place(threshold) -> tuple:
        rule = registry.get(threshold.rule)  # None: a job's model (`[models.NAME]`), in the order the job gave
        signals = [signal.name for signal in rule.signals] if rule else [threshold.signal]
        return selected.index(threshold.rule), signals.index(threshold.signal), threshold.bound != "min"

    return sorted(out, key=place)


def languages_without_settings(languages: dict[str, list[int]], thresholds: list) -> list[str]:
    """With per-language thresholds, the documents whose language has none: they fell back to the job's."""
    if not any(t.by_language for t in thresholds):
        return []
    configured = [t.value_of_language for t in thresholds if t.by_language]
    fallback = sorted(
        ((n, key) for key, (n, _) in languages.items() if not any(key in values for values in configured)), reverse=True
    )
    if not fallback:
        return []
    named = ", ".join(f"{key} {n}" for n, key in fallback[:8]) + (" …" if len(fallback) > 8 else "")
    return [
        f"{sum(n for n, _ in fallback)} documents are in languages without per-language settings and were selected "
        f"with the job's thresholds ({named})"
    ]
