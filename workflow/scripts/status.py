"""Snakemake adapter: print the study's experiments and their state (a copy goes to the log)."""

from pathlib import Path

from mpinet.study.status import status_table

sm = snakemake  # noqa: F821 (injected by Snakemake)
table = status_table(sm.params.experiments)
Path(sm.log[0]).write_text(table + "\n")
print(table)
