"""Snakemake adapter: fetch and unpack one dataset source."""

from mpinet.fetch import fetch
from mpinet.step import run_step

sm = snakemake  # noqa: F821 (injected by Snakemake)
run_step(sm.log[0], fetch, sm.params.source, sm.output[0], sha256=sm.params.sha256)
