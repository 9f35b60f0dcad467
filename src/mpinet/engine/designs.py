"""Which exchange a training step of each design ends with: the one place a design's exchange is chosen."""

from mpinet.engine.comm import Comm
from mpinet.engine.exchanges import (
    Exchange,
    FactorAllgather,
    GradientAllreduce,
    LocalSGD,
    ParameterServer,
    ShardedFirstLayer,
)
from mpinet.engine.grid import ProcessGrid
from mpinet.engine.nodeshared import NodeShared

# serial is GradientAllreduce on Comm(None); allreduce with sync_every > 1 is LocalSGD
EXCHANGES = {
    "serial": GradientAllreduce,
    "allreduce": GradientAllreduce,
    "node": NodeShared,
    "allgather": FactorAllgather,
    "sharded": ShardedFirstLayer,
    "grid": ProcessGrid,
    "paramserver": ParameterServer,
}


AUTO = "auto"  # not a design: the engine picks one of CANDIDATES (mpinet.engine.planner)
# what auto chooses from on more than one rank: the designs whose ranks all train (the parameter
# server's rank 0 does not, and it was the slowest design on every node measured)
CANDIDATES = ("allreduce", "node", "allgather", "sharded", "grid")


def possible(algorithm: str, ranks: int) -> tuple[str, ...]:
    """The designs a run of `algorithm` on `ranks` ranks may train with: itself, or what auto chooses from."""
    if algorithm != AUTO:
        return (algorithm,)
    return ("serial",) if ranks == 1 else CANDIDATES


def exchange_class(algorithm: str, sync_every: int = 1) -> type[Exchange]:
    """The exchange a training step of this design ends with."""
    if algorithm == "allreduce" and sync_every > 1:
        return LocalSGD
    return EXCHANGES[algorithm]


def exchange_for(algorithm: str, sync_every: int, comm: Comm, sizes: tuple[int, ...], batch: int, dtype) -> Exchange:
    """The exchange of this design for this rank (sizes: the net's layer sizes)."""
    return exchange_class(algorithm, sync_every).create(comm, sizes, batch, dtype, sync_every)
