"""Snakemake adapter: draw the study's packed allocation from its steps.csv."""

from mpinet.adapters import run_script
from mpinet.analysis.allocation import plot_allocation

sm = snakemake  # noqa: F821 (injected by Snakemake)
run_script(sm.log[0], plot_allocation, steps_csv=sm.input.steps, out=sm.output.figure)
