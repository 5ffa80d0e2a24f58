"""Job files: TOML in, a validated `Job` out.

A job file names its inputs, its output folder and the options of each stage. It is validated on load: an
unknown key or a wrong type is reported with the key and the file, so a typo never silently falls back to a
default. Its inputs are listed and checked by the plan, before anything is written.
"""

from __future__ import annotations

import difflib
import hashlib
import tomllib
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import Field, ValidationError

from corpus.config import no_such_file, resolve_path
from corpus.config.per_language import split_per_language, with_per_language
from corpus.config.scorers import bucket_rules, model_rules, with_model_folders
from corpus.errors import JobError, ModelFileError, TokenizerError
from corpus.models.sequence_classifier import ClassifierOptions
from corpus.rulebook import load_once
from corpus.stages.annotate import AnnotateOptions
from corpus.stages.buckets import BucketOptions
from corpus.stages.dataset import DatasetOptions
from corpus.stages.dedup import DedupOptions
from corpus.stages.extract import ExtractOptions
from corpus.stages.options import StageOptions
from corpus.stages.prefilter import PrefilterOptions
from corpus.stages.read import ReadOptions
from corpus.stages.select import Threshold
from corpus.stages.tokenize import TextTokenizer, TokenizeOptions
from corpus.text.fasttext_model import check_header


class RayOptions(StageOptions):
    num_cpus_per_task: float = Field(1.0, gt=0)
    max_retries: int = Field(3, ge=0, description="retries of a shard task whose worker died")


class Job(StageOptions):
    name: str = Field(description="the job's name, in stats and manifests")
    inputs: list[str] = Field(
        default_factory=list,
        description="paths, globs or fsspec URLs of WARC/WET files, or of datasets: Parquet, JSONL (.gz, .zst) files "
        "and Hugging Face dataset folders (save_to_disk)",
    )
    inputs_list: str = Field("", description="a text file (optionally .gz) with one input path or URL per line")
    inputs_prefix: str = Field("", description="prepended to every line of inputs_list")
    max_inputs: int = Field(0, ge=0, description="take only the first N inputs (0 = all)")
    output: str = Field(description="output folder or URL")
    read: ReadOptions = ReadOptions()
    dataset: DatasetOptions = DatasetOptions()
    prefilter: PrefilterOptions = PrefilterOptions()
    extract: ExtractOptions = ExtractOptions()
    annotate: AnnotateOptions = AnnotateOptions()
    rules: dict[str, dict[str, Any]] = Field(default_factory=dict, description="settings per rule: [rules.NAME]")
    select: dict[str, Any] = Field(
        default_factory=dict,
        description='thresholds: [select.RULE] SIGNAL.min/max; per_language = "fineweb2" (or a folder of FineWeb-2\'s '
        "<language>_<Script>.yml): FineWeb-2's thresholds and stop words for each language it configured",
    )
    models: dict[str, ClassifierOptions] = Field(
        default_factory=dict,
        description="classifiers that score every document: [models.NAME] model = FOLDER; their signals are "
        "NAME.score, NAME.int_score and NAME.p_<label>, selected on as [select.NAME]",
    )
    buckets: dict[str, BucketOptions] = Field(
        default_factory=dict,
        description="[buckets.NAME] scores = [...]: the scores' percentiles in the run, combined, in equal buckets; "
        "signals NAME.percentile and NAME.bucket",
    )
    dedup: DedupOptions = DedupOptions()
    tokenize: TokenizeOptions = TokenizeOptions()
    exclude: str = Field(
        "",
        description="a Parquet file with an `id` column: those documents are dropped by selection as `excluded` "
        "(decontamination, takedowns)",
    )
    ray: RayOptions = RayOptions()

    # Filled in by load_job, not by the file.
    source_file: str = ""
    source_sha256: str = ""
    rule_settings: tuple[tuple[str, dict[str, Any]], ...] = ()  # (rule name, validated options) in annotate order
    thresholds: tuple[Threshold, ...] = ()  # in selection order
    documents_from: str = ""  # the run whose documents this job selects: an ablation variant's, or a run read back
    input_schema: bytes = b""  # the datasets' own columns every documents file stores (an Arrow schema), from the plan


INTERNAL_FIELDS = (
    "source_file",
    "source_sha256",
    "rule_settings",
    "thresholds",
    "documents_from",
    "input_schema",
)


def _format_error(path: Path, error: dict) -> JobError:
    """One pydantic error as a `JobError` naming `path` and the key."""
    key = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        section_model = Job
        for part in error["loc"][:-1]:
            section_model = section_model.model_fields[part].annotation
        known = [k for k in section_model.model_fields if k not in INTERNAL_FIELDS]
        close = difflib.get_close_matches(str(error["loc"][-1]), known, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else f" (known keys: {', '.join(known)})"
        return JobError(hint, path, key, form="unknown")
    if error["type"] == "missing":
        return JobError("", path, key, form="missing")
    if error["type"] == "value_error":  # a section's own check: its message says what it got
        return JobError(str(error["ctx"]["error"]), path, key)
    return JobError(f"{error['msg']} (got {error.get('input')!r})", path, key)


def read_toml(path: Path) -> tuple[dict, bytes]:
    """A TOML file's contents and its bytes (for the hash runs record)."""
    try:
        raw_bytes = path.read_bytes()
    except OSError as exc:
        raise JobError(
            f"cannot read job file {path}: {exc.strerror}; give the path of a TOML job file (e.g. jobs/sample.toml)"
        ) from exc
    return parse_toml(raw_bytes, path), raw_bytes


def parse_toml(raw_bytes: bytes, path: Path | str) -> dict:
    try:
        return tomllib.loads(raw_bytes.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise JobError(f"not valid TOML: {exc}", path) from exc


def load_job(path: str | Path, output: str | None = None) -> Job:
    """Read and validate a job file; `output` overrides the file's output folder.

    Its inputs are listed and read by the plan (`corpus.engine.plan.make_plan`), not here: a job read back from
    a finished run, or a rule tried with a job's settings, needs what the file says, not its crawl."""
    path = Path(path)
    data, raw_bytes = read_toml(path)
    return job_from_data(data, path, hashlib.sha256(raw_bytes).hexdigest(), output)


def job_from_data(data: dict, path: Path, source_sha256: str, output: str | None = None) -> Job:
    """Validate a job's TOML contents; relative paths are relative to `path`'s folder, errors name `path`."""
    for internal in INTERNAL_FIELDS:
        if internal in data:
            raise JobError("", path, internal, form="unknown")
    try:
        job = Job.model_validate(data)
    except ValidationError as exc:
        raise JobError.joined([_format_error(path, e) for e in exc.errors()]) from None
    if job.tokenize.tokenizer:
        tokenizer = resolve_path(job.tokenize.tokenizer, path.parent)
        try:
            load_once(TextTokenizer, tokenizer, job.tokenize.separator)  # the driver keeps it for the manifest
        except TokenizerError as exc:
            raise JobError(file=path, key="tokenize.tokenizer", problem=str(exc)) from None
        job = job.model_copy(update={"tokenize": job.tokenize.model_copy(update={"tokenizer": tokenizer})})
    if job.exclude:
        exclude = resolve_path(job.exclude, path.parent)
        if "://" not in exclude and not Path(exclude).is_file():
            raise no_such_file(path, "exclude", exclude)
        job = job.model_copy(update={"exclude": exclude})
    if job.extract.lid_model:
        lid = resolve_path(job.extract.lid_model, path.parent)
        if not Path(lid).is_file():
            raise no_such_file(path, "extract.lid_model", lid)
        with open(lid, "rb") as fh:
            try:
                check_header(fh.read(64), lid)
            except ModelFileError as exc:
                raise JobError(file=path, key="extract.lid_model", problem=str(exc)) from None
        job = job.model_copy(update={"extract": job.extract.model_copy(update={"lid_model": lid})})
    job = with_model_folders(job, path)
    rule_settings, thresholds = resolve_rules(job, path)
    _check_languages(job, rule_settings, path)
    return job.model_copy(
        update={
            "rule_settings": rule_settings,
            "thresholds": thresholds,
            # --output on the command line is relative to the working directory, like any CLI path.
            "output": resolve_path(output, Path.cwd()) if output else resolve_path(job.output, path.parent),
            "source_file": str(path.resolve()),
            "source_sha256": source_sha256,
        }
    )


def _check_languages(job: Job, rule_settings: tuple, path: Path) -> None:
    """The languages a job keeps are codes its language-ID model answers: one it never answers ('english', 'EN')
    would drop every page. A dataset's own `lang` column may use other codes: the rule's are not checked then."""
    language = dict(rule_settings).get("language")
    check_language_codes(
        {
            "extract.prepass_languages": job.extract.prepass_languages,
            "rules.language.languages": language["languages"] if language and not job.dataset.maps_languages() else [],
        },
        job.extract.lid_model,
        path,
    )


def check_language_codes(asked: dict[str, list[str]], lid_model: str, path: Path) -> None:
    """Refuses (`JobError`, naming `path` and the key) codes the language-ID model never answers."""
    if not any(asked.values()):
        return
    from corpus.stages.extract import LanguageIdentifier

    labels = LanguageIdentifier(lid_model).model.labels
    for key, codes in asked.items():
        unknown = [code for code in codes if code not in labels and code != "*"]
        if unknown:
            close = difflib.get_close_matches(unknown[0].lower(), labels, n=1) or [unknown[0].lower()[:2]]
            hint = f"did you mean {close[0]!r}? " if close[0] in labels else ""
            raise JobError(
                file=path,
                key=key,
                problem=f"{', '.join(map(repr, unknown))} is not a language the language-ID model "
                f"answers; {hint}it answers lower-case codes such as en, de, fr, es, zh ({len(labels)} in all)",
            )


def default_rule_order(registry: dict) -> list[str]:
    """Every rule but the opt-in ones, in FineWeb's published order (url, language, Gopher repetition, Gopher
    quality, C4, FineWeb: each rule's `position`), then the others: plain ones, modifiers, those written to see
    modified text, each by name. A document's first failure is the first rule in this order it fails."""

    def place(name: str) -> tuple:
        rule = registry[name]
        return rule.position, rule.modifies_text + 2 * (rule.sees_modified_text and not rule.modifies_text), name

    return sorted((name for name, rule in registry.items() if not rule.opt_in), key=place)


def _check_rule_names(path: Path, key: str, names, registry: dict) -> None:
    for name in names:
        if name not in registry:
            close = difflib.get_close_matches(name, list(registry), n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"known rules: {', '.join(registry)}"
            raise JobError(file=path, key=key, problem=f"unknown rule '{name}' ({hint})")


def resolve_rules(job: Job, path: Path) -> tuple[tuple[tuple[str, dict], ...], tuple]:
    """Validate [annotate], [rules.*] and [select] against the rule registry."""
    from corpus.rulebook import discover

    registry = discover()
    select, rules, languages_path = split_per_language(job.select, job.rules, path)
    settings = resolve_rule_settings(job.annotate.rules, rules, path)
    models = model_rules(job, path)
    buckets = bucket_rules(job, path, registry | models, [name for name, _ in settings] + list(models))
    models |= buckets
    names = [name for name, _ in settings] + list(models)
    selected, thresholds = resolve_thresholds(select, names, path, registry | models)
    thresholds = with_per_language(thresholds, languages_path, selected, path)
    _check_prefilter(job, path, registry, selected, thresholds)
    modifiers = [name for name in names if name not in models and registry[name].rewrites_text()]
    for name in job.tokenize.modifiers or []:
        if name not in modifiers:
            raise JobError(
                file=path,
                key="tokenize.modifiers",
                problem=f"'{name}' is not a computed modifier (computed modifiers: {', '.join(modifiers) or 'none'})",
            )
    return settings, tuple(thresholds)


def resolve_rule_settings(names: list[str] | None, rules: dict[str, dict], path: Path) -> tuple[tuple[str, dict], ...]:
    """(rule name, validated settings) of each rule computed, in order (`names`; None: the default order), from
    the `[rules.NAME]` tables; file options resolved relative to `path`'s folder and checked."""
    from corpus.rulebook import PATH_OPTION, discover

    registry = discover()
    names = names if names is not None else default_rule_order(registry)
    _check_rule_names(path, "annotate.rules", names, registry)
    _check_rule_names(path, "rules", rules, registry)

    settings = []
    for name in names:
        raw = dict(rules.get(name, {}))
        options_model = registry[name].Options
        for field_name, field in options_model.model_fields.items():
            if PATH_OPTION in field.metadata and raw.get(field_name):
                resolved = resolve_path(raw[field_name], path.parent)
                if not Path(resolved).exists():
                    raise no_such_file(path, f"rules.{name}.{field_name}", resolved)
                raw[field_name] = resolved
        try:
            options = options_model.model_validate(raw)
        except ValidationError as exc:
            errors = exc.errors()
            for error in errors:
                error["loc"] = ("rules", name, *error["loc"])
            messages = []
            for error in errors:
                if error["type"] == "extra_forbidden":
                    known = ", ".join(options_model.model_fields) or "none"
                    key = ".".join(map(str, error["loc"]))
                    messages.append(JobError(f" (known keys: {known})", path, key, form="unknown"))
                else:
                    messages.append(_format_error(path, error))
            raise JobError.joined(messages) from None
        try:
            registry[name].check(options)
        except ValueError as exc:
            raise JobError(file=path, key=f"rules.{name}", problem=str(exc)) from None
        settings.append((name, options.model_dump()))
    return tuple(settings)


def resolve_thresholds(
    select: dict[str, Any], names: list[str], path: Path, registry: dict | None = None
) -> tuple[list[str], list]:
    """(the rules selected on, their thresholds in selection order) from a `[select]` table over the computed
    rules `names`: each rule's published defaults, overridden by the table. `registry`: the rules by name
    (default: every registered rule; a job adds its models)."""
    from corpus.rulebook import discover

    registry = registry if registry is not None else discover()
    select = dict(select)
    selected = select.pop("rules", names)
    if not isinstance(selected, list) or not all(isinstance(n, str) for n in selected):
        raise JobError(file=path, key="select.rules", problem="expected a list of rule names")
    _check_rule_names(path, "select.rules", selected, registry)
    for name in selected:
        if name not in names:
            raise JobError(
                file=path, key="select.rules", problem=f"rule '{name}' is not computed (add it to annotate.rules)"
            )
    _check_rule_names(path, "select", select, registry)
    thresholds = []
    for name in selected:
        rule = registry[name]
        overrides = select.pop(name, {})
        if not isinstance(overrides, dict):
            raise JobError(file=path, key=f"select.{name}", problem="expected a table of SIGNAL.min / SIGNAL.max")
        signals = {signal.name: signal for signal in rule.signals}
        bounds = {signal: dict(b) for signal, b in rule.defaults.items()}
        for signal_name, given in overrides.items():
            key = f"select.{name}.{signal_name}"
            if signal_name not in signals:
                raise JobError(
                    file=path,
                    key=key,
                    problem=f"rule {name} has no signal '{signal_name}' (signals: {', '.join(signals)})",
                )
            if not isinstance(given, dict) or not set(given) <= {"min", "max", "min_quantile", "max_quantile"}:
                raise JobError(
                    file=path, key=key, problem=f"expected min, max, min_quantile or max_quantile, got {given!r}"
                )
            is_bool = pa.types.is_boolean(signals[signal_name].type)
            for bound, value in given.items():
                numeric = isinstance(value, int | float) and not isinstance(value, bool)
                if bound.endswith("_quantile"):
                    if is_bool or not numeric or not 0 <= value <= 1:
                        raise JobError(
                            file=path,
                            key=f"{key}.{bound}",
                            problem=f"expected a number from 0 to 1 on a numeric signal, got {value!r}",
                        )
                elif (isinstance(value, bool) if is_bool else numeric) is False:
                    expected = "true or false" if is_bool else "a number"
                    raise JobError(file=path, key=f"{key}.{bound}", problem=f"expected {expected}, got {value!r}")
                else:
                    _check_in_range(signals[signal_name], path, f"{key}.{bound}", bound, value)
            bounds.setdefault(signal_name, {}).update(given)
            merged = bounds[signal_name]
            for low, high in (("min", "max"), ("min_quantile", "max_quantile")):
                if low in merged and high in merged and merged[low] > merged[high]:
                    low_said, high_said = (
                        f"{bound} {merged[bound]}" + ("" if bound in given else " (the rule's default)")
                        for bound in (low, high)
                    )
                    raise JobError(
                        file=path,
                        key=key,
                        problem=f"{low_said} is above {high_said}: no document could pass; lower {low} or raise {high}",
                    )
        for signal in rule.signals:
            given = bounds.get(signal.name, {})
            for bound in ("min", "max"):
                if bound in given:
                    thresholds.append(Threshold(name, signal.name, bound, given[bound]))
                if f"{bound}_quantile" in given:
                    thresholds.append(Threshold(name, signal.name, bound, None, given[f"{bound}_quantile"]))
    if select:
        unselected = next(iter(select))
        if unselected not in names:
            raise JobError(
                file=path,
                key=f"select.{unselected}",
                problem=f"rule '{unselected}' is not computed; add it to annotate.rules (or remove its thresholds)",
            )
        raise JobError(
            file=path, key=f"select.{unselected}", problem=f"rule '{unselected}' is not in select.rules; add it there"
        )
    return selected, thresholds


def _check_in_range(signal, path: Path, key: str, bound: str, value: float) -> None:
    """Refuse a threshold no document can pass, at load rather than after a run.

    Such as a min above the signal's largest value, or a max below 0 for a signal that has one."""
    if signal.most is None or (bound == "min" and value <= signal.most) or (bound == "max" and value >= 0):
        return
    hint = f"; did you mean {value / 100:g}?" if bound == "min" and 0 <= value / 100 <= signal.most else ""
    problem = f"{value!r} drops every document: {signal.name} is from 0 to {signal.most:g} ({signal.meaning}){hint}"
    raise JobError(problem, path, key)


def _check_prefilter(job: Job, path: Path, registry: dict, selected: list[str], thresholds: list) -> None:
    """A rule before extraction reads no text, is selected on, and has fixed thresholds (no corpus yet)."""
    _check_rule_names(path, "prefilter.rules", job.prefilter.rules, registry)
    for name in job.prefilter.rules:
        if registry[name].reads_text:
            readers = [n for n, rule in registry.items() if not rule.reads_text]
            raise JobError(
                file=path,
                key="prefilter.rules",
                problem=f"rule '{name}' reads the text, which only exists after extraction "
                f"(rules that read no text: {', '.join(readers) or 'none'})",
            )
        if name not in selected:
            raise JobError(
                file=path, key="prefilter.rules", problem=f"rule '{name}' is not selected on (add it to select.rules)"
            )
        for threshold in thresholds:
            if threshold.rule == name and threshold.quantile is not None:
                raise JobError(
                    file=path,
                    key=f"select.{threshold.column}",
                    problem=f"a quantile threshold needs the whole corpus, so rule "
                    f"'{name}' cannot run before extraction; give a fixed min/max or remove it from prefilter.rules",
                )
