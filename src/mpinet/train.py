"""The training command line (`python -m mpinet.train`): options in, a run's files out, one-line
errors, and an abort of every rank when one fails."""

import argparse
import os
import resource
import signal
import sys
import time
import traceback
from dataclasses import fields
from pathlib import Path

from mpinet import MpinetError
from mpinet.datasets import dataset
from mpinet.engine.checkpoint import Store, keep_run_record, kept_timeline, remove_checkpoint, run_record
from mpinet.engine.comm import Comm, world
from mpinet.engine.designs import AUTO, EXCHANGES
from mpinet.engine.loop import choose_design, train
from mpinet.engine.options import ALGORITHMS, Options, option_flag
from mpinet.engine.runfiles import run_metadata, run_timeline, write_outputs
from mpinet.files import write_json
from mpinet.layout import auto_choice_path

# one-at-a-time: the workflow ran no other training job beside this one (local runs);
# exclusive-node: SLURM gave the job (or its step in a packed allocation) whole nodes; shared-node:
# a step of a packed allocation beside others on a node; shared: neither; unknown: started by hand
ISOLATION = ("one-at-a-time", "exclusive-node", "shared-node", "shared", "unknown")


def parse_args(argv=None) -> argparse.Namespace:
    return parser().parse_args(argv)


def parser() -> argparse.ArgumentParser:
    """The command line: the training options from mpinet.engine.options, then the run's own flags."""
    others = ", ".join(a for a in ALGORITHMS if a != "serial")
    p = argparse.ArgumentParser(
        prog="python -m mpinet.train",
        description=(
            "Train the fully connected sigmoid network on a preprocessed dataset. "
            f"serial runs as one plain process; the other designs ({others}) run under an MPI "
            "launcher, e.g. `mpiexec -n 3 python -m mpi4py -m mpinet.train --algorithm "
            "paramserver --expect-ranks 3 ...` or `srun --mpi=pmi2 -n 3 ...`."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--data", required=True, help="dataset directory written by the preprocessing step")
    p.add_argument("--out", required=True, help="directory for metrics.csv, confusion.csv, weights.npz, run.json")
    for f in fields(Options):
        kw = {"default": f.default, "help": f.metadata["help"], "type": f.type, "choices": f.metadata["choices"]}
        if f.type is bool:
            kw["type"] = _boolean
        elif f.name == "hidden":
            kw.update(type=int, nargs="+", default=list(f.default))
        p.add_argument(option_flag(f.name), **kw)
    p.add_argument(
        "--isolation",
        choices=ISOLATION,
        default="unknown",
        help="recorded in run.json: how the launcher kept other training jobs off this job's cores",
    )
    p.add_argument(
        "--expect-ranks",
        type=int,
        default=None,
        help="fail at once unless the MPI communicator has exactly this many ranks",
    )
    p.add_argument("--launcher", default=None, help="recorded in run.json: the launcher line that started the ranks")
    p.add_argument("--checkpoint", default=None, help="checkpoint file, written after epochs and resumed from")
    p.add_argument(
        "--keep-final-checkpoint",
        choices=["auto", "yes", "no"],
        default="auto",
        help="after the last epoch keep the checkpoint (with the run's run.json), so a rerun restores the "
        "finished run's outputs instead of training again; auto (default): yes inside a SLURM job, where a "
        "failed neighbour in the run's pool makes Snakemake remove its outputs, no elsewhere",
    )
    p.add_argument(
        "--checkpoint-seconds",
        type=float,
        default=10.0,
        help="write the checkpoint after the first epoch that ends this long after the last one (0: every epoch)",
    )
    return p


def options_from_args(a: argparse.Namespace) -> Options:
    return Options(**{f.name: tuple(a.hidden) if f.name == "hidden" else getattr(a, f.name) for f in fields(Options)})


def main(argv=None) -> int:
    args = parse_args(argv)
    opts = options_from_args(args)
    comm = Comm(None) if opts.algorithm == "serial" else world()
    if opts.algorithm == AUTO and comm.size == 1:
        comm = Comm(None)  # auto on one rank is serial, which needs no MPI
    log = _logger(comm)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _interrupted(comm, args.checkpoint))
    try:
        expected = args.expect_ranks if args.expect_ranks is not None else comm.size
        if comm.size != expected:
            raise MpinetError(
                f"the MPI communicator has {comm.size} rank(s) but --expect-ranks is {expected}; start "
                f"the job with `mpiexec -n {expected}` or `srun --mpi=pmi2 -n {expected}` (a launcher "
                "without MPI support starts independent 1-rank copies)"
            )
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=max(1, opts.blas_threads), user_api="blas"):
            _train_and_record(args, opts, comm, log)
        return 0
    except MpinetError as e:
        say(f"mpinet.train: error: {e}")
        _abort(comm)
        return 1
    except Exception:
        traceback.print_exc()
        sys.stderr.flush()
        _abort(comm)
        return 1


def _train_and_record(args: argparse.Namespace, opts: Options, comm: Comm, log) -> None:
    """Load the data, train, and (rank 0) write the outputs with the run's record."""
    arrays = dataset.load(args.data, check_values=comm.rank == 0)
    log(
        f"{opts.algorithm} on {comm.size} rank(s): {len(arrays.train_y)} training samples, "
        f"{len(arrays.test_y)} test samples, {arrays.train_x.shape[1]} features"
    )
    t0 = time.perf_counter()
    started, load_start = _now(), os.getloadavg()[0]
    ck = Path(args.checkpoint) if args.checkpoint else None
    store = Store(ck, args.checkpoint_seconds, log) if ck is not None else None
    chosen, choice = auto_choice(args.out, opts, arrays, comm)
    result = train(arrays, opts, comm, store, log, chosen=chosen)
    if choice:  # what choosing cost: this launch's trials (none when it reused the experiment's choice)
        result.trial_step_s, result.trials_s = choice["trial_step_s"], 0.0 if choice["reused"] else choice["trials_s"]
    meta = run_metadata(comm, opts, args.data, arrays, args.launcher, result)
    if opts.algorithm == AUTO:
        meta["auto_trials_s"] = result.trials_s
        meta["auto_choice"] = choice or {"design": result.design, "trials_s": result.trials_s, "reused": False}
    meta["train_seconds"] = time.perf_counter() - t0
    # whether anything else could have run beside this job, and how busy the machine was
    meta["timing"] = {
        "isolation": args.isolation,
        "start": started,
        "end": _now(),
        "load1_start": load_start,
        "load1_end": os.getloadavg()[0],
    }
    meta["resumed_from_epoch"] = result.resumed_from_epoch
    meta["peak_rss_mb"] = comm.max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)  # max over ranks
    if comm.rank != 0:
        return
    timeline = run_timeline(result, opts, meta)
    if ck is not None and result.resumed_from_epoch == opts.epochs and (kept := run_record(ck)):
        # a finished run's outputs rebuilt from its final checkpoint: its own record and timeline
        meta, timeline = dict(kept, restored_from_checkpoint=_now()), kept_timeline(ck) or timeline
        log("restored the finished run from its final checkpoint; nothing was trained")
    keep = args.keep_final_checkpoint == "yes" or (
        args.keep_final_checkpoint == "auto" and "SLURM_JOB_ID" in os.environ
    )
    if ck is not None and keep:
        keep_run_record(ck, meta, timeline)  # first: killed before the outputs, the retry still restores
    write_outputs(Path(args.out), result, opts, arrays, meta, timeline)
    if ck is not None and not keep:
        remove_checkpoint(ck)
    log(f"wrote {args.out}")


def auto_choice(out: str, opts: Options, arrays, comm: Comm) -> tuple[str, dict]:
    """`auto`'s design for this launch, decided once per experiment: the choice an earlier launch (another
    seed or repeat, or this run before a restart) recorded beside it (mpinet.layout.auto_choice_path),
    else chosen now and recorded for the others. ("", {}) when the run is not auto or not in a study's
    layout (it then decides alone). Rank 0 reads the record; every rank gets its design."""
    path = auto_choice_path(out) if opts.algorithm == AUTO else None
    if path is None:
        return "", {}
    record = _read_choice(path) if comm.rank == 0 else {}
    designs = list(EXCHANGES)
    index = int(comm.max(float(designs.index(record["design"]) if record.get("design") in designs else -1)))
    if index >= 0:
        design = designs[index]
        return design, {"trial_step_s": {}, "trials_s": 0.0, **record, "design": design, "reused": True}
    design, trials, seconds = choose_design(arrays, opts, comm)
    record = {"design": design, "trial_step_s": trials, "trials_s": seconds, "decided_by": str(out), "date": _now()}
    if comm.rank == 0 and not path.exists():  # two first launches at once: the last write wins the record
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, record)
    return design, {**record, "reused": False}


def _read_choice(path: Path) -> dict:
    """A recorded auto choice, or {} (none yet, or unreadable: then this launch decides anew)."""
    import json

    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _abort(comm) -> None:
    """End every rank. With several ranks, first give the launcher a moment to forward what this
    rank printed: an abort from the rank that fails first kills the others' output in flight, and
    a rank's own line was seen lost that way (a log holding only its first line)."""
    if comm.size > 1:
        time.sleep(0.5)
    comm.abort(1)


def say(line: str) -> None:
    """One line on stderr in one write: print() writes the text and its newline apart, and the ranks
    share the launcher's pipe, so another rank's line could land in between (seen: an error line
    glued to the end of rank 0's progress line)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _now() -> str:
    from datetime import datetime

    return datetime.now().astimezone().isoformat(timespec="milliseconds")


def _boolean(text: str) -> bool:
    t = text.strip().lower()
    if t in ("true", "yes", "1", "on"):
        return True
    if t in ("false", "no", "0", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{text}'")


def _logger(comm: Comm):
    def log(msg: str) -> None:
        if comm.rank == 0:
            say(f"[{time.strftime('%H:%M:%S')}] {msg}")

    return log


def _interrupted(comm: Comm, checkpoint):
    """SLURM's time limit, scancel and preemption send SIGTERM: leave at once, keeping the
    last complete checkpoint (it is only ever replaced atomically)."""

    def handler(signum, frame):
        if comm.rank == 0:
            kept = f"; checkpoint {checkpoint} is kept for the rerun" if checkpoint else ""
            say(f"mpinet.train: stopped by {signal.Signals(signum).name}{kept}")
        os._exit(128 + signum)

    return handler


if __name__ == "__main__":
    sys.exit(main())
