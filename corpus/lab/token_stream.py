"""Reading a run's token shards back as training sequences, local or any fsspec URL (through `RunFolder`)."""

from __future__ import annotations

import numpy as np

from corpus.engine import RunFolder


class TokenStream:
    """Streams a run's token shards as training sequences of `seq_len + 1` tokens, packed across document
    boundaries (the separator marks them), each token in exactly one sequence.

    The unit of work is a Parquet row group: all row groups of all files (manifest order) are dealt round-robin to
    the `world_size x num_workers` readers, so DDP ranks and DataLoader workers never overlap. `state` (after
    each sequence: next row group of this reader, row, token offset) resumes exactly where a run stopped. A
    PyTorch `IterableDataset` wraps it in a few lines: pick `worker`/`num_workers` from
    `torch.utils.data.get_worker_info()` and yield from the stream. `drop_last` drops this reader's final, shorter
    sequence."""

    def __init__(
        self,
        run: str,
        seq_len: int,
        rank: int = 0,
        world_size: int = 1,
        worker: int = 0,
        num_workers: int = 1,
        state: dict | None = None,
        drop_last: bool = False,
    ):
        self.run = RunFolder(str(run))
        self.length = seq_len + 1
        self.drop_last = drop_last
        manifest = self.run.token_manifest()
        if manifest is None:
            raise FileNotFoundError(f"{self.run.url} has no tokens/manifest.json: run a job with [tokenize] tokenizer")
        units = [
            (file["path"], group) for file in manifest["files"] for group in range(self.run.row_groups(file["path"]))
        ]
        readers = world_size * num_workers
        self.units = units[rank * num_workers + worker :: readers]
        self.state = dict(state) if state else {"unit": 0, "row": 0, "offset": 0}

    def __iter__(self):
        start = dict(self.state)
        pending: list[np.ndarray] = []
        size = 0
        for unit in range(start["unit"], len(self.units)):
            path, group = self.units[unit]
            documents = self.run.read_row_group(path, group, ["tokens"]).column("tokens")
            for row in range(start["row"] if unit == start["unit"] else 0, len(documents)):
                tokens = documents[row].values.to_numpy()
                offset = start["offset"] if (unit, row) == (start["unit"], start["row"]) else 0
                while offset < len(tokens):
                    take = min(self.length - size, len(tokens) - offset)
                    pending.append(tokens[offset : offset + take])
                    size += take
                    offset += take
                    if size == self.length:
                        self.state = {"unit": unit, "row": row, "offset": offset}
                        yield np.concatenate(pending)
                        pending, size = [], 0
        self.state = {"unit": len(self.units), "row": 0, "offset": 0}
        if size and not self.drop_last:
            yield np.concatenate(pending)
