"""A PyTorch `IterableDataset` over a run's token shards (torch comes with the `ablation` extra)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from corpus.lab.token_stream import TokenStream

POSITION = ("unit", "row", "offset")


class TokenDataset(IterableDataset):
    """Training sequences of `seq_len + 1` tokens packed from a run's token shards.

    Tokens are int64, packed across documents; each token is in exactly one sequence across DDP ranks
    (`rank`/`world_size`, from `torch.distributed` when it is initialised and they are not given) and DataLoader
    workers (`TokenStream` deals the row groups).

    Each item is `{"tokens": tensor, "worker": w, "unit": u, "row": r, "offset": o}`: the reader's position after
    the sequence. `TokenDataset.positions(batch)` turns a DataLoader batch into `{worker: position}`; keep the
    latest one per worker and pass the dict as `state` to resume, with the same world size and worker count."""

    def __init__(
        self,
        run: str | Path,
        seq_len: int,
        rank: int | None = None,
        world_size: int | None = None,
        state: dict[int, dict] | None = None,
        drop_last: bool = True,
    ):
        super().__init__()
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        self.run, self.seq_len, self.drop_last = run, seq_len, drop_last
        self.rank = rank if rank is not None else (torch.distributed.get_rank() if distributed else 0)
        self.world_size = (
            world_size if world_size is not None else (torch.distributed.get_world_size() if distributed else 1)
        )
        self.state = {int(worker): dict(position) for worker, position in (state or {}).items()}

    def __iter__(self):
        info = get_worker_info()
        worker, num_workers = (info.id, info.num_workers) if info is not None else (0, 1)
        if any(w >= num_workers for w in self.state):
            raise ValueError(
                f"resume state has positions of workers {sorted(self.state)}, this loader has {num_workers}: "
                "resume with the DataLoader's num_workers of the run that saved it"
            )
        stream = TokenStream(
            self.run,
            self.seq_len,
            self.rank,
            self.world_size,
            worker,
            num_workers,
            self.state.get(worker),
            self.drop_last,
        )
        for sequence in stream:
            yield {"tokens": torch.from_numpy(sequence.astype(np.int64)), "worker": worker, **stream.state}

    @staticmethod
    def positions(batch: dict) -> dict[int, dict]:
        """The position after a collated batch, by worker (a DataLoader batch comes from one worker)."""
        return {int(batch["worker"][-1]): {key: int(batch[key][-1]) for key in POSITION}}
