"""A job's inputs resolved to files, and checked before any is extracted.

Paths, globs and listings become files (and Hugging Face dataset folders their Arrow files); a dataset's columns
and the exclusion list are read once here, so a run never finds out after extracting a crawl.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from corpus.config import no_such_file, resolve_path
from corpus.config.job import Job
from corpus.engine.input_stream import InputStream
from corpus.engine.stores import store_refusal
from corpus.errors import JobError
from corpus.stages.dataset import DatasetOptions, dataset_format
from corpus.stages.dataset_columns import input_columns, is_text_type


def job_inputs(job: Job) -> tuple[str, ...]:
    """The files the job reads, in order and once each, its datasets' columns and its exclusion list checked."""
    path = Path(job.source_file)
    if job.exclude:
        check_exclusions(job.exclude, path)
    inputs = expand_inputs(job, path)
    check_dataset_columns(job.dataset, path, inputs)
    return inputs


def expand_inputs(job: Job, path: Path) -> tuple[str, ...]:
    """The job's `inputs` and `inputs_list` entries as files; relative ones from `path`'s folder."""
    base = path.parent
    entries = [resolve_path(e, base) for e in job.inputs]
    if job.inputs_list:
        listing = resolve_path(job.inputs_list, base)
        try:
            with InputStream(listing) as fh:
                raw = fh.read()
        except (OSError, ValueError) as exc:
            raise JobError(
                file=path,
                key="inputs_list",
                problem=f"cannot read {listing}: {exc}; check the address, and that this machine reaches it",
            ) from exc
        if listing.endswith(".gz"):
            raw = gzip.decompress(raw)
        entries += [job.inputs_prefix + line.strip() for line in raw.decode().splitlines() if line.strip()]
    if not entries:
        raise JobError("no inputs: set 'inputs' (paths, globs, URLs) or 'inputs_list'", path)

    resolved: list[str] = []
    for entry in entries:
        if any(ch in entry for ch in "*?["):
            resolved += _glob(entry, path)
        elif "://" not in entry and Path(entry).is_dir():
            resolved += _hugging_face_files(Path(entry), path)
        elif "://" not in entry and not Path(entry).is_file():
            raise no_such_file(path, "inputs", entry)
        else:
            resolved.append(entry)
    if job.max_inputs:
        resolved = resolved[: job.max_inputs]
    return tuple(dict.fromkeys(resolved))  # drop repeats, keep order


def _glob(entry: str, path: Path) -> list[str]:
    """The files a glob matches (and Hugging Face dataset folders' files); any other folder it meets is not an input."""
    try:
        fs, _, _ = fsspec.get_fs_token_paths(entry)
        found = fs.glob(entry, detail=True)
    except Exception as exc:  # noqa: BLE001 - a store's own kinds (botocore's are not OSError)
        raise JobError(file=path, key="inputs", problem=f"cannot list {entry}: {store_refusal(exc) or exc}") from exc
    protocol = fs.protocol[0] if isinstance(fs.protocol, tuple) else fs.protocol
    matched: list[str] = []
    for match in sorted(found):
        if found[match].get("type") != "directory":
            matched.append(match if protocol == "file" else f"{protocol}://{match}")
        elif protocol == "file" and _is_hugging_face_folder(Path(match)):
            matched += _hugging_face_files(Path(match), path)
    if not matched:
        raise JobError(file=path, key="inputs", problem=f"the glob {entry!r} matches no file")
    return matched


def _is_hugging_face_folder(folder: Path) -> bool:
    return (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()


def _hugging_face_files(folder: Path, path: Path) -> list[str]:
    """The Arrow files of a dataset folder written by Hugging Face `datasets` (`save_to_disk`), every split's."""
    if (folder / "dataset_dict.json").is_file():
        splits = _json_file(folder / "dataset_dict.json", path).get("splits", [])
        return [file for split in splits for file in _hugging_face_files(folder / split, path)]
    if (folder / "state.json").is_file():
        state = _json_file(folder / "state.json", path)
        return [str(folder / entry["filename"]) for entry in state.get("_data_files", [])]
    raise JobError(
        file=path,
        key="inputs",
        problem=f"{folder} is a folder but not a Hugging Face dataset (no state.json or "
        "dataset_dict.json); name its files, or a glob such as 'folder/*.parquet'",
    )


def _json_file(file: Path, path: Path) -> dict:
    try:
        return json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise JobError(file=path, key="inputs", problem=f"cannot read {file}: {exc}") from None


def check_dataset_columns(dataset: DatasetOptions, path: Path, inputs: tuple[str, ...]) -> None:
    """Each local dataset input (and the first remote one) has the columns `dataset` maps (JSONL: the first object
    has the text field); refused when the plan is made (`path`: the job file), with the file and the columns it
    has. Remote files after the first are checked by their tasks."""
    unmatched = [p for p in dataset.per_input if not any(dataset.matching_pattern(s) == p for s in inputs)]
    if unmatched:
        raise JobError(
            file=path,
            key=f"dataset.per_input.{unmatched[0]}",
            problem="no input's path ends in this glob (a glob maps the "
            "inputs it matches that no glob before it matched); check it against the job's inputs",
        )
    remote_checked = False
    for source in inputs:
        fmt = dataset_format(source)
        if fmt is None or ("://" in source and remote_checked):
            continue
        remote_checked = remote_checked or "://" in source
        try:
            with InputStream(source, decompress=True) as stream:
                columns = input_columns(stream, fmt)
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise JobError(file=path, key="inputs", problem=f"cannot read {source} as {fmt}: {exc}") from None
        problem = dataset_columns_problem(dataset.for_source(source), source, fmt, columns)
        if problem:
            raise JobError(problem, path)


def dataset_columns_problem(
    dataset: DatasetOptions, source: str, fmt: str, columns: dict[str, pa.DataType | None]
) -> str | None:
    """What is wrong with a dataset input's `columns` (`input_columns`) for the `dataset` mapping, else None."""
    wanted = dataset.mapped()
    # A JSONL line may lack an optional field; its first object must have the text.
    required = {"text": wanted["text"]} if fmt == "jsonl" else wanted
    absent = {key: name for key, name in required.items() if name not in columns}
    if absent:
        keys = ", ".join(f"dataset.{key} = {name!r}" for key, name in absent.items())
        return (
            f"{source} has no column for {keys}; its columns are: {', '.join(columns) or 'none'}. Set the [dataset] "
            "keys to its column names"
        )
    text_type = columns[wanted["text"]]
    if text_type is not None and not is_text_type(text_type):
        texts = [name for name, type_ in columns.items() if type_ is not None and is_text_type(type_)]
        return (
            f"key 'dataset.text': column {wanted['text']!r} of {source} holds {text_type}, not text; set "
            f"dataset.text to a string column (its string columns: {', '.join(texts) or 'none'})"
        )
    return None


def check_exclusions(exclude: str, path: Path) -> None:
    """The exclusion file is Parquet with an `id` column: refused by the plan, not after a crawl's extraction."""
    try:
        with InputStream(exclude) as stream:
            columns = pq.ParquetFile(stream).schema_arrow.names
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise JobError(file=path, key="exclude", problem=f"cannot read {exclude} as Parquet: {exc}") from None
    if "id" not in columns:
        raise JobError(
            file=path,
            key="exclude",
            problem=f"{exclude} has no `id` column (its columns: {', '.join(columns) or 'none'}); "
            "give the ids of the documents to drop in a column named id",
        )
