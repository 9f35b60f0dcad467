"""Test support: every training step sleeps MPINET_TEST_STEP_DELAY seconds first.

Tests that must interrupt a run at a given point (a SLURM time limit, scancel, a node's ranks
killed) put this directory on PYTHONPATH (tests/conftest.py: paced_env), so a run's length is set
by the delay, not by how fast this shared machine computes, and a sleeping rank leaves the cores to
the tests beside it. The delay changes no number: the step itself runs unchanged after it.
"""

import os

_DELAY = float(os.environ.get("MPINET_TEST_STEP_DELAY", "0") or 0)

if _DELAY > 0:
    import time

    from mpinet.engine import loop

    _step = loop._gradient

    def _paced(*args):
        time.sleep(_DELAY)
        return _step(*args)

    loop._gradient = _paced
