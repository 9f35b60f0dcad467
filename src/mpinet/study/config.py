"""A study's config, checked before anything runs: the schema, the dataset sources, the sweeps and
the references, each refusal one line naming the key (`config: ...`). The workflow and
`make leftovers` call check_study; the tests call it per bad config instead of starting Snakemake."""

import json
from pathlib import Path

import numpy as np
import pandas as pd

from mpinet import MpinetError
from mpinet.datasets.sources import source_error
from mpinet.study.experiments import (
    COLUMNS,
    GLOBAL_BATCH,
    check_sizes,
    close_match,
    expand_sweeps,
    global_batches,
    hidden_text,
    unknown_keys,
)

# What a reference may check: every measure runs.csv gives a 95 % interval (mpinet.analysis.intervals
# bootstraps exactly these), since a breach is an interval wholly outside the band.
MEASURES = (
    "median_epoch_s",
    "speedup",
    "efficiency",
    "weak_efficiency",
    "global_speedup",
    "global_efficiency",
    "best_serial_speedup",
)
# What a reference selects by: the experiment keys a sweep gives (the launch's repeat aside) and the
# global batch (batch_size times the ranks that train).
SELECTORS = ("dataset", *(c for c in COLUMNS if c != "repeat"), GLOBAL_BATCH)
TOLERANCE = 0.1


def check_study(config: dict, schema_path, prepared_size, source: str = "config") -> pd.DataFrame:
    """The study's experiments table, or MpinetError naming the key that cannot work, one line per
    problem, each `<source>: <key>: ...` (source: the config file, as config_source names it);
    prepared_size(dataset) gives a prepared dataset's (samples, classes), or None."""
    if problems := schema_problems(config, schema_path):
        raise MpinetError("\n".join(f"{source}: {p}" for p in problems))
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
        raise MpinetError(f"{source}: {e}") from None
    return experiments


def config_source(configfiles: list) -> str:
    """The config file a study's keys come from, as the user named it (relative to the working
    directory where it lies inside; of several, the last, whose keys win)."""
    if not configfiles:
        return "config"
    path = Path(configfiles[-1])
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def config_error(config: dict, schema_path) -> str | None:
    """The config's schema violations as one line (`config: ...`, joined by '; '), or None if valid."""
    problems = schema_problems(config, schema_path)
    return f"config: {'; '.join(problems)}" if problems else None


def schema_problems(config: dict, schema_path) -> list[str]:
    """Every schema violation of config, one phrase each naming the key path as written
    (`experiments[2].learnin_rate: unknown key; did you mean learning_rate?`): every unknown key,
    and for each other violation the most relevant reason, with a close match where one helps."""
    import jsonschema
    import yaml

    for name, entry in (config.get("datasets") or {}).items():
        if isinstance(entry, dict) and "standardize" in entry:
            return [
                f"datasets.{name}.standardize was renamed standardize_inputs (per-channel input "
                "scaling); `standardize` is an experiment key only (hidden-layer standardization)"
            ]
    with open(schema_path) as f:
        schema = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml's: 8x as fast, every plan
    # JSON Schema counts 4.0 as an integer; a float where a count is expected is a config error here
    strict = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda checker, v: isinstance(v, int) and not isinstance(v, bool)
    )
    validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=strict)(schema)
    problems = []
    for error in validator.iter_errors(config):
        problems += _problems(jsonschema.exceptions.best_match([error]), validator)
    return list(dict.fromkeys(problems))


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
        if not matches(experiments.assign(**{GLOBAL_BATCH: global_batches(experiments)}), selects).any():
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


# what a schema type is called in a message, alone and in a list
NOUNS = {
    "integer": ("an integer", "integers"),
    "number": ("a number", "numbers"),
    "string": ("a string", "strings"),
    "boolean": ("a boolean (true or false)", "booleans"),
    "object": ("a mapping", "mappings"),
    "null": ("null", "null"),
}
BOUNDS = (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<"))


def _problems(error, validator) -> list[str]:
    """One schema error (best_match's pick) as phrases naming the key path as the user wrote it."""
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".")
    if error.validator == "additionalProperties" and error.validator_value is False:
        return unknown_keys(where, error.instance, error.schema.get("properties", {}))
    value, shown = error.instance, _text(error.instance)
    if error.validator == "enum":
        choices = ", ".join(map(_choice, error.validator_value))
        why = f"{shown} is not one of {choices}{close_match(value, error.validator_value)}"
    elif error.validator in ("oneOf", "anyOf", "type"):
        why = f"{shown} is not {_describe(error.schema, validator.schema)}"
        if isinstance(value, str) and _unquoted(value, error.schema, validator):
            why += f"; write {value} without quotes"
    elif error.validator == "required":
        # a missing key that an unknown key's "did you mean" already names is said once, there
        missing = [k for k in error.validator_value if k not in value and not any(close_match(u, [k]) for u in value)]
        if not missing:
            return []
        why = f"the required key {', '.join(missing)} is missing"
    else:
        why = error.message
    return [f"{where or 'top level'}: {why}"]


def _describe(schema: dict, root: dict, plural: bool = False) -> str:
    """What a (sub)schema accepts, in words: 'an integer >= 1 or a list of integers >= 1'."""
    if ref := schema.get("$ref"):
        schema = root["$defs"][ref.rsplit("/", 1)[-1]]
    if alternatives := schema.get("oneOf") or schema.get("anyOf"):
        return " or ".join(_describe(s, root, plural) for s in alternatives)
    if "enum" in schema:
        return f"one of {', '.join(map(_choice, schema['enum']))}"
    types = schema.get("type", [])
    types = types if isinstance(types, list) else [types]
    if "array" in types:
        return f"{'lists' if plural else 'a list'} of {_describe(schema.get('items', {}), root, plural=True)}"
    nouns = " or ".join(NOUNS.get(t, ("a value", "values"))[plural] for t in types) or "a value"
    bounds = " and ".join(f"{op} {schema[k]}" for k, op in BOUNDS if k in schema)
    return f"{nouns} {bounds}".strip()


def _unquoted(value: str, schema: dict, validator) -> bool:
    """Whether a quoted value ('8', 'true') would be valid as YAML reads it unquoted."""
    import yaml

    try:
        read = yaml.safe_load(value)
    except yaml.YAMLError:
        return False
    return not isinstance(read, str) and validator.evolve(schema=schema).is_valid(read)


def _text(value) -> str:
    """A config value as a message shows it: strings quoted, true/false/null as YAML writes them."""
    if isinstance(value, str):
        return repr(value)
    return json.dumps(value) if isinstance(value, bool) or value is None else str(value)


def _choice(value) -> str:
    """One of an enum's values in a list of them: a word bare, punctuation quoted (',' and ';')."""
    return value if isinstance(value, str) and value.isidentifier() else _text(value)
