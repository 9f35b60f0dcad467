"""`algorithm: auto`: the design a run trains with, chosen on the machine it runs on.

Each candidate design (designs.CANDIDATES, those the run's options allow) is built and trains the
first TRIAL_STEPS steps of an epoch, once to warm up (page faults, first touches, a shared window's
first writes) and ROUNDS more times; its time a step is the fastest round's, the slowest rank's
(every rank gets the same numbers, so all choose alike). The fastest candidate wins, ties to the
earlier. The trial runs are thrown away: the run then starts afresh with the chosen design, so its
weights are that design's, bit for bit.

Why measured and not predicted: on a 16-core node the cost model, calibrated kernel by kernel, missed
`sharded` by up to 90 % and `allgather` by up to 90 % (docs/performance.md), which would pick the wrong
design; a few steps of each on the run's own data and ranks cost about a second and see everything
the step does. What it cannot see: a run whose later epochs behave differently from its first steps.
"""

from dataclasses import replace

from mpinet.engine.designs import CANDIDATES
from mpinet.engine.options import Impossible, check_options

TRIAL_STEPS = 6
ROUNDS = 2


def choose(arrays, opts, comm, start) -> tuple[str, dict[str, float]]:
    """(the chosen design, each candidate's seconds a step); `start(arrays, opts, comm)` builds a run
    (mpinet.engine.loop._Run.start)."""
    if comm.size == 1:
        return "serial", {}
    seconds = {}
    for design in candidates(opts, comm.size, len(arrays.train_y), len(arrays.classes)):
        run = start(arrays, replace(opts, algorithm=design), comm)
        if run.exchange.same_as() in seconds:  # a grid of one group or one shard: timed already
            run.exchange.close()
            continue
        times = []
        for _ in range(ROUNDS + 1):
            steps, t = run.time_steps(TRIAL_STEPS)
            times.append(comm.max(t) / steps)
        run.exchange.close()
        seconds[design] = min(times[1:])
    return min(seconds, key=seconds.get), seconds


def candidates(opts, ranks: int, n_train: int, n_classes: int) -> list[str]:
    """The designs auto may choose for these options on `ranks` ranks (local SGD is allreduce's)."""
    found = []
    for design in CANDIDATES:
        try:
            check_options(replace(opts, algorithm=design), ranks, n_train, n_classes)
        except Impossible:
            continue
        found.append(design)
    return found
