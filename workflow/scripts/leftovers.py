"""Snakemake adapter: list (and with remove_leftovers=true delete) run directories no study uses."""

from pathlib import Path

from mpinet.adapters import run_script
from mpinet.study.leftovers import leftovers_report, referenced

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params


def report() -> str:
    keep = referenced(Path(p.results_root), Path(p.config_dir), Path(p.schema), p.runs_root, p.study_runs)
    return leftovers_report(Path(p.runs_root), Path(p.logs_root), keep, p.delete)


text = run_script(sm.log[0], report)
Path(sm.log[0]).write_text(text + "\n")
print(text)
