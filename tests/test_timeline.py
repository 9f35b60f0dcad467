"""A run's timeline.json (mpinet.engine.timeline) against the Chrome trace-event format's rules, and
what it shows: a late rank's wait, a parameter server serving its workers one after another."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from conftest import env, run_train, weights

from mpinet.analysis.timelines import summary
from mpinet.datasets import dataset
from mpinet.engine.comm import Comm
from mpinet.engine.loop import TIMELINE_STEPS, train
from mpinet.engine.options import Options
from mpinet.engine.timeline import trace_events

# the trace-event format (Trace Event Format, the Chrome/Perfetto JSON object form): the phases
# this project writes and the metadata events a viewer understands
PHASES = {"X", "i", "M"}
METADATA = {"process_name", "process_labels", "process_sort_index", "thread_name", "thread_sort_index"}


def check_trace(trace: dict) -> list[dict]:
    """Assert the rules of the format; return the complete ("X") events."""
    json.loads(json.dumps(trace))  # plain JSON: numbers, strings, lists, objects
    assert isinstance(trace["traceEvents"], list) and trace.get("displayTimeUnit") in ("ms", "ns")
    spans = []
    for e in trace["traceEvents"]:
        assert isinstance(e["name"], str) and e["ph"] in PHASES, e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        assert isinstance(e.get("args", {}), dict), e
        if e["ph"] == "M":
            assert e["name"] in METADATA and e["args"], e
            continue
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
            spans.append(e)
        else:
            assert e["s"] in ("g", "p", "t"), e  # an instant's scope
    # complete events of one thread nest: each one lies inside the one that encloses it, or after it
    for lane in {(e["pid"], e["tid"]) for e in spans}:
        mine = sorted((e for e in spans if (e["pid"], e["tid"]) == lane), key=lambda e: (e["ts"], -e["dur"]))
        open_ends = []
        for e in mine:
            while open_ends and e["ts"] >= open_ends[-1] - 1e-3:
                open_ends.pop()
            assert not open_ends or e["ts"] + e["dur"] <= open_ends[-1] + 1e-3, (lane, e)
            open_ends.append(e["ts"] + e["dur"])
    return spans


def test_the_trace_of_a_serial_run_holds_every_step_of_a_short_epoch(small_dataset):
    a = dataset.load(small_dataset)
    result = train(a, Options(algorithm="serial", hidden=(4,), epochs=2, batch_size=8), Comm(None))
    trace = trace_events(result.timeline, ["here"], {"algorithm": "serial"})
    spans = check_trace(trace)
    steps = [e for e in spans if e["cat"] == "step"]
    assert len(steps) == min(TIMELINE_STEPS, int(np.ceil(60 / 8)))  # 60 rows, batch 8: every step
    # the steps tile the epoch: each starts where the one before ended
    ends = [e["ts"] + e["dur"] for e in steps]
    assert np.allclose([e["ts"] for e in steps[1:]], ends[:-1], atol=1e-3)
    assert {e["cat"] for e in spans} == {"step", "compute", "exchange"}  # serial waits for nobody
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert names == {"rank 0 on here"}


def test_a_long_epoch_records_only_its_first_steps(small_dataset):
    a = dataset.load(small_dataset)
    result = train(a, Options(algorithm="serial", hidden=(4,), epochs=1, batch_size=1), Comm(None))
    (lane,) = result.timeline
    assert len(lane["steps"]) == TIMELINE_STEPS < 60  # 60 steps in the epoch: a bounded sample


def test_the_step_percentiles_bound_each_other_and_the_epoch(small_dataset):
    a = dataset.load(small_dataset)
    result = train(a, Options(algorithm="serial", hidden=(4,), epochs=3, batch_size=8), Comm(None))
    m = pd.DataFrame(result.metrics)
    steps = int(np.ceil(60 / 8))
    assert (m["step_p50_s"] > 0).all() and (m["step_p50_s"] <= m["step_p95_s"]).all()
    assert (m["step_p95_s"] <= m["time_s"]).all() and (m["step_p50_s"] * steps <= m["time_s"] * 2).all()
    # the recorded steps of the last epoch add up to its training time (they are its every step)
    last = result.timeline[0]["steps"][-1][2]
    assert last == pytest.approx(m["time_s"].iloc[-1], rel=0.05)


@pytest.mark.mpi
@pytest.mark.each_mpi
def test_a_parameter_server_lane_shows_whom_it_served_and_numbers_do_not_change(iris_dataset, tmp_path):
    args = ["--data", iris_dataset, "--algorithm", "paramserver", "--epochs", "2", "--batch-size", "8"]
    run_train(3, *args, "--out", tmp_path / "ps")
    trace = json.loads((tmp_path / "ps" / "timeline.json").read_text())
    spans = check_trace(trace)
    server = [e for e in trace["traceEvents"] if e.get("tid") == 0 and e["ph"] != "M"]
    for step in (1, 2):
        mine = sorted((e for e in server if e["args"].get("step") == step), key=lambda e: e["ts"])
        applied = [e["args"]["worker"] for e in mine if e["cat"] == "apply"]
        arrivals = [e for e in mine if e["ph"] == "i"]
        (receive,) = [e for e in mine if e["cat"] == "receive"]
        assert applied == [1, 2]  # one worker's update after the other, in rank order
        assert sorted(e["args"]["worker"] for e in arrivals) == [1, 2]
        assert max(e["ts"] for e in arrivals) == pytest.approx(receive["ts"] + receive["dur"], abs=1e-2)
        assert [e["cat"] for e in mine if e["ph"] == "X"][-1] == "send"
    worker = {e["cat"] for e in spans if e["tid"] == 1}
    assert {"step", "compute", "exchange"} <= worker <= {"step", "compute", "wait", "exchange"}
    names = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"]
    assert names[0].startswith("rank 0 (server) on ") and len(names) == 3
    # the summary a user prints on a cluster without a browser: per rank and phase
    cmd = [sys.executable, "-m", "mpinet.analysis.timelines", str(tmp_path / "ps" / "timeline.json")]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env())
    assert p.returncode == 0 and "paramserver on 3 rank(s)" in p.stdout, p.stderr
    table = summary(trace).set_index(["rank", "phase"])
    assert table.loc[(0, "apply"), "spans"] == 2 * table.loc[(0, "send"), "spans"]  # two workers a step
    assert table.loc[(1, "compute"), "total_ms"] > 0
    # the recording changes no number: the same weights as the serial run with the workers' batch
    run_train(None, "--data", iris_dataset, "--epochs", "2", "--batch-size", "16", "--out", tmp_path / "s")
    np.testing.assert_allclose(weights(tmp_path / "ps"), weights(tmp_path / "s"), rtol=1e-5, atol=1e-6)
