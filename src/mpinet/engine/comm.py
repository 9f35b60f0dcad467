"""Communication: the MPI calls the designs (mpinet.engine.exchanges, .nodeshared) make, timed.

(Beside it, mpinet.commbench is the MPI microbenchmark behind the cost model; elsewhere mpi4py is
imported for provenance only: the library version in run.json, and the launcher's probe in a
subprocess.)

`Comm` wraps MPI.COMM_WORLD (or nothing, for `serial`), uses only buffer-based
(uppercase) calls on numpy arrays, and counts the seconds and payload bytes each rank
spends in them, so the training loop reports compute and communication separately.
"""

import os
import time

import numpy as np

PS_GRAD_TAG = 1  # worker -> server: the lr-scaled gradient of one step
PS_WEIGHTS_TAG = 2  # server -> worker: the main weights after the update


class Comm:
    """A communicator with timing; `Comm(None)` is the one-process stand-in that never loads MPI."""

    parent = None  # the communicator this one was split from (Comm.split): its time counts there too

    def __init__(self, mpi_comm=None):
        self.mpi = mpi_comm
        self.rank = mpi_comm.Get_rank() if mpi_comm is not None else 0
        self.size = mpi_comm.Get_size() if mpi_comm is not None else 1
        self.seconds = 0.0  # time spent inside MPI calls
        self.bytes_sent = 0  # payload bytes this rank handed to MPI sends and reductions

    def split(self, color: int) -> "Comm":
        """The ranks with the same `color`, in this communicator's rank order; the seconds and bytes of
        its calls count in this one too (the loop reads the world's counters)."""
        part = Comm(self.mpi.Split(color, key=self.rank) if self.mpi is not None else None)
        part.parent = self
        return part

    def free(self) -> None:
        """Free a communicator made by split (collective over its ranks)."""
        if self.mpi is not None and self.parent is not None:
            self.mpi.Free()
            self.mpi = None

    def _count(self, seconds: float, nbytes: int) -> None:
        comm = self
        while comm is not None:
            comm.seconds += seconds
            comm.bytes_sent += nbytes
            comm = comm.parent

    def sum_inplace(self, buf: np.ndarray) -> None:
        """Element-wise sum of buf over all ranks, in place (one MPI_Allreduce)."""
        if self.mpi is None:
            return
        from mpi4py import MPI

        t = time.perf_counter()
        self.mpi.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        self._count(time.perf_counter() - t, buf.nbytes)

    def sum_untimed(self, buf: np.ndarray) -> None:
        """Like sum_inplace, for bookkeeping (metrics) that is not part of the training exchange."""
        if self.mpi is not None:
            from mpi4py import MPI

            self.mpi.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)

    def max_untimed(self, buf: np.ndarray) -> None:
        """Element-wise maximum of buf over all ranks, in place, for bookkeeping (not timed)."""
        if self.mpi is not None:
            from mpi4py import MPI

            self.mpi.Allreduce(MPI.IN_PLACE, buf, op=MPI.MAX)

    def max(self, value: float) -> float:
        if self.mpi is None:
            return value
        from mpi4py import MPI

        buf = np.array([value], dtype=np.float64)
        self.mpi.Allreduce(MPI.IN_PLACE, buf, op=MPI.MAX)
        return float(buf[0])

    def bcast(self, buf: np.ndarray, root: int = 0, timed: bool = False) -> None:
        """buf from rank `root` on every rank, in place; `timed`: part of the training exchange, its
        seconds and bytes counted."""
        if self.mpi is None or self.size == 1:
            return
        t = time.perf_counter()
        self.mpi.Bcast(buf, root=root)
        if timed:
            self._count(time.perf_counter() - t, buf.nbytes if self.rank == root else 0)

    def server_step(self, params: np.ndarray, inbox: np.ndarray, serve: list | None = None) -> None:
        """Parameter server: receive every worker's gradient, update the main weights, send them back.

        inbox: float[workers, n_params]. All receives are posted at once, so a slow worker
        never holds up the others' messages; applying them in rank order after they all arrived
        keeps the result deterministic. `serve`, when given, gets [what, worker, start, end]
        (perf_counter) for each gradient's arrival, each update applied and the weights sent.
        """
        from mpi4py import MPI

        t = time.perf_counter()
        reqs = [self.mpi.Irecv(inbox[w - 1], source=w, tag=PS_GRAD_TAG) for w in range(1, self.size)]
        if serve is None:
            MPI.Request.Waitall(reqs)
        else:  # the same messages, one at a time, to see who arrived when
            for _ in reqs:
                w = MPI.Request.Waitany(reqs) + 1
                serve.append(["receive", w, t, time.perf_counter()])
        self.seconds += time.perf_counter() - t
        for w, grad in enumerate(inbox, start=1):  # in rank order, so the result is deterministic
            a = time.perf_counter() if serve is not None else 0.0
            params -= grad
            if serve is not None:
                serve.append(["apply", w, a, time.perf_counter()])
        t = time.perf_counter()
        reqs = [self.mpi.Isend(params, dest=w, tag=PS_WEIGHTS_TAG) for w in range(1, self.size)]
        MPI.Request.Waitall(reqs)
        if serve is not None:
            serve.append(["send", 0, t, time.perf_counter()])
        self.seconds += time.perf_counter() - t
        self.bytes_sent += params.nbytes * (self.size - 1)

    def gather_rows(self, send: np.ndarray, recv: np.ndarray, counts: list[int]) -> np.ndarray:
        """Every rank's rows of `send`, stacked in rank order into the first sum(counts) rows of
        recv (one MPI_Allgatherv; counts: each rank's row count, known to every rank)."""
        total = sum(counts)
        if self.mpi is None:
            recv[:total] = send
            return recv[:total]
        width = recv.shape[1]
        sizes = [c * width for c in counts]
        offsets = [sum(sizes[:r]) for r in range(len(sizes))]
        t = time.perf_counter()
        self.mpi.Allgatherv(np.ascontiguousarray(send), [recv, sizes, offsets, _mpi_type(recv.dtype)])
        self._count(time.perf_counter() - t, send.nbytes)
        return recv[:total]

    def worker_step(self, params: np.ndarray, grads: np.ndarray) -> None:
        """Parameter-server worker: send the step's gradient to rank 0, receive the new weights."""
        t = time.perf_counter()
        self.mpi.Send(grads, dest=0, tag=PS_GRAD_TAG)
        self.mpi.Recv(params, source=0, tag=PS_WEIGHTS_TAG)
        self.seconds += time.perf_counter() - t
        self.bytes_sent += grads.nbytes

    def gather_strings(self, value: str) -> list[str]:
        """Every rank's value, on every rank (small strings; pickled lowercase call is fine here)."""
        return self.gather_objects(value)

    def gather_objects(self, value) -> list:
        """Every rank's small picklable value, on every rank, in rank order (bookkeeping, not timed)."""
        return [value] if self.mpi is None else self.mpi.allgather(value)

    def abort(self, code: int = 1) -> None:
        """End every rank of the job now; used when one rank fails so that no rank waits for ever."""
        if self.mpi is not None and self.size > 1:
            self.mpi.Abort(code)


def _mpi_type(dtype):
    from mpi4py import MPI

    return MPI.FLOAT if np.dtype(dtype) == np.float32 else MPI.DOUBLE


def even_split(total: int, parts: int) -> list[int]:
    """total split into `parts` near-equal counts, the larger ones first (np.array_split's split)."""
    q, r = divmod(total, parts)
    return [q + (i < r) for i in range(parts)]


def world() -> Comm:
    """MPI.COMM_WORLD, initialising MPI on first use (mpi4py is imported only here)."""
    _drop_stale_pmi()
    from mpi4py import MPI

    return Comm(MPI.COMM_WORLD)


def mpi_library_version() -> str:
    from mpi4py import MPI

    return MPI.Get_library_version().strip().splitlines()[0]


def _drop_stale_pmi() -> None:
    """Forget a PMI connection whose file descriptor an intermediate process closed.

    Under SLURM a 1-rank job runs inside `srun -n 1`, whose PMI socket (PMI_FD) Snakemake's
    job step does not pass on to the shell command; MPICH would fail in MPI_Init trying
    to use it. Without the PMI variables it starts as a singleton, which is what we want.
    """
    fd = os.environ.get("PMI_FD")
    if fd is None:
        return
    try:
        os.fstat(int(fd))
    except (OSError, ValueError):
        for key in [k for k in os.environ if k.startswith("PMI_")]:
            del os.environ[key]
