"""The experiment grid: config sweeps crossed into one row per training run."""

import itertools

import pandas as pd

from mpinet import MpinetError
from mpinet.train import ALGORITHMS, Options, check_options

# Grid columns in path order: what a user compares first comes first in results/runs/<dataset>/...
COLUMNS = (
    "algorithm",
    "ranks",
    "batch_size",
    "learning_rate",
    "epochs",
    "hidden",
    "loss",
    "standardize",
    "dtype",
    "sync_every",
    "shuffle",
    "faithful",
    "seed",
)
DEFAULTS = {
    "algorithm": "serial",
    "ranks": 1,
    "batch_size": 4,
    "learning_rate": 0.3,
    "epochs": 100,
    "hidden": [30, 20],
    "loss": "l2",
    "standardize": True,
    "dtype": "float32",
    "sync_every": 1,
    "shuffle": "samples",
    "faithful": False,
    "seed": 1,
}


def expand_sweeps(sweeps: list[dict], datasets: dict) -> pd.DataFrame:
    """Cross every sweep's list values into rows; drop impossible combinations; one row per experiment.

    `hidden` is one architecture when it is a list of sizes and a sweep when it is a list of lists.
    """
    rows = []
    for i, sweep in enumerate(sweeps):
        where = f"experiments[{i}]"
        unknown = set(sweep) - set(COLUMNS) - {"dataset"}
        if unknown:
            raise MpinetError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; expected {', '.join(COLUMNS)}")
        names = sweep.get("dataset")
        for name in names if isinstance(names, list) else [names]:
            if name not in datasets:
                raise MpinetError(f"{where}.dataset: '{name}' is not defined under datasets ({', '.join(datasets)})")
        values = {k: _as_list(k, sweep.get(k, DEFAULTS.get(k))) for k in ("dataset", *COLUMNS)}
        before = len(rows)
        for combo in itertools.product(*values.values()):
            row = dict(zip(values, combo))
            _check_row(row, where)
            if _possible(row):
                rows.append(row)
        if len(rows) == before:
            raise MpinetError(
                f"{where}: no runnable combination (serial runs on 1 rank, paramserver needs at least 2 "
                "ranks, sync_every > 1 needs allreduce, faithful needs loss l2 and sync_every 1)"
            )
    if not rows:
        raise MpinetError("experiments: the list is empty; add at least one sweep")
    df = pd.DataFrame(rows, columns=["dataset", *COLUMNS]).drop_duplicates(ignore_index=True)
    df["hidden"] = df["hidden"].map(lambda h: "-".join(str(n) for n in h))
    return df


def train_arguments(row: dict) -> str:
    """The `python -m mpinet.train` options for one experiment row (hidden as '30-20')."""
    return " ".join(
        [
            f"--algorithm {row['algorithm']}",
            f"--expect-ranks {row['ranks']}",
            f"--batch-size {row['batch_size']}",
            f"--learning-rate {row['learning_rate']}",
            f"--epochs {row['epochs']}",
            f"--hidden {' '.join(str(row['hidden']).split('-'))}",
            f"--loss {row['loss']}",
            f"--standardize {str(row['standardize']).lower()}",
            f"--dtype {row['dtype']}",
            f"--sync-every {row['sync_every']}",
            f"--shuffle {row['shuffle']}",
            f"--faithful {str(row['faithful']).lower()}",
            f"--seed {row['seed']}",
        ]
    )


def _as_list(key, value) -> list:
    if key == "hidden":
        if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
            return [tuple(v) for v in value]
        return [tuple(value) if isinstance(value, list) else (value,)]
    return value if isinstance(value, list) else [value]


def _check_row(row: dict, where: str) -> None:
    if row["algorithm"] not in ALGORITHMS:
        raise MpinetError(f"{where}.algorithm: unknown '{row['algorithm']}'; expected one of {', '.join(ALGORITHMS)}")
    for key in ("ranks", "batch_size", "epochs", "sync_every"):
        if not isinstance(row[key], int) or isinstance(row[key], bool) or row[key] < 1:
            raise MpinetError(f"{where}.{key}: must be a positive integer, got {row[key]!r}")
    if not isinstance(row["learning_rate"], int | float) or row["learning_rate"] <= 0:
        raise MpinetError(f"{where}.learning_rate: must be a positive number, got {row['learning_rate']!r}")
    if not row["hidden"] or any(not isinstance(n, int) or n < 1 for n in row["hidden"]):
        raise MpinetError(f"{where}.hidden: must list positive layer sizes, got {list(row['hidden'])!r}")


def _possible(row: dict) -> bool:
    """Whether the trainer accepts this combination (serial on 1 rank, paramserver on 2+, ...).

    The trainer's own option check decides, so the grid and the engine cannot disagree;
    values that are wrong on their own were already refused by _check_row.
    """
    options = Options(**{k: row[k] for k in COLUMNS if k != "ranks"})
    try:
        check_options(options, row["ranks"], n_train=row["ranks"])
    except MpinetError:
        return False
    return True


def config_error(config: dict, schema_path) -> str | None:
    """The most relevant schema violation of config as one line naming the key, or None if valid."""
    import jsonschema
    import yaml

    for name, entry in (config.get("datasets") or {}).items():
        if isinstance(entry, dict) and "standardize" in entry:
            return (
                f"config: datasets.{name}.standardize was renamed standardize_inputs (per-channel input "
                "scaling); `standardize` is an experiment key only (hidden-layer standardization)"
            )
    with open(schema_path) as f:
        schema = yaml.safe_load(f)
    # JSON Schema counts 4.0 as an integer; a float where a count is expected is a config error here
    strict = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda checker, v: isinstance(v, int) and not isinstance(v, bool)
    )
    validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=strict)
    error = jsonschema.exceptions.best_match(validator(schema).iter_errors(config))
    if error is None:
        return None
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".")
    return f"config: {where or 'top level'}: {error.message}"
