"""Snakemake adapter: list (and with remove_leftovers=true delete) run directories no study lists."""

from pathlib import Path

from mpinet.status import leftovers_report

sm = snakemake  # noqa: F821 (injected by Snakemake)
p = sm.params
report = leftovers_report(Path(p.runs_root), Path(p.logs_root), {Path(d) for d in p.referenced}, p.delete)
Path(sm.log[0]).write_text(report + "\n")
print(report)
