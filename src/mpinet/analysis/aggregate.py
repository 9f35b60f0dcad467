"""Metrics tables from recorded runs: per epoch, per run (with speedup over serial), per configuration."""

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from mpinet import MpinetError
from mpinet.analysis.accounting import accounting_table
from mpinet.analysis.baselines import add_bases, base_keys, baseline_key, cpu_contention, serial_runs, speedup_notes
from mpinet.analysis.environment import environment_table
from mpinet.analysis.intervals import add_intervals, timed_epochs
from mpinet.analysis.references import evaluate
from mpinet.analysis.summary import headline_rst
from mpinet.engine.loop import METRIC_COLUMNS
from mpinet.layout import METRICS_FILE, RECORD_FILE
from mpinet.study.experiments import COLUMNS, LAUNCH

PARAMS = ["dataset", *COLUMNS]


def load_epochs(runs: list[dict]) -> pd.DataFrame:
    """One row per run and epoch: the run's parameters, its metrics.csv and its training-set size.

    runs: dicts holding every PARAMS key and `dir`, the run's output directory.
    """
    return read_runs(runs)[0]


def read_runs(runs: list[dict]) -> tuple[pd.DataFrame, list[tuple[str, dict]]]:
    """load_epochs' table, and each run's (directory, run.json) as read for it."""
    frames, records = [], []
    for run in runs:
        d = Path(run["dir"])
        m, meta = read_run(d, int(run["epochs"]))
        records.append((str(d), meta))
        for key in PARAMS:
            m[key] = run[key]
        m["trained_samples"] = meta["data"]["train_samples"]
        m["features"] = meta["data"].get("features", 0)
        m["classes"] = len(meta["data"].get("classes", []))
        m["isolation"] = meta.get("timing", {}).get("isolation", "unknown")
        m["cores"] = meta.get("cores", 0)
        m["nodes"] = len(meta.get("hosts", [])) or 1  # the hosts the ranks ran on, not the ones asked for
        m["trained_as"] = trained_as(meta, run["algorithm"])
        m["auto_trials_s"] = auto_trials(meta) if run["algorithm"] == "auto" else np.nan
        m["timed_by"] = timing_engine(meta)
        m["run_dir"] = str(d)
        frames.append(m)
    # train_samples: the experiment key (0: all); trained_samples: the samples the run trained on
    front = [*PARAMS, "run_dir", "trained_samples", "features", "classes", "isolation", "nodes"]
    front += ["trained_as", "timed_by", "auto_trials_s"]
    front = list(dict.fromkeys(front))
    front.append("cores")
    df = pd.concat(frames, ignore_index=True)
    return df[front + [c for c in df.columns if c not in front]], records


def trained_as(meta: dict, algorithm: str) -> str:
    """The design a run trained with, as run.json records it: auto's choice, a grid with its shape
    ("grid 2x4": groups x shards); the algorithm itself for runs recorded before 0.8.0."""
    grid = meta.get("grid")
    return meta.get("design", algorithm) + (f" {grid['groups']}x{grid['shards']}" if grid else "")


def auto_trials(meta: dict) -> float:
    """What choosing cost an auto run's experiment: the trials of the launch that decided (every launch
    of the experiment trains that choice and is charged it); NaN for runs before 0.10.0, which kept
    only each candidate's time a step."""
    choice = meta.get("auto_choice") or {}
    return float(choice.get("trials_s", np.nan))


def timing_engine(meta: dict) -> str:
    """The engine that timed a run (run.json's timed_by: its code's hash); for a run recorded before
    0.9.0, the release that recorded it (within a release the engine's code is one)."""
    return meta.get("timed_by") or f"mpinet {meta.get('mpinet', 'unknown')}"


ISOLATED = ("one-at-a-time", "exclusive-node")  # run.json isolation modes whose timings stand alone
RERUN = "; remove the run's directory and run the workflow again to retrain it"
# the metrics.csv columns a run must have: the trainer's, up to comm_s (the wait/transfer split and
# what follows came later; runs recorded before it are read without them)
METRICS = METRIC_COLUMNS[: METRIC_COLUMNS.index("comm_s") + 1]


def read_run(d: Path, epochs: int) -> tuple[pd.DataFrame, dict]:
    """A finished run's metrics.csv and run.json, checked: a run whose files are cut, empty or
    incomplete is an error naming it, never a row of the tables."""
    try:
        meta = json.loads((d / RECORD_FILE).read_text())
        train_samples = meta["data"]["train_samples"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise MpinetError(f"{d / RECORD_FILE}: unreadable or incomplete ({type(e).__name__}: {e}){RERUN}") from None
    try:
        m = pd.read_csv(d / METRICS_FILE)
    except (OSError, ValueError) as e:
        raise MpinetError(f"{d / METRICS_FILE}: unreadable ({type(e).__name__}: {e}){RERUN}") from None
    missing = [c for c in METRICS if c not in m.columns]
    if missing:
        raise MpinetError(f"{d / METRICS_FILE}: column(s) {', '.join(missing)} missing{RERUN}")
    values = m[list(METRICS)].apply(pd.to_numeric, errors="coerce")
    if m["epoch"].tolist() != list(range(1, epochs + 1)) or values.isna().any().any():
        raise MpinetError(
            f"{d / METRICS_FILE}: {len(m)} complete epoch rows of {epochs} expected (cut or edited?){RERUN}"
        )
    if not isinstance(train_samples, int) or train_samples < 1:
        raise MpinetError(f"{d / RECORD_FILE}: data.train_samples is {train_samples!r}{RERUN}")
    return m, meta


def summarize_runs(epochs: pd.DataFrame, target_accuracy: float) -> pd.DataFrame:
    """One row per run: accuracy, timings, communication share, throughput, both axes' speedups
    (mpinet.analysis.baselines) with their intervals, contention and which speedups a headline may quote."""
    rows = [run_row(run_dir, g, target_accuracy) for run_dir, g in epochs.groupby("run_dir", sort=False)]
    # one experiment's launches timed by one engine that trained one design (auto's choice)
    same = [c for c in PARAMS if c != "repeat"] + ["timed_by", "trained_as"]
    runs = add_bases(pd.DataFrame(rows), same)  # a speedup divides two timings of one engine (the keys say so)
    runs["timing_mixed"] = mixed_engines(runs)
    # spread between separate launches of the same experiment (repeats) timed by one engine: (max - min) / median
    t = runs.groupby(same, sort=False)["median_epoch_s"]
    runs["launch_spread"] = ((t.transform("max") - t.transform("min")) / t.transform("median")).where(
        t.transform("size") > 1
    )
    # a speedup is only as good as both timings: flag it unless run and baseline ran alone
    runs["speedup_isolated"] = runs["isolated"] & runs["serial_isolated"].fillna(False).astype(bool)
    runs["efficiency"] = runs["speedup"] / runs["ranks"]  # per process started, the server included
    runs["contention"] = cpu_contention(runs["cpu_share"])
    runs["speedup_note"] = speedup_notes(runs)
    runs["target_accuracy"] = target_accuracy
    # 95 % intervals per experiment, over its launches and their epochs
    runs = add_intervals(runs, timed_epochs(epochs), [*same, "_clean"])  # the launches its speedups pool
    return runs.drop(columns=["_baseline", "_global_baseline", "_best", "_clean"])


def mixed_engines(runs: pd.DataFrame) -> pd.Series:
    """Per run, whether its speedup is left out because its serial baseline was timed only by another
    engine, or it resumed another engine's checkpoint (timed_by joins two), or its experiment's
    launches were timed by several engines."""
    key = baseline_key(runs).str.rsplit("|", n=1).str[0]  # the base's key, whichever engine timed it
    serial = serial_runs(runs)
    baseline_engines = runs[serial].groupby(key[serial])["timed_by"].agg(set)
    other = [
        not is_serial and bool(engines := baseline_engines.get(k)) and engine not in engines
        for k, engine, is_serial in zip(key, runs["timed_by"], serial)
    ]
    experiment = runs.groupby([c for c in PARAMS if c != "repeat"], sort=False)["timed_by"].transform("nunique")
    return (
        pd.Series(other, index=runs.index)
        | runs["timed_by"].astype(str).str.contains("+", regex=False)
        | (experiment > 1)
    )


def run_row(run_dir: str, g: pd.DataFrame, target_accuracy: float) -> dict:
    """One run's row of runs.csv from its epochs (before the columns that compare it with others)."""
    g = g.sort_values("epoch")
    timed = g[g["epoch"] > 1] if len(g) > 1 else g  # epoch 1 warms caches and allocators up: left out
    total = g["time_s"].sum()
    busy = g["compute_s"].sum() + g["comm_s"].sum()
    reached = g.loc[g["test_accuracy"] >= target_accuracy, "epoch"]
    first = g.iloc[0]
    return {
        **{k: first[k] for k in PARAMS},
        "run_dir": run_dir,
        "trained_samples": first["trained_samples"],
        "features": first.get("features", 0),
        "classes": first.get("classes", 0),
        "epochs_run": len(g),
        "final_test_accuracy": g["test_accuracy"].iloc[-1],
        "best_test_accuracy": g["test_accuracy"].max(),
        "final_train_loss": g["train_loss"].iloc[-1],
        "median_epoch_s": timed["time_s"].median(),
        "iqr_epoch_s": timed["time_s"].quantile(0.75) - timed["time_s"].quantile(0.25),
        "p95_epoch_s": timed["time_s"].quantile(0.95),
        # the step times' median and 95th percentile in a typical epoch (the median over the epochs of
        # each epoch's own percentiles; NaN in runs before 0.5)
        "median_step_s": _median_of(timed, "step_p50_s"),
        "p95_step_s": _median_of(timed, "step_p95_s"),
        # the slowest rank's share of a core while training (NaN in runs before 0.10.0: contention unknown)
        "cpu_share": _median_of(timed, "cpu_share"),
        "median_compute_s": timed["compute_s"].median(),
        "median_comm_s": timed["comm_s"].median(),
        # comm_s split: waiting for the slowest rank, and moving the bytes (NaN in runs before 0.3)
        "median_wait_s": _median_of(timed, "wait_s"),
        "median_wait_max_s": _median_of(timed, "wait_max_s"),
        "median_transfer_s": _median_of(timed, "transfer_s"),
        "nodes": first.get("nodes", 1),
        "trained_as": first.get("trained_as", first["algorithm"]),
        "auto_trials_s": first.get("auto_trials_s", np.nan),
        "timed_by": first.get("timed_by", "unknown"),
        "isolated": first.get("isolation", "unknown") in ISOLATED,
        # more ranks x threads than the hosts had cores: no speedup can be expected
        "oversubscribed": 0 < first.get("cores", 0) < first["ranks"] * first.get("blas_threads", 1),
        "total_train_s": total,
        "comm_share": g["comm_s"].sum() / busy if busy > 0 else 0.0,
        "bytes_sent": int(g["bytes_sent"].sum()),
        "samples_per_s": first["trained_samples"] * len(g) / total if total > 0 else np.nan,
        "time_to_target_s": g["time_s"].cumsum()[g["epoch"] <= reached.iloc[0]].iloc[-1] if len(reached) else np.nan,
    }


def _median_of(epochs: pd.DataFrame, column: str) -> float:
    """The median of a metrics.csv column that runs recorded by an older release lack (NaN then)."""
    return pd.to_numeric(epochs[column], errors="coerce").median() if column in epochs else np.nan


def summarize_seeds(runs: pd.DataFrame, epochs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Mean and standard deviation over the seeds of each configuration; with the epochs, the 95 %
    intervals of each configuration over all its seeds' launches and epochs."""
    # the hosts the runs ran on too: seeds placed on 1 and on 2 nodes are timed differently
    keys = [c for c in PARAMS if c not in LAUNCH] + ["trained_as", "nodes"]
    runs = runs.assign(nodes=runs["nodes"].fillna(1) if "nodes" in runs else 1)  # unrecorded: one node
    measures = [
        "final_test_accuracy",
        "best_test_accuracy",
        "median_epoch_s",
        "comm_share",
        "samples_per_s",
        "speedup",
        "efficiency",
        "weak_efficiency",
        "global_speedup",
        "global_efficiency",
        "best_serial_speedup",
        "time_to_target_s",
        "launch_spread",
    ]
    g = runs.groupby(keys, sort=False)[measures]
    out = g.agg(["mean", "std"])
    out.columns = [f"{m}_{s}" for m, s in out.columns]
    by = runs.groupby(keys, sort=False)
    out.insert(0, "seeds", by["seed"].nunique())
    out.insert(1, "launches", g.size())  # seeds x repeats
    out.insert(2, "seeds_reached_target", by["time_to_target_s"].count())
    out = out.reset_index()
    if epochs is None:
        return out
    per_experiment = [c for c in runs.columns if "_ci_" in c or c in ("ci_launches", "unsettled")]
    runs = base_keys(runs.drop(columns=per_experiment))
    cis = add_intervals(runs, timed_epochs(epochs), keys)
    columns = [c for c in cis.columns if "_ci_" in c or c in ("ci_launches", "unsettled")]
    return out.merge(cis.drop_duplicates(keys)[keys + columns], on=keys, how="left")


@dataclass
class Tables:
    """The files the aggregation writes, by the names the aggregate rule gives them: the three tables,
    and the optional ones (None: not written)."""

    epochs: str | Path
    runs: str | Path
    seeds: str | Path
    model: str | Path | None = None  # the cost model's predictions (needs the microbenchmark's CSV)
    references: str | Path | None = None  # each reference's check
    environment: str | Path | None = None  # where the runs ran (also on the front page)
    accounting: str | Path | None = None  # SLURM's accounting of each run (its columns also in runs.csv)
    front_page: str | Path | None = None  # the report's front page (needs the study's name and description)


@dataclass
class Study:
    """What the aggregation needs of the study besides its runs: its name and description for the front
    page, its references, and the microbenchmark's CSV for the cost model (None: no model)."""

    name: str = ""
    description: str = ""
    references: list = field(default_factory=list)
    bench_csv: str | Path | None = None


def write_tables(runs: list[dict], target_accuracy: float, out: Tables, study: Study | None = None) -> None:
    """The tables of `runs` (dicts holding every PARAMS key and `dir`) into `out`; `study` adds the cost
    model, the references' checks and the front page where `out` names their files."""
    study = study or Study()
    epochs_csv, runs_csv, seeds_csv, model_csv = out.epochs, out.runs, out.seeds, out.model
    references_csv, environment_csv, accounting_csv = out.references, out.environment, out.accounting
    bench_csv, references = study.bench_csv, study.references
    epochs, records = read_runs(runs)
    per_run = summarize_runs(epochs, target_accuracy)
    environment = environment_table([meta for _, meta in records])
    if environment_csv is not None:
        environment.to_csv(environment_csv, index=False)
    if accounting_csv is not None:
        accounting = accounting_table(records)
        accounting.to_csv(accounting_csv, index=False)
        per_run = per_run.merge(accounting, on="run_dir", how="left")
    if bench_csv is not None:
        per_run, model = add_model(per_run, pd.read_csv(bench_csv))
        model.to_csv(model_csv, index=False)
    epochs.to_csv(epochs_csv, index=False)
    per_run.to_csv(runs_csv, index=False)
    summarize_seeds(per_run, epochs).to_csv(seeds_csv, index=False)
    checked = None
    if references_csv is not None:
        checked = evaluate(references or [], per_run)
        checked.to_csv(references_csv, index=False)
    if out.front_page is not None:  # the report's front page, with the headline numbers
        Path(out.front_page).write_text(headline_rst(runs_csv, study.description, study.name, checked, environment))


MODEL_RANKS = range(1, 33)


def add_model(runs: pd.DataFrame, bench: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The cost model fitted to these runs and this machine's α and β: each run's predicted epoch
    time and error, and predictions for 1-32 ranks (and every swept count) with the measured link
    and the interconnect presets."""
    from mpinet.analysis.costmodel import (
        INTERCONNECTS,
        Link,
        collectives,
        fitted,
        measured_link,
        model_error,
        predict,
        predicted_epochs,
    )

    measured = measured_link(bench)
    runs = runs.copy()
    runs["model_epoch_s"] = predicted_epochs(runs, measured)
    runs["model_error"] = model_error(runs, measured, runs["model_epoch_s"])
    # the model's exchange alone against the measured transfer (the wait for a slower rank taken out)
    exchange = runs["model_epoch_s"] - predicted_epochs(runs, Link(0.0, 0.0))
    runs["model_transfer_error"] = (exchange / runs["median_transfer_s"] - 1).where(
        (runs["median_transfer_s"] > 0) & ~fitted(runs)
    )
    ranks = sorted({*MODEL_RANKS, *runs["ranks"]})
    model = predict(runs, {"measured here": measured, **INTERCONNECTS}, ranks)
    model["collectives"] = collectives(str(bench["library"].iloc[0]) if "library" in bench else "")
    return runs, model
