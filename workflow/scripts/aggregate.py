"""Snakemake adapter: build the metrics tables."""

from mpinet.adapters import run_script
from mpinet.analysis.aggregate import write_tables

sm = snakemake  # noqa: F821 (injected by Snakemake)
o = sm.output
target = sm.params.target_accuracy
front_page = (sm.params.description, sm.params.study, o.front_page)
tables = (o.epochs, o.runs, o.seeds, sm.input.bench, o.model, front_page, sm.params.references, o.references)
extra = {"environment_csv": o.environment, "accounting_csv": o.accounting}
run_script(sm.log[0], write_tables, sm.params.runs, target, *tables, **extra)
