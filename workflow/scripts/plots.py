"""Snakemake adapter: draw one dataset's figures."""

from mpinet.adapters import run_script
from mpinet.analysis.plots import plot_dataset

sm = snakemake  # noqa: F821 (injected by Snakemake)
i = sm.input
out = {name: sm.output[name] for name in sm.output.keys()}
target = sm.params.target_accuracy
tables = (i.epochs, i.runs, i.summary, i.confusions)
run_script(sm.log[0], plot_dataset, sm.wildcards.dataset, *tables, out, target, i.model, i.environment)
