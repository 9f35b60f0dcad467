"""Snakemake adapter: draw the synthetic Intel-layout archive."""

from mpinet.step import run_step
from mpinet.synthetic import make_archive

p = snakemake.params  # noqa: F821 (injected by Snakemake)
run_step(
    snakemake.log[0],  # noqa: F821
    make_archive,
    snakemake.output[0],  # noqa: F821
    p.train_per_class,
    p.test_per_class,
    p.pred_count,
    p.size,
    p.seed,
)
