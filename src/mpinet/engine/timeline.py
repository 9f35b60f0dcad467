"""A run's timeline.json: what every rank did in the first steps of its last epoch, in the Chrome
trace-event format (the JSON object form), which Perfetto (ui.perfetto.dev) and chrome://tracing
open. One lane per rank; each step is a span holding its phases:

- compute: forward and backward on the rank's rows;
- wait: in the exchange, waiting for the slowest rank to arrive (mpinet.engine.loop's split);
- exchange: moving the bytes (Allreduce, or a worker's send and receive of the weights);
- on a parameter server's lane: receive (until every worker's gradient is in; an instant marks
  each arrival), apply (one worker's update after the other, in rank order) and send.

Times are microseconds from the epoch's start; the ranks start that epoch together (an untimed
barrier), so their lanes share one time axis, across nodes too. Nothing here changes a number.
"""

PID = 0


def unrecorded(why: str, about: dict) -> dict:
    """The trace of a run whose launch recorded no timeline (it resumed after its last epoch, from a
    checkpoint that kept none): no events, and why."""
    return {"traceEvents": [], "displayTimeUnit": "ms", "otherData": {**about, "recorded": False, "why": why}}


def trace_events(timeline: list[dict], hosts: list[str], about: dict) -> dict:
    """The trace of `timeline` (Result.timeline: one dict per rank); hosts: each rank's host name or
    an empty list; about: what the trace's otherData says of the run (design, ranks, epoch...)."""
    events = [_meta("process_name", 0, name=f"mpinet {about.get('algorithm', 'run')} on {len(timeline)} rank(s)")]
    for lane in timeline:
        rank = lane["rank"]
        role = "" if lane["trains"] else " (server)"
        where = f" on {hosts[rank]}" if rank < len(hosts) else ""
        events += [_meta("thread_name", rank, name=f"rank {rank}{role}{where}")]
        events += [_meta("thread_sort_index", rank, sort_index=rank)]
        for k, (start, arrived, done, wait) in enumerate(lane["steps"]):
            events.append(_span(f"step {k + 1}", "step", start, done, rank, step=k + 1))
            if lane["trains"]:
                wait = min(max(wait, 0.0), done - arrived)
                events.append(_span("compute", "compute", start, arrived, rank, step=k + 1))
                if wait > 0:
                    events.append(_span("wait", "wait", arrived, arrived + wait, rank, step=k + 1))
                events.append(_span("exchange", "exchange", arrived + wait, done, rank, step=k + 1))
        events += _served(lane["serve"], rank)
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": about}


def _served(serve: list, rank: int) -> list[dict]:
    """A parameter server's spans: per step one receive (until the last gradient), each arrival as
    an instant, each worker's update applied, and the weights sent."""
    events = []
    receives = {}
    for k, what, worker, a, b in serve:
        if what == "receive":
            span = receives.setdefault(k, [a, b])
            span[1] = max(span[1], b)
            events.append(_instant(f"gradient from rank {worker}", b, rank, step=k + 1, worker=worker))
        else:
            name = f"apply rank {worker}" if what == "apply" else "send weights"
            events.append(_span(name, what, a, b, rank, step=k + 1, worker=worker))
    events += [_span("receive", "receive", a, b, rank, step=k + 1) for k, (a, b) in receives.items()]
    return events


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def _span(name: str, category: str, start: float, end: float, rank: int, **args) -> dict:
    ts = _us(start)
    return {
        "name": name,
        "cat": category,
        "ph": "X",
        "ts": ts,
        "dur": max(round(_us(end) - ts, 3), 0.0),
        "pid": PID,
        "tid": rank,
        "args": args,
    }


def _instant(name: str, at: float, rank: int, **args) -> dict:
    return {"name": name, "cat": "arrival", "ph": "i", "s": "t", "ts": _us(at), "pid": PID, "tid": rank, "args": args}


def _meta(kind: str, rank: int, **args) -> dict:
    return {"name": kind, "ph": "M", "pid": PID, "tid": rank, "args": args}
