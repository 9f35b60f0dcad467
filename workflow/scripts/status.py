"""Snakemake adapter: print the study's experiments and their state (a copy goes to the log)."""

from pathlib import Path

from mpinet.study.status import status_table

sm = snakemake  # noqa: F821 (injected by Snakemake)
table = status_table(
    experiments=sm.params.experiments,
    table=sm.params.table,
    data_logs=sm.params.data_logs,
    prepared=sm.params.prepared,
)
Path(sm.log[0]).write_text(table + "\n")
print(table)
