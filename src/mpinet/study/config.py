"""A study's config, checked before anything runs: the schema, the dataset sources, the sweeps and
the references, each refusal one line naming the key (`config: ...`). The workflow and
`make leftovers` call check_study; the tests call it per bad config instead of starting Snakemake."""

import numpy as np
import pandas as pd

from mpinet import MpinetError
from mpinet.datasets.sources import source_error
from mpinet.study.experiments import COLUMNS, check_sizes, expand_sweeps, hidden_text

MEASURES = ("speedup", "efficiency", "weak_efficiency", "median_epoch_s")
SELECTORS = ("dataset", *(c for c in COLUMNS if c != "repeat"))
TOLERANCE = 0.1


def check_study(config: dict, schema_path, prepared_size) -> pd.DataFrame:
    """The study's experiments table, or MpinetError naming the key that cannot work;
    prepared_size(dataset) gives a prepared dataset's (samples, classes), or None."""
    if message := config_error(config, schema_path):
        raise MpinetError(message)
    try:
        for name, entry in config["datasets"].items():
            if message := source_error(name, entry):
                raise MpinetError(message)
        check_entries(config.get("references"))
        experiments = expand_sweeps(config["experiments"], config["datasets"])
        # subsets checked against the data's size where it is prepared (else the training job checks)
        check_sizes(experiments, prepared_size)
        check_selects(config.get("references"), experiments)
    except MpinetError as e:
        raise MpinetError(f"config: {e}") from None
    return experiments


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


def check_entries(references: list) -> None:
    """Each entry names known experiment keys, exactly one measure and a tolerance in [0, 1)."""
    for i, ref in enumerate(references or []):
        where = f"references[{i}]"
        if not isinstance(ref, dict):
            raise MpinetError(f"{where}: expected a mapping of experiment keys, one measure and a tolerance")
        unknown = set(ref) - {*SELECTORS, *MEASURES, "tolerance"}
        if unknown:
            raise MpinetError(
                f"{where}: unknown key(s) {', '.join(sorted(unknown))}; expected experiment keys "
                f"({', '.join(SELECTORS)}), one of {', '.join(MEASURES)} and tolerance"
            )
        measures = [m for m in MEASURES if m in ref]
        if len(measures) != 1:
            raise MpinetError(f"{where}: give exactly one of {', '.join(MEASURES)}, got {len(measures)}")
        tolerance = ref.get("tolerance", TOLERANCE)
        if not (isinstance(tolerance, (int, float)) and 0 <= tolerance < 1):
            raise MpinetError(f"{where}.tolerance: expected a relative tolerance in [0, 1), got {tolerance!r}")


def check_selects(references: list, experiments: pd.DataFrame) -> None:
    """Before anything runs: every reference selects at least one experiment of the study's grid
    (train_samples as the experiment key: 0 for all the data, as in the tables)."""
    for i, ref in enumerate(references or []):
        selects = {k: v for k, v in ref.items() if k in SELECTORS}
        if not matches(experiments, selects).any():
            text = ", ".join(f"{k}={v}" for k, v in selects.items())
            raise MpinetError(f"references[{i}]: selects no experiment of the study ({text})")


def matches(runs: pd.DataFrame, selects: dict) -> pd.Series:
    """Which rows (experiments or runs) a reference's experiment keys select."""
    ok = pd.Series(True, index=runs.index)
    for key, value in selects.items():
        if key not in runs:
            return pd.Series(False, index=runs.index)
        column = runs[key]
        if key == "hidden":
            value = hidden_text(value)
            ok &= column.astype(str) == value
        elif isinstance(value, bool) or isinstance(value, str):
            ok &= column.astype(str) == str(value)
        else:
            ok &= np.isclose(pd.to_numeric(column, errors="coerce"), float(value))
    return ok
