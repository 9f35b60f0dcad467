"""Test support: every training step sleeps MPINET_TEST_STEP_DELAY seconds first (while the file
MPINET_TEST_PACE_WHILE exists, when that is set).

Tests that must interrupt a run at a given point (a SLURM time limit, scancel, a node's ranks
killed, SIGTERM) put this directory on PYTHONPATH (tests/conftest.py: paced), so a run's length is
set by the delay, not by how fast this shared machine computes, and a sleeping rank leaves the cores
to the tests beside it. Removing the file after the interruption lets the resumed run finish at full
speed. The delay changes no number: the step itself runs unchanged after it.
"""

import os

_DELAY = float(os.environ.get("MPINET_TEST_STEP_DELAY", "0") or 0)
_WHILE = os.environ.get("MPINET_TEST_PACE_WHILE")

if _DELAY > 0:
    import sys
    import time

    from mpinet.engine import loop

    try:
        _step = loop._Run.compute  # every design's step passes here, a parameter server's workers' too
    except AttributeError:  # Python's site would print a line and run unpaced: end every process instead
        sys.stderr.write("tests/paced: mpinet.engine.loop._Run.compute is gone; pacing cannot work\n")
        os._exit(3)

    def _paced(*args):
        if _WHILE is None or os.path.exists(_WHILE):
            time.sleep(_DELAY)
        return _step(*args)

    loop._Run.compute = _paced
