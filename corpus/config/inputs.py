"""A job's inputs: its paths, globs and listings resolved to files, and each input file checked at load where it can
be (a dataset's columns, the exclusion list), so a run never finds out after extracting a crawl."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import TYPE_CHECKING

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from corpus.config import no_such_file
from corpus.errors import JobError
from corpus.stages.dataset import DatasetOptions, dataset_format
from corpus.stages.dataset_columns import input_columns, is_text_type

if TYPE_CHECKING:
    from corpus.config.job import Job


def _opened(source: str, decompress: bool = False):
    """The engine's reader of an input (remote ones retried); imported here, as the engine imports the job."""
    from corpus.engine.input_stream import InputStream

    return InputStream(source, decompress)


def resolve_path(entry: str, base: Path) -> str:
    """Relative local paths are relative to the job file's folder; URLs are left as they are."""
    if "://" in entry:
        return entry
    path = Path(entry).expanduser()
    return str(path if path.is_absolute() else (base / path).resolve())


def expand_inputs(job: Job, path: Path) -> tuple[str, ...]:
    base = path.parent
    entries = [resolve_path(e, base) for e in job.inputs]
    if job.inputs_list:
        listing = resolve_path(job.inputs_list, base)
        try:
            with _opened(listing) as fh:
                raw = fh.read()
        except (OSError, ValueError) as exc:
            raise JobError(
                f"{path}: key 'inputs_list': cannot read {listing}: {exc}; check the address, and that this machine "
                "reaches it"
            ) from exc
        if listing.endswith(".gz"):
            raw = gzip.decompress(raw)
        entries += [job.inputs_prefix + line.strip() for line in raw.decode().splitlines() if line.strip()]
    if not entries:
        raise JobError(f"{path}: no inputs: set 'inputs' (paths, globs, URLs) or 'inputs_list'")

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
        from corpus.engine.stores import store_refusal

        raise JobError(f"{path}: key 'inputs': cannot list {entry}: {store_refusal(exc) or exc}") from exc
    protocol = fs.protocol[0] if isinstance(fs.protocol, tuple) else fs.protocol
    matched: list[str] = []
    for match in sorted(found):
        if found[match].get("type") != "directory":
            matched.append(match if protocol == "file" else f"{protocol}://{match}")
        elif protocol == "file" and _is_hugging_face_folder(Path(match)):
            matched += _hugging_face_files(Path(match), path)
    if not matched:
        raise JobError(f"{path}: key 'inputs': the glob {entry!r} matches no file")
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
        f"{path}: key 'inputs': {folder} is a folder but not a Hugging Face dataset (no state.json or "
        "dataset_dict.json); name its files, or a glob such as 'folder/*.parquet'"
    )


def _json_file(file: Path, path: Path) -> dict:
    try:
        return json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise JobError(f"{path}: key 'inputs': cannot read {file}: {exc}") from None


def check_dataset_columns(dataset: DatasetOptions, path: Path, inputs: tuple[str, ...]) -> None:
    """Each local dataset input (and the first remote one) has the columns `dataset` maps (JSONL: the first object
    has the text field); refused at load (`path`: the job file), with the file and the columns it has. Remote files
    after the first are checked by their tasks."""
    unmatched = [p for p in dataset.per_input if not any(dataset.matching_pattern(s) == p for s in inputs)]
    if unmatched:
        raise JobError(
            f"{path}: key 'dataset.per_input.{unmatched[0]}': no input's path ends in this glob (a glob maps the "
            "inputs it matches that no glob before it matched); check it against the job's inputs"
        )
    remote_checked = False
    for source in inputs:
        fmt = dataset_format(source)
        if fmt is None or ("://" in source and remote_checked):
            continue
        remote_checked = remote_checked or "://" in source
        try:
            with _opened(source, decompress=True) as stream:
                columns = input_columns(stream, fmt)
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise JobError(f"{path}: key 'inputs': cannot read {source} as {fmt}: {exc}") from None
        problem = dataset_columns_problem(dataset.for_source(source), source, fmt, columns)
        if problem:
            raise JobError(f"{path}: {problem}")


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
    """The exclusion file is Parquet with an `id` column: refused at load, not after a crawl's extraction."""
    try:
        with _opened(exclude) as stream:
            columns = pq.ParquetFile(stream).schema_arrow.names
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise JobError(f"{path}: key 'exclude': cannot read {exclude} as Parquet: {exc}") from None
    if "id" not in columns:
        raise JobError(
            f"{path}: key 'exclude': {exclude} has no `id` column (its columns: {', '.join(columns) or 'none'}); "
            "give the ids of the documents to drop in a column named id"
        )
