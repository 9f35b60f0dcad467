"""Snakemake adapter: build the metrics tables."""

from mpinet.aggregate import write_tables
from mpinet.step import run_step

sm = snakemake  # noqa: F821 (injected by Snakemake)
o = sm.output
run_step(sm.log[0], write_tables, sm.params.runs, sm.params.target_accuracy, o.epochs, o.runs, o.seeds)
