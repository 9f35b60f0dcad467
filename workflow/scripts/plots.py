"""Snakemake adapter: draw one dataset's figures."""

from mpinet.plots import plot_dataset
from mpinet.step import run_step

sm = snakemake  # noqa: F821 (injected by Snakemake)
i = sm.input
out = {name: sm.output[name] for name in sm.output.keys()}
target = sm.params.target_accuracy
run_step(sm.log[0], plot_dataset, sm.wildcards.dataset, i.epochs, i.runs, i.summary, i.confusions, out, target, i.model)
