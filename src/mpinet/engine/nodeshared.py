"""One copy of the weights per node: the `node` design's exchange.

Every data-parallel rank of `allreduce` keeps its own copy of the weights and streams it about
three times a step (forward, gradient, update), then reduces the whole gradient through MPI's
buffers; on a 16-core node that is 16 private copies of the 8.1 MB first layer competing for one
memory system. Here the ranks that share a node (MPI_Comm_split_type SHARED) hold one set of
weights in an MPI-3 shared window, which the node's caches hold once, and no byte of a step passes
through MPI's buffers on a node:

- the wide first layer's weight gradient is never written: its update over the global batch is
  Dᵀ·X (D: the rows' scaled output errors, [rows, units]; X: the rows, [rows, inputs]). Every rank
  writes its rows' D into the window; after a barrier the ranks share out the weights' columns in
  blocks, each claiming the next block from a counter in shared memory as it finishes one (Claims),
  and subtract Dᵀ·X[:, block] from it, reading every row of the global batch but only the block's
  columns from the memory-mapped training file, the update folded into that GEMM
  (mpinet.engine.blas). The flops are on average a rank's own gradient's; a rank that a busy core
  slows takes fewer blocks instead of holding the others at the next barrier (a fixed 1/L of the
  columns each made every step as slow as its slowest rank). A block is one GEMM over all the
  rows whichever rank runs it, so who took which changes no weight.
- the rest of the flat buffer (the first layer's bias, the small layers: under 0.1 % of the Intel
  net) goes through per-rank segments: every rank writes its gradient there and each rank sums one
  slice over the node's segments in node rank order and steps that slice.
- a second barrier, and every rank reads the new weights.

The sums run in a fixed order in this process (the rows in rank order inside one GEMM, the segments
in node rank order), so the result does not depend on the MPI library's reduction algorithm and is
bit for bit the same run to run; it is serial SGD on the global batch, to rounding. Across nodes
(hierarchical) the node leaders (node rank 0) gather the nodes' D and every node's sum of the rest
between the barriers (added in the leaders' order, so every node gets the same sum whatever the
library), every node updates its copy from all the rows, and once an epoch the first node's weights
are broadcast to the others, so nodes with different BLAS kernels cannot drift apart.
"""

import time

import numpy as np

from mpinet.datasets.dataset import features
from mpinet.engine import blas
from mpinet.engine.comm import Comm, even_split
from mpinet.engine.exchanges import Factors, FirstLayerFactors, Step
from mpinet.engine.machine import this_machine
from mpinet.engine.model import Net


class NodeShared(FirstLayerFactors):
    """The global batch's SGD step, with one copy of the weights per node (the module's docstring).
    With `Comm(None)` or one rank it is serial SGD with the first layer's update from its factors."""

    # every rank reads the columns of the blocks it claims, of every row of the global batch: all
    # ranks together read the batch once, as data-parallel ranks their shards (reads_all_rows stays False)

    def __init__(self, comm: Comm, sizes: tuple[int, ...], batch: int, dtype):
        self.comm = comm
        dt = np.dtype(dtype)
        n_in, units = sizes[0], sizes[1]
        self.first = n_in * units  # the first layer's weights lead the flat buffer
        n_params = Net(sizes).n_params
        self.node = self.leaders = self.win = None
        local, size, nodes, self.order, self.leader_of = 0, 1, 1, [comm.rank], [comm.rank]
        if comm.mpi is not None:
            from mpi4py import MPI

            self.node = comm.mpi.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
            local, size = self.node.Get_rank(), self.node.Get_size()
            leaders = comm.mpi.Split(0 if local == 0 else MPI.UNDEFINED, key=comm.rank)
            # every rank's node, named by its leader's rank; D's rows: node after node, in rank order
            self.leader_of = comm.gather_objects(self.node.bcast(comm.rank, root=0))
            self.order = sorted(range(comm.size), key=lambda r: (self.leader_of[r], r))
            nodes = len(set(self.leader_of))
            if nodes > 1 and local == 0:
                self.leaders = leaders
            elif leaders != MPI.COMM_NULL:
                leaders.Free()
        self.local, self.size, self.nodes = local, size, nodes
        # each node's ranks, in the leaders' order; whether D's row order is plain rank order
        self.blocks = [[r for r in self.order if self.leader_of[r] == lead] for lead in sorted(set(self.leader_of))]
        self.rank_ordered = self.order == sorted(self.order)
        rows = batch * comm.size
        # the window: the weights, D of the global batch, the rest's node sum (several nodes only)
        # and one segment a rank for the rest's gradient; allocated by the node's rank 0, each page
        # placed where it is first written
        rest = n_params - self.first
        layout = [("weights", n_params), ("d", rows * units), ("total", rest * (nodes > 1))]
        layout += [(f"segment{r}", rest) for r in range(size)]
        shared = self._allocate(sum(n for _, n in layout), dt)
        views, offset = {}, 0
        for name, n in layout:
            views[name], offset = shared[offset : offset + n], offset + n
        self.weights, self.total = views["weights"], views["total"]
        self.d_all = views["d"].reshape(rows, units)
        self.segments = [views[f"segment{r}"] for r in range(size)]
        part = even_split(rest, size)
        self.part = slice(self.first + sum(part[:local]), self.first + sum(part[: local + 1]))  # of the rest
        self.acc = np.empty(part[local], dtype=dt)
        # a leader's copy of every node's sum of the rest, summed in the leaders' order (across nodes)
        self.node_sums = np.empty((nodes, rest), dtype=dt) if self.leaders is not None else None
        # a block of the global batch's rows' values, some columns (_update_columns)
        self.block_bytes = this_machine().l2_bytes // 2
        self.xc = np.empty((rows, max(1, min(n_in, self.block_bytes // (rows * dt.itemsize)))), dtype=dt)
        self.claims = Claims(self.node if size > 1 else None)

    def hold(self, params: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The node's shared weights (set to `params`, which every rank computed alike) and a private
        gradient buffer (only its small layers' part is ever written, and copied to the segment)."""
        if self.local == 0:
            self.weights[...] = params
        self._sync()
        return self.weights, np.zeros_like(params)

    def share(self, params: np.ndarray) -> None:
        """Rank 0's weights on every node (a resumed checkpoint): the leaders pass them on."""
        self._sync()
        if self.leaders is not None:
            self.leaders.Bcast(params, root=0)
        self._sync()

    def finish(self, params: np.ndarray) -> None:
        """Once an epoch across nodes: the first node's weights on every node, so that nodes whose BLAS
        kernels round the update differently cannot drift apart for longer than an epoch (every other
        design's finish does the same); nothing on one node."""
        if self.nodes == 1:
            return
        t = time.perf_counter()
        self.share(params)
        self.comm.seconds += time.perf_counter() - t
        if self.leaders is not None and self.leaders.Get_rank() == 0:
            self.comm.bytes_sent += params.nbytes

    def step(self, params: np.ndarray, grads: np.ndarray, step: Step, serve=None) -> None:
        f = self.factors
        w = params[: self.first].reshape(f.d.shape[1], -1)
        if self.comm.size == 1:  # alone: the serial step, nothing to exchange
            if not blas.subtract_product(w, f.d, f.x):
                w -= f.d.T @ f.x
            params[self.first :] -= grads[self.first :]
            return
        t = time.perf_counter()
        offsets = dict(zip(self.order, np.cumsum([0] + [f.counts[r] for r in self.order]).tolist()))
        n = sum(f.counts)
        mine = offsets[self.comm.rank]
        self.d_all[mine : mine + len(f.d)] = f.d
        self.segments[self.local][...] = grads[self.first :]
        self._sync()  # every rank's D and rest are in the window
        self._across_nodes(offsets, f.counts)
        computed = time.perf_counter()  # from here to the last barrier: this rank's update, compute
        rest = slice(self.part.start - self.first, self.part.stop - self.first)
        if self.total.size:  # several nodes: the leaders' sum over every node
            acc = self.total[rest]
        else:
            acc = self.acc
            acc[...] = self.segments[0][rest]
            for segment in self.segments[1:]:  # in node rank order: the same sum every run
                acc += segment[rest]
        params[self.part] -= acc
        self._update_columns(w, f, n)
        updated = time.perf_counter()
        self._sync()  # every rank reads the new weights
        # the exchange: the writes into the window, the barriers and the leaders' traffic; the update
        # between them is the step's compute (its first layer's GEMM), as in every other design
        self.comm.seconds += time.perf_counter() - t - (updated - computed)
        self.comm.bytes_sent += f.d.nbytes + grads[self.first :].nbytes + self._leader_bytes(f.counts)

    def close(self) -> None:
        """Free the window and the communicators (collective: every rank calls it once, after training)."""
        self.claims.close()
        if self.win is not None:
            self.win.Unlock_all()
            self.win.Free()
            self.node.Free()
            if self.leaders is not None:
                self.leaders.Free()
            self.win = None

    def _allocate(self, count: int, dt: np.dtype) -> np.ndarray:
        if self.node is None:
            return np.zeros(count, dtype=dt)
        from mpi4py import MPI

        self.win = MPI.Win.Allocate_shared(count * dt.itemsize if self.local == 0 else 0, dt.itemsize, comm=self.node)
        memory, _ = self.win.Shared_query(0)
        self.win.Lock_all()  # one passive epoch for the whole run; _sync orders the accesses
        return np.frombuffer(memory, dtype=dt, count=count)

    def _update_columns(self, w: np.ndarray, f: Factors, n: int) -> None:
        """W[:, c] -= Dᵀ·X[:, c] over the global batch's n rows, for the blocks of columns c this rank
        claims from the node's counter (Claims): a faster rank takes more, so no rank waits at the
        next barrier for a slower one's fixed share. A block's training values fit half a core's L2:
        its pixels are turned into values and multiplied while they are in the cache (the rows' float
        values are never written to memory). Each block is one GEMM over all n rows, whichever rank
        runs it, so the weights do not depend on who took which."""
        rows = f.rows
        if not self.rank_ordered:  # D's rows run node after node: the file's rows the same way
            ends = np.cumsum(f.counts).tolist()
            rows = np.concatenate([rows[ends[r] - f.counts[r] : ends[r]] for r in self.order])
        contiguous = bool(n) and rows[-1] - rows[0] == n - 1 and bool(np.all(np.diff(rows) == 1))
        d = self.d_all[:n]
        n_in = w.shape[1]
        width = max(1, min(self.xc.shape[1], self.block_bytes // max(1, n * self.xc.itemsize)))
        for block in self.claims.take(-(-n_in // width)):
            c = slice(block * width, min((block + 1) * width, n_in))
            stored = f.x_all[rows[0] : rows[0] + n, c] if contiguous else f.x_all[rows, c]
            x = stored
            if stored.dtype != self.xc.dtype or not contiguous:
                x = features(stored, self.xc[:n, : c.stop - c.start])
            wc = w[:, c]
            if not blas.subtract_product(wc, d, x):
                wc -= d.T @ x

    def _across_nodes(self, offsets: dict, counts: list[int]) -> None:
        """Several nodes: the leaders gather every node's block of D and sum the nodes' rests (between
        two barriers of each node)."""
        if self.nodes == 1:
            return
        from mpi4py import MPI

        if self.leaders is not None:
            rest = self.total
            rest[...] = self.segments[0]
            for segment in self.segments[1:]:  # in node rank order
                rest += segment
            # every node's sum, then added in the leaders' order: the same result whatever the
            # library's reduction (an Allreduce may add in any order, so nodes could differ)
            self.leaders.Allgather(rest, self.node_sums)
            rest[...] = self.node_sums[0]
            for node_sum in self.node_sums[1:]:
                rest += node_sum
            units = self.d_all.shape[1]
            sizes = [sum(counts[r] for r in block) * units for block in self.blocks]
            starts = [offsets[block[0]] * units for block in self.blocks]
            mpi_type = MPI.FLOAT if self.d_all.dtype == np.float32 else MPI.DOUBLE
            self.leaders.Allgatherv(MPI.IN_PLACE, [self.d_all, sizes, starts, mpi_type])
        self._sync()

    def _leader_bytes(self, counts: list[int]) -> int:
        """What this rank sends between nodes a step: a leader its node's sum of the rests
        (Allgather) and its node's block of D (Allgatherv); nothing on one node or off the leaders."""
        if self.nodes == 1 or self.leaders is None:
            return 0
        mine = next(block for block in self.blocks if self.comm.rank in block)
        return self.total.nbytes + sum(counts[r] for r in mine) * self.d_all.shape[1] * self.d_all.itemsize

    def _sync(self) -> None:
        """A barrier of the node's ranks that also orders their reads and writes of the window."""
        if self.win is not None:
            self.win.Sync()
            self.node.Barrier()
            self.win.Sync()


class Claims:
    """Work shared out by the node's ranks as they go: `take(count)` yields the items 0..count-1 this
    rank claims one at a time from a counter in shared memory (MPI_Fetch_and_op), until none is
    left. Every rank of the node calls it once between the same two barriers; each ends with one
    claim past the end, so the counter moves by count + ranks and the next round's numbers follow."""

    def __init__(self, node):
        self.node, self.win, self.base = node, None, 0
        if node is None:  # alone: every item, in order
            return
        from mpi4py import MPI

        self.win = MPI.Win.Allocate_shared(8 if node.Get_rank() == 0 else 0, 8, comm=node)
        if node.Get_rank() == 0:
            memory, _ = self.win.Shared_query(0)
            np.frombuffer(memory, dtype=np.int64, count=1)[0] = 0
        self.win.Lock_all()
        self.win.Sync()
        node.Barrier()
        self.one, self.got, self.op = np.ones(1, np.int64), np.empty(1, np.int64), MPI.SUM

    def take(self, count: int):
        if self.win is None:
            yield from range(count)
            return
        while True:
            self.win.Fetch_and_op(self.one, self.got, 0, 0, self.op)
            self.win.Flush(0)
            item = int(self.got[0]) - self.base
            if item >= count:
                break
            yield item
        self.base += count + self.node.Get_size()

    def close(self) -> None:
        if self.win is not None:
            self.win.Unlock_all()
            self.win.Free()
            self.win = None
