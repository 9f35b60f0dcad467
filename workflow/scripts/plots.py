"""Snakemake adapter: draw one dataset's figures."""

from mpinet.adapters import run_script
from mpinet.analysis.plots import FigureInputs, plot_dataset

sm = snakemake  # noqa: F821 (injected by Snakemake)
i = sm.input
inputs = FigureInputs(
    epochs=i.epochs,
    runs=i.runs,
    summary=i.summary,
    confusions=list(i.confusions),
    model=i.model,
    environment=i.environment,
)
out = {name: sm.output[name] for name in sm.output.keys()}
run_script(sm.log[0], plot_dataset, sm.wildcards.dataset, inputs, out, target=sm.params.target_accuracy)
