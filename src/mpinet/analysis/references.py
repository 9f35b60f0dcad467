"""Performance references, as ReFrame keeps them: a study states what it expects of selected
experiments (`references:` in its config: experiment keys, one measure, a relative tolerance), and
a measured 95 % interval that lies wholly outside the reference band is a breach. `make check
CONFIG=…` exits non-zero on a breach, so a site can run it in its own CI after an upgrade."""

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from mpinet import MpinetError
from mpinet.analysis.baselines import notes as speedup_notes
from mpinet.analysis.baselines import reason_kinds
from mpinet.layout import runs_table, study_dir
from mpinet.study.config import MEASURES, SELECTORS, TOLERANCE, check_entries, matches

COLUMNS_OUT = [
    "reference",
    "selects",
    "configuration",
    "measure",
    "expected",
    "tolerance",
    "band_low",
    "band_high",
    "measured",
    "ci_low",
    "ci_high",
    "launches",
    "status",
    "note",
]


def evaluate(references: list, runs: pd.DataFrame) -> pd.DataFrame:
    """One row per reference and configuration it selects: the band, the measured median over seeds
    and launches, the widest 95 % interval of its experiments, and the status: `ok` (the interval
    meets the band), `breach` (wholly outside) or `no interval` (nothing measured to decide with)."""
    check_entries(references)
    rows = []
    for i, ref in enumerate(references or []):
        measure = next(m for m in MEASURES if m in ref)
        selects = {k: v for k, v in ref.items() if k in SELECTORS}
        chosen = runs[matches(runs, selects)]
        if chosen.empty:
            text = ", ".join(f"{k}={v}" for k, v in selects.items()) or "everything"
            raise MpinetError(f"references[{i}]: selects no experiment of the study ({text})")
        expected, tolerance = float(ref[measure]), float(ref.get("tolerance", TOLERANCE))
        low_band, high_band = expected * (1 - tolerance), expected * (1 + tolerance)
        config_keys = [c for c in SELECTORS if c != "seed" and c in chosen]  # a runs.csv before 0.10.0 lacks some
        for _, selected in chosen.groupby(config_keys, sort=True, dropna=False):
            g, note = _clean(selected, measure)
            lo = g[f"{measure}_ci_low"].min() if f"{measure}_ci_low" in g else math.nan
            hi = g[f"{measure}_ci_high"].max() if f"{measure}_ci_high" in g else math.nan
            if note and g.empty:
                status = "left out"
            elif pd.isna(lo) or pd.isna(hi):
                status = "no interval"
            else:
                status = "breach" if hi < low_band or lo > high_band else "ok"
            rows.append(
                {
                    "reference": i,
                    "selects": ", ".join(f"{k}={v}" for k, v in selects.items()),
                    "configuration": _name(selected.iloc[0]),
                    "measure": measure,
                    "expected": expected,
                    "tolerance": tolerance,
                    "band_low": low_band,
                    "band_high": high_band,
                    "measured": g[measure].median() if measure in g else math.nan,
                    "ci_low": lo,
                    "ci_high": hi,
                    "launches": len(g),
                    "status": status,
                    "note": note,
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS_OUT)


def _clean(g: pd.DataFrame, measure: str) -> tuple[pd.DataFrame, str]:
    """The runs a reference may check: no contended run, and for a speedup or efficiency none that a
    headline may not quote (runs.csv's speedup_note: mpinet.analysis.baselines); and what was left
    out and why."""
    empty = pd.Series("", index=g.index)
    if measure == "median_epoch_s":
        notes = g["contention"].where(g["contention"] == "contended", "") if "contention" in g else empty
    else:
        notes = speedup_notes(g)
    keep = notes == ""
    kinds = sorted({kind for n in notes[~keep] for kind in reason_kinds(n)})  # superlinear once, whatever its values
    note = f"{(~keep).sum()} of {len(g)} run(s) left out: {'; '.join(kinds)}"
    return g[keep], note if (~keep).any() else ""


def _name(run: pd.Series) -> str:
    return f"{run['dataset']} {run['algorithm']} {run['ranks']} ranks batch_size={run['batch_size']}"


def breach_lines(table: pd.DataFrame) -> list[str]:
    """One line per breach, with its interval and band, for the console summary and the report."""
    return [
        f"reference {r['reference']} breached: {r['configuration']}: {r['measure']} {r['measured']:.3g} "
        f"[{r['ci_low']:.3g}, {r['ci_high']:.3g}] outside {r['expected']:g} ± {r['tolerance']:.0%} "
        f"[{r['band_low']:.3g}, {r['band_high']:.3g}]"
        for _, r in table[table["status"] == "breach"].iterrows()
    ]


def main(argv=None) -> int:
    """python -m mpinet.analysis.references CONFIG: check the study's references; exit 1 on a breach, 2 when
    it cannot check (no runs.csv, an unreadable config), 0 when there are none. Every error line names
    the config file."""
    import yaml

    from mpinet.study.status import study_name

    p = argparse.ArgumentParser(
        prog="python -m mpinet.analysis.references",
        description="Check a study's measured intervals against the references: in its config (make check).",
    )
    p.add_argument("config", help="the study's config file, e.g. config/config.yaml")
    p.add_argument("--runs", help="its runs.csv (default: results/<study>/metrics/runs.csv)")
    a = p.parse_args(argv)
    try:
        with open(a.config) as f:
            config = yaml.safe_load(f) or {}
        if not isinstance(config, dict):
            raise MpinetError(f"expected a mapping of keys, got {type(config).__name__}")
        references = config.get("references") or []
        if not references:  # nothing to check is no failure: a site's CI may run it on every study
            print(f"{a.config}: no references to check (a list under references: gives some; docs/measuring.md)")
            return 0
        runs_csv = Path(a.runs) if a.runs else runs_table(study_dir(study_name(config, [a.config])))
        if not runs_csv.is_file():
            raise MpinetError(f"{runs_csv}: missing; run the study first (make run CONFIG={a.config})")
        try:
            runs = pd.read_csv(runs_csv)
        except (pd.errors.EmptyDataError, pd.errors.ParserError) as e:
            raise MpinetError(f"{runs_csv}: unreadable ({e}); make run CONFIG={a.config} writes it") from None
        table = evaluate(references, runs)
    except (MpinetError, OSError, yaml.YAMLError) as e:
        print(_error_line(a.config, e), file=sys.stderr)
        return 2
    print(console_table(table))
    lines = breach_lines(table)
    for line in lines:
        print(f"{a.config}: {line}", file=sys.stderr)
    print(f"\n{verdict_line(table)}")
    return 1 if lines else 0


def _error_line(config: str, e: Exception) -> str:
    """One line that starts with the config file (the study make check was given), then what is wrong."""
    why = f"{e.filename}: {e.strerror}" if isinstance(e, OSError) and e.filename else " ".join(str(e).split())
    return why if why.startswith(f"{config}:") else f"{config}: {why}"


def console_table(table: pd.DataFrame) -> str:
    """make check's table: each configuration's measure, band and status, and for a row whose runs
    were left out (wholly or in part) the note that says which and why."""
    columns = ["reference", "configuration", "measure", "expected", "measured", "ci_low", "ci_high", "status"]
    shown = table[columns + ["note"]].fillna({"note": ""})
    if not (shown["note"] != "").any():
        shown = shown[columns]
    return shown.to_string(index=False, float_format=lambda v: f"{v:.3g}", na_rep="-")


def verdict_line(table: pd.DataFrame) -> str:
    """How the references' rows came out, in one line (make check, the end-of-run summary, the report):
    the rows checked (a left-out row is not) by status, and the left-out rows apart."""
    status = table["status"]
    count = {s: int((status == s).sum()) for s in ("breach", "ok", "no interval", "left out")}
    return (
        f"{len(table) - count['left out']} checked: {count['breach']} breached, {count['ok']} within their band, "
        f"{count['no interval']} without an interval; {count['left out']} left out (no run they select may be "
        "quoted: see the note)"
    )


if __name__ == "__main__":
    raise SystemExit(main())
