"""The experiment grid: config sweeps crossed into one row per training run."""

import difflib
import itertools
from dataclasses import fields

import pandas as pd

from mpinet import MpinetError
from mpinet.engine.options import Impossible, Options, check_options, data_ranks, option_flag

# Grid columns in path order: the training options in their definition order, ranks after algorithm,
# and last the launch: `repeats: N` in a sweep trains each experiment N times as separate launches
# (identical numbers, independent timings), repeat 1..N.
OPTIONS = tuple(f.name for f in fields(Options))
COLUMNS = (OPTIONS[0], "ranks", *OPTIONS[1:], "repeat")
DEFAULTS = {
    "ranks": 1,
    **{f.name: list(f.default) if isinstance(f.default, tuple) else f.default for f in fields(Options)},
    "repeat": 1,
}
# Where a run's ranks go (SLURM's --nodes; None: SLURM decides): a property of the launch that
# changes timings but never the numbers, so it is a column of the table but not of the run's path.
PLACEMENT = ("nodes",)
# The fixed-global-batch axis: `global_batch: G` in a sweep instead of batch_size gives each run
# G / (its training ranks) samples a rank, so every rank count does the updates of serial at batch G.
# It is not a column: the run is the same as one listed with that batch_size (and shares its path).
GLOBAL_BATCH = "global_batch"
# What a sweep may say: the dataset, every column but `repeat` (a sweep gives the count, `repeats`),
# the global batch and the placement.
SWEEP_KEYS = ("dataset", *(c for c in COLUMNS if c != "repeat"), GLOBAL_BATCH, "repeats", *PLACEMENT)
# Columns that describe a launch of an experiment rather than the experiment itself.
LAUNCH = ("seed", "repeat")
# Columns besides design, ranks and launch: when a study varies some, each value set is a variant.
VARIANT_COLUMNS = tuple(c for c in COLUMNS if c not in ("algorithm", "ranks", *LAUNCH))


def global_batches(table: pd.DataFrame) -> pd.Series:
    """Each experiment's or run's global batch: its batch per rank times the ranks that train."""
    workers = [data_ranks(a, int(p)) for a, p in zip(table["algorithm"], table["ranks"])]
    return table["batch_size"] * pd.Series(workers, index=table.index, dtype="int64")


def varying(table: pd.DataFrame) -> list[str]:
    """The variant columns a table of experiments or runs holds more than one value of (a weak-scaling
    run's training-set size follows its ranks: it makes no variant of its own)."""
    return [c for c in VARIANT_COLUMNS if c in table and variant_values(table, c).nunique() > 1]


def variant_values(table: pd.DataFrame, column: str) -> pd.Series:
    """A variant column's values, NaN where they do not tell variants apart (train_samples of weak-scaling runs)."""
    if column == "train_samples" and "samples_per_rank" in table:
        return table[column].where(table["samples_per_rank"] == 0)
    return table[column]


def expand_sweeps(sweeps: list[dict], datasets: dict) -> pd.DataFrame:
    """Cross every sweep's list values into rows; drop impossible combinations; one row per experiment.

    `hidden` is one architecture when it is a list of sizes and a sweep when it is a list of lists.
    """
    rows, dropped = [], []
    for i, sweep in enumerate(sweeps):
        where = f"experiments[{i}]"
        if unknown := unknown_keys(where, sweep, SWEEP_KEYS):
            raise MpinetError("; ".join(unknown))
        names = sweep.get("dataset")
        for name in names if isinstance(names, list) else [names]:
            if name not in datasets:
                known = f"{', '.join(datasets)}){close_match(name, datasets)}"
                raise MpinetError(f"{where}.dataset: '{name}' is not defined under datasets ({known}")
        values = {k: _as_list(k, sweep.get(k, DEFAULTS.get(k))) for k in ("dataset", *COLUMNS)}
        values["repeat"] = list(range(1, int(sweep.get("repeats", 1)) + 1))
        if GLOBAL_BATCH in sweep:
            if "batch_size" in sweep:
                raise MpinetError(f"{where}: global_batch and batch_size exclude each other; give one of them")
            values["batch_size"] = _as_list(GLOBAL_BATCH, sweep[GLOBAL_BATCH])
        nodes = sweep.get("nodes")
        before, reasons, seen = len(rows), {}, {}
        for combo in itertools.product(*values.values()):
            row = dict(zip(values, combo))
            if (why := _impossible(row, where)) is None and GLOBAL_BATCH in sweep:
                row["batch_size"] = _per_rank_batch(row, where)
            if why is None:
                # a node holds at least one rank: a sweep's 1-rank baseline with `nodes: 4` runs on one
                rows.append({**row, "nodes": None if nodes is None or row["ranks"] == 1 else min(nodes, row["ranks"])})
            else:
                seen[str(why)] = None  # in order: what the user meets first
                if not why.obvious:
                    reasons[str(why)] = reasons.get(str(why), 0) + 1
        if reasons:
            said = "; ".join(f"{r} ({n}x)" for r, n in reasons.items())
            dropped.append(f"{where}: dropped {sum(reasons.values())} combination(s) that cannot run: {said}")
        if len(rows) == before:
            # why each of its combinations was refused, once each: only the rules this sweep broke
            raise MpinetError(f"{where}: no runnable combination: {'; '.join(seen)}")
    if not rows:
        raise MpinetError("experiments: the list is empty; add at least one sweep")
    df = pd.DataFrame(rows, columns=["dataset", *COLUMNS, *PLACEMENT]).drop_duplicates(ignore_index=True)
    df["nodes"] = df["nodes"].astype("Int64")
    df["hidden"] = df["hidden"].map(hidden_text)
    _check_one_placement(df)
    df.attrs["dropped"] = dropped  # said at plan time (dropped_lines), one line per sweep entry
    return df


def unknown_keys(where: str, given, known) -> list[str]:
    """One phrase per key of given that known lacks, naming it at where and its close match:
    `experiments[2].learnin_rate: unknown key; did you mean learning_rate?` (else the keys known)."""
    phrases = []
    for key in (k for k in given if k not in known):
        path = f"{where}.{key}" if where else str(key)
        hint = close_match(key, known) or f"; expected one of {', '.join(map(str, known))}"
        phrases.append(f"{path}: unknown key{hint}")
    return phrases


def close_match(word, choices) -> str:
    """'; did you mean X?' for the choice closest to word (difflib, ignoring case), or ''."""
    if not isinstance(word, str):
        return ""
    words = {str(c).lower(): c for c in choices}
    match = difflib.get_close_matches(word.lower(), list(words), n=1)
    return f"; did you mean {words[match[0]]}?" if match else ""


def dropped_lines(experiments: pd.DataFrame) -> list[str]:
    """What a study's sweeps dropped beyond the obvious (serial on several ranks, a server alone), one
    line per experiment entry, for the workflow to say before it plans."""
    return list(experiments.attrs.get("dropped", []))


def _check_one_placement(df: pd.DataFrame) -> None:
    """Two placements of one experiment would share its run directory (placement is not in the path)."""
    key = ["dataset", *COLUMNS]
    clash = df[df.duplicated(key, keep=False)]
    if not clash.empty:
        row = clash.iloc[0]
        same = clash[(clash[key] == row[key]).all(axis=1)]
        # an entry without nodes leaves the placement to SLURM: said so, not as YAML's null
        placements = " and ".join(sorted(f"nodes {n:g}" if pd.notna(n) else "no nodes" for n in same["nodes"]))
        raise MpinetError(
            f"experiments: {row['dataset']} {row['algorithm']} on {row['ranks']} ranks (seed {row['seed']}) is "
            f"listed with {placements}; placement does not change the numbers and is not part of the "
            "run's path, so both would share one run directory: give the experiment one nodes value"
        )


def check_sizes(experiments: pd.DataFrame, prepared_size) -> None:
    """Every experiment's training set against its data's size, for the datasets prepared_size(name)
    knows ((training samples, classes), or None): a subset larger than the data, or too small for
    its classes or training ranks, is an error naming the key and the data's size."""
    for name, rows in experiments.groupby("dataset", sort=True):
        if (size := prepared_size(name)) is None:
            continue
        for row in rows.to_dict("records"):
            try:
                check_options(_options(row), row["ranks"], *size)
            except MpinetError as e:
                ranks = f"{row['ranks']} rank{'s' if row['ranks'] != 1 else ''}"
                where = f"dataset {name}, {row['algorithm']} on {ranks}"
                raise MpinetError(f"experiments: {where}: {e}") from None


def grid_paths(experiments: pd.DataFrame) -> list[str]:
    """<dataset>/<grid path> of every experiment of a table, in table order: where its run lives
    under the runs root (Snakemake's Paramspace spells the path, as the workflow's wildcards do)."""
    from snakemake.utils import Paramspace

    space = Paramspace(experiments[list(COLUMNS)])
    return [f"{d}/{p}" for d, p in zip(experiments["dataset"], space.instance_patterns)]


def hidden_text(hidden) -> str:
    """Hidden layer sizes as runs are named and tabled: (30, 20), [30, 20] or '30-20' -> '30-20'."""
    return str(hidden) if isinstance(hidden, str) else "-".join(str(int(h)) for h in hidden)


def hidden_sizes(hidden) -> tuple[int, ...]:
    """The sizes of a hidden_text (or of a list of sizes): '30-20' -> (30, 20)."""
    return tuple(int(h) for h in hidden_text(hidden).split("-"))


def train_arguments(row: dict) -> str:
    """The `python -m mpinet.train` options for one experiment row (hidden as '30-20')."""
    args = []
    for key in COLUMNS:
        value = row[key]
        if key == "repeat":
            continue  # a launch of the same experiment: the trainer never sees it
        if key == "ranks":
            args.append(f"--expect-ranks {value}")
            continue
        if key == "hidden":
            value = " ".join(map(str, hidden_sizes(value)))
        elif isinstance(DEFAULTS[key], bool):
            value = str(bool(value)).lower()
        args.append(f"{option_flag(key)} {value}")
    return " ".join(args)


def launch_order(experiments: pd.DataFrame) -> list[int]:
    """Each experiment's position in the order timed runs should be launched in: whole rounds of
    repeats, and within a round the designs and rank counts of one configuration side by side, so
    a slow drift of the machine falls on every design alike instead of on the last one."""
    keys = ["repeat", "seed", "dataset", *VARIANT_COLUMNS]
    order = experiments.sort_values([*keys, "algorithm", "ranks"], kind="stable").index
    position = pd.Series(range(len(order)), index=order)
    return position.reindex(experiments.index).tolist()


def _per_rank_batch(row: dict, where: str) -> int:
    """The per-rank batch of a global_batch sweep's row (its batch_size holds the global batch): refused
    when the run's training ranks do not divide it, since the run would not do serial's updates."""
    size, workers = row["batch_size"], data_ranks(row["algorithm"], row["ranks"])
    if size % workers or size < workers:
        raise MpinetError(
            f"{where}: global_batch {size} on {row['ranks']} ranks of {row['algorithm']} ({workers} training "
            f"rank(s)): {workers} does not divide {size}; list rank counts whose training ranks divide it"
        )
    return size // workers


def _as_list(key, value) -> list:
    if key == "hidden":
        if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
            return [tuple(v) for v in value]
        return [tuple(value) if isinstance(value, list) else (value,)]
    return value if isinstance(value, list) else [value]


def _options(row: dict) -> Options:
    """A grid row's training options (hidden as a tuple of sizes or as '30-20')."""
    hidden = hidden_sizes(row["hidden"])
    return Options(**{k: hidden if k == "hidden" else row[k] for k in OPTIONS})


def _impossible(row: dict, where: str) -> Impossible | None:
    """Why the trainer refuses this combination, or None when it accepts it; the trainer's own option
    check decides, so the grid and the engine cannot disagree. Values that are wrong on their own are
    an error naming the key (the schema refuses most of them first); combinations that cannot go
    together (serial on 2 ranks, paramserver on 1, ...) are dropped from the sweep."""
    try:
        check_options(_options(row), row["ranks"], n_train=None)
    except Impossible as e:
        return e
    except MpinetError as e:
        raise MpinetError(f"{where}.{e}") from None
    return None
