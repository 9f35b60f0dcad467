"""Snakemake adapter: preprocess a fetched dataset into .npy arrays."""

from pathlib import Path

from mpinet.prepare import prepare_dataset
from mpinet.step import run_step

sm = snakemake  # noqa: F821 (injected by Snakemake)
out_dir = Path(sm.output[0]).parent
p = sm.params
run_step(sm.log[0], prepare_dataset, sm.input.raw, out_dir, p.fmt, p.options, p.source, workers=sm.threads)
