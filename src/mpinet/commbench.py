"""The MPI microbenchmark behind the cost model: a ping-pong and an Allreduce at growing message
sizes, on MPI.COMM_WORLD, beside mpinet.engine.comm (the two modules that call MPI).

Run under the launcher with 2+ ranks: mpiexec -n 2 python -m mpi4py -m mpinet.commbench --max-bytes N --out F
"""

import argparse
import sys

import numpy as np
import pandas as pd

from mpinet import MpinetError
from mpinet.analysis.costmodel import fit_link


def bench(comm, max_bytes: int, repeats: int = 20) -> pd.DataFrame:
    """Ping-pong between the first and the last rank (one-way seconds = half the round trip, median
    of `repeats`) for message sizes from 8 bytes up to max_bytes, and MPI_Allreduce over all ranks.
    The last rank, not rank 1: srun places ranks block-wise, so on several nodes the first and the
    last are on different nodes and the ping-pong measures the link between nodes."""
    from mpi4py import MPI

    sizes = [8 << k for k in range(0, 40) if 8 << k <= max_bytes] + [max_bytes]
    last = comm.size - 1
    rows = []
    for size in sorted(set(sizes)):
        buf = np.zeros(size // 8, dtype=np.float64)
        times = []
        for _ in range(repeats + 2):
            comm.Barrier()
            t = MPI.Wtime()
            if comm.rank == 0:
                comm.Send(buf, dest=last)
                comm.Recv(buf, source=last)
            elif comm.rank == last:
                comm.Recv(buf, source=0)
                comm.Send(buf, dest=0)
            times.append((MPI.Wtime() - t) / 2)
        ping = float(np.median(times[2:]))
        times = []
        for _ in range(repeats + 2):
            comm.Barrier()
            t = MPI.Wtime()
            comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
            times.append(MPI.Wtime() - t)
        rows.append({"bytes": size, "one_way_s": ping, "allreduce_s": float(np.median(times[2:])), "ranks": comm.size})
    return pd.DataFrame(rows)


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
            link = fit_link(table["bytes"], table["one_way_s"])
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
