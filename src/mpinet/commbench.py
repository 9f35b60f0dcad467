"""The microbenchmark behind the cost model: a ping-pong, and an Allreduce and a memory copy on 1,
2, 4, ... and all ranks at once, at growing message sizes, on MPI.COMM_WORLD; beside
mpinet.engine.comm (the two modules that call MPI).

Run under the launcher with 2+ ranks: mpiexec -n 2 python -m mpi4py -m mpinet.commbench --max-bytes N --out F
"""

import argparse
import sys
from functools import partial

import numpy as np
import pandas as pd

from mpinet import MpinetError
from mpinet.analysis.costmodel import fit_link

REPEATS = 20  # timings a size's median is taken of, up to BYTES_PER_SIZE moved
MIN_REPEATS = 5
BYTES_PER_SIZE = 64 << 20  # at 20 timings each, the messages past 2 MiB took most of the benchmark's time


def repeats_at(size: int) -> int:
    """Timings of one message size: REPEATS up to BYTES_PER_SIZE moved, fewer for the largest sizes
    (at least MIN_REPEATS): their time is bandwidth, as steady a median of 5 as of 20."""
    return max(MIN_REPEATS, min(REPEATS, BYTES_PER_SIZE // size))


def bench(comm, max_bytes: int) -> pd.DataFrame:
    """Ping-pong between the first and the last rank (one-way seconds = half the round trip, median
    of repeats_at(size)) for message sizes from 8 bytes up to max_bytes, and, on the first k ranks at each
    of rank_counts at once, an MPI_Allreduce and a copy of that many bytes (the same ping-pong beside
    each). The last rank, not rank 1: srun places ranks block-wise, so on several nodes the first
    and the last are on different nodes and the ping-pong measures the link between nodes. The
    Allreduce and the copy are timed at every count because ranks that share a node share its
    memory system, which a ping-pong does not see."""
    from mpi4py import MPI

    sizes = [8 << k for k in range(0, 40) if 8 << k <= max_bytes] + [max_bytes]
    counts = rank_counts(comm.size)
    subs = {k: comm.Split(0 if comm.rank < k else MPI.UNDEFINED, comm.rank) for k in counts}
    rows = []
    for size in sorted(set(sizes)):
        buf, copy = np.zeros(size // 8, dtype=np.float64), np.ones(size // 8, dtype=np.float64)
        repeats = repeats_at(size)
        ping = _median(comm, repeats, partial(_ping_pong, comm, buf)) / 2  # one way: half the round trip
        for k, sub in subs.items():
            inside = sub != MPI.COMM_NULL
            reduce = partial(sub.Allreduce, MPI.IN_PLACE, buf, op=MPI.SUM) if inside else None
            row = {"bytes": size, "one_way_s": ping, "allreduce_s": _median(comm, repeats, reduce), "ranks": k}
            row["stream_s"] = _median(comm, repeats, partial(np.copyto, copy, buf) if inside else None)
            rows.append(row)
    for sub in subs.values():
        if sub != MPI.COMM_NULL:
            sub.Free()
    return pd.DataFrame(rows)


def rank_counts(size: int) -> list[int]:
    """The rank counts the Allreduce and the copy are timed at: 1, 2, 4, ... below size, and size."""
    return sorted({*(1 << k for k in range(size.bit_length()) if 1 << k < size), size})


def _ping_pong(comm, buf) -> None:
    last = comm.size - 1
    if comm.rank == 0:
        comm.Send(buf, dest=last)
        comm.Recv(buf, source=last)
    elif comm.rank == last:
        comm.Recv(buf, source=0)
        comm.Send(buf, dest=0)


def _median(comm, repeats: int, step) -> float:
    """Median seconds of `step` (None: this rank takes no part) over repeats, after 2 warm-ups; each
    timed from a barrier of all ranks, so the ranks outside a sub-communicator wait, not stream."""
    from mpi4py import MPI

    times = []
    for _ in range(repeats + 2):
        comm.Barrier()
        t = MPI.Wtime()
        if step is not None:
            step()
        times.append(MPI.Wtime() - t)
    return float(np.median(times[2:]))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m mpinet.commbench",
        description="Measure α and β of this machine's MPI (run under mpiexec or srun with 2+ ranks).",
    )
    p.add_argument("--max-bytes", type=int, required=True, help="largest message, e.g. 4 x the parameter bytes")
    p.add_argument("--out", required=True, help="CSV of message size, one-way and Allreduce seconds")
    a = p.parse_args(argv)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.size < 2:
        print("mpinet.commbench: error: needs at least 2 ranks", file=sys.stderr)
        return 1
    table = bench(comm, a.max_bytes)
    if comm.rank == 0:
        try:
            whole = table[table["ranks"] == comm.size]  # the ping-pong, once per size
            link = fit_link(whole["bytes"], whole["one_way_s"])
        except MpinetError as e:
            print(f"mpinet.commbench: error: {e} (--max-bytes)", file=sys.stderr)
            comm.Abort(1)
        table["alpha_s"], table["beta_s_per_byte"] = link.alpha, link.beta
        table["library"] = MPI.Get_library_version().strip().splitlines()[0]  # whose collectives were timed
        table.to_csv(a.out, index=False)
        print(f"α = {link.alpha * 1e6:.2f} µs, β = {link.beta * 1e9:.3f} ns/byte ({1 / link.beta / 1e9:.2f} GB/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
