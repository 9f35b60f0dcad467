"""Snakemake adapter: build the metrics tables."""

from mpinet.adapters import run_script
from mpinet.analysis.aggregate import Study, Tables, write_tables

sm = snakemake  # noqa: F821 (injected by Snakemake)
o = sm.output
tables = Tables(
    epochs=o.epochs,
    runs=o.runs,
    seeds=o.seeds,
    model=o.model,
    references=o.references,
    environment=o.environment,
    accounting=o.accounting,
    front_page=o.front_page,
)
study = Study(
    name=sm.params.study,
    description=sm.params.description,
    references=sm.params.references,
    bench_csv=sm.input.bench,
)
run_script(sm.log[0], write_tables, sm.params.runs, sm.params.target_accuracy, tables, study)
