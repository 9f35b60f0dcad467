"""A process grid: the `grid` design's exchange, between `allreduce` and `sharded`.

P ranks form G groups of S consecutive ranks (P = G x S). Within a group the first layer's units are
split across the S ranks as `sharded` splits them across all P: each rank computes its units for the
group's rows (its S slots of the global batch), the group gathers them and runs the small layers on
its rows. Across the groups the shards are data-parallel: the ranks holding the same units (one per
group) sum their gradient of those rows of the first layer, and of the small layers, with one
Allreduce each, and step. So a step reads G-fold fewer rows than `sharded` and reduces S-fold fewer
bytes than `allreduce`; `sharded` is G = 1 (taken as it takes it, the update folded into the GEMM),
`allreduce` is S = 1. The result is serial SGD on the global batch, to rounding.

The shape is the engine's choice (grid_shape), from what a rank moves a step in bytes; run.json
records it.
"""

import numpy as np

from mpinet.engine.comm import Comm
from mpinet.engine.exchanges import ShardedFirstLayer, Step

# A byte reduced across ranks costs about this many bytes streamed from memory: on the 16-core node of
# docs/performance.md one rank streams 6.8 GB/s while all 16 stream, and a ring Allreduce of the
# 8.1 MB gradient moved its bytes at 1.9-4.5 GB/s a rank (16 to 2 ranks).
REDUCED_BYTE = 3.0
# the passes over a rank's part of the first layer a step makes: forward, gradient, update
WEIGHT_PASSES = 3
# and over the group's rows: stored pixels read and written as values, read by the forward and the
# update GEMMs (the few units of a shard make those GEMMs stream the rows, not compute)
ROW_PASSES = 4


def step_bytes(ranks: int, shards: int, sizes: tuple[int, ...], batch: int, itemsize: int) -> float:
    """What one rank moves in a step of a G x S grid (G = ranks / shards), in streamed bytes: the
    group's rows through its units, its 1/S of the first layer's weights, and their reduction. The
    ratios are this node's (the module's constants); a run's trial (`auto`) sees the rest."""
    groups, n_in, units = ranks // shards, sizes[0], sizes[1]
    rows = ROW_PASSES * shards * batch * n_in * itemsize
    weights = units * n_in * itemsize / shards
    reduced = 2 * (groups - 1) / groups * weights * REDUCED_BYTE
    gathered = (shards - 1) / shards * units * shards * batch * itemsize  # the first layer's outputs
    return rows + WEIGHT_PASSES * weights + reduced + gathered


def grid_shape(ranks: int, sizes: tuple[int, ...], batch: int, itemsize: int) -> tuple[int, int]:
    """(G, S): the grid of `ranks` ranks whose step moves the fewest bytes (step_bytes), fewer shards on a tie."""
    shards = [s for s in range(1, ranks + 1) if ranks % s == 0]
    best = min(shards, key=lambda s: (step_bytes(ranks, s, sizes, batch, itemsize), s))
    return ranks // best, best


class ProcessGrid(ShardedFirstLayer):
    """`sharded` within groups of S consecutive ranks, data-parallel across the G groups (the module's
    docstring)."""

    reads_all_rows = True  # a group reads its rows of every step: over an epoch, every row

    @classmethod
    def create(cls, comm, sizes, batch, dtype, sync_every):
        return cls(comm, sizes, batch, dtype, grid_shape(comm.size, sizes, batch, np.dtype(dtype).itemsize))

    def __init__(self, comm: Comm, sizes: tuple[int, ...], batch: int, dtype, shape: tuple[int, int]):
        self.shape = groups, shards = shape
        super().__init__(comm, sizes, batch, dtype, group=comm.split(comm.rank // shards))
        self.across = comm.split(comm.rank % shards)  # the ranks holding the same units, one per group
        # one group: sharded's step, the update folded into the GEMM; else a gradient to sum across
        self.updates_in_backward = self.fused_update = groups == 1
        self.rows = slice(self.mine.start * self.n_in, self.mine.stop * self.n_in)  # mine of the flat buffer
        self.rest = slice(sizes[0] * sizes[1], None)  # the first layer's bias and the small layers

    def step(self, params: np.ndarray, grads: np.ndarray, step: Step, serve=None) -> None:
        if self.updates_in_backward:
            return
        for part in (self.rows, self.rest):
            self.across.sum_inplace(grads[part])
            params[part] -= grads[part]

    def same_as(self) -> str | None:
        groups, shards = self.shape
        return "sharded" if groups == 1 else "allreduce" if shards == 1 else None

    def describe(self) -> dict:
        return {"grid": {"groups": self.shape[0], "shards": self.shape[1]}}

    def close(self) -> None:
        self.group.free()
        self.across.free()
