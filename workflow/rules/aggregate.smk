rule aggregate:
    input:
        lambda w: GRID.run_files(),
        bench=rules.commbench.output[0],
    output:
        epochs=report(
            f"{STUDY_DIR}/metrics/epochs.csv",
            caption="../report/epochs.rst",
            category="Tables",
            labels={"table": "per epoch"},
        ),
        runs=report(
            str(runs_table(STUDY_DIR)),
            caption="../report/runs.rst",
            category="Tables",
            labels={"table": "per run"},
        ),
        model=report(
            f"{STUDY_DIR}/metrics/model.csv",
            caption="../report/model.rst",
            category="Tables",
            labels={"table": "cost model predictions"},
        ),
        front_page=f"{STUDY_DIR}/report.rst",
        references=report(
            f"{STUDY_DIR}/metrics/references.csv",
            caption="../report/references.rst",
            category="Tables",
            labels={"table": "references checked"},
        ),
        seeds=report(
            f"{STUDY_DIR}/metrics/seeds.csv",
            caption="../report/seeds.rst",
            category="Tables",
            labels={"table": "per configuration (seeds summarized)"},
        ),
        environment=report(
            f"{STUDY_DIR}/metrics/environment.csv",
            caption="../report/environment.rst",
            category="Tables",
            labels={"table": "where it ran"},
        ),
        accounting=report(
            f"{STUDY_DIR}/metrics/accounting.csv",
            caption="../report/accounting.rst",
            category="Tables",
            labels={"table": "SLURM accounting"},
        ),
    log:
        f"logs/{STUDY}/aggregate.log",
    localrule: True
    conda:
        "../envs/mpinet.yaml"
    params:
        runs=lambda w: GRID.runs(),
        n_runs=len(GRID.names),
        study=STUDY,
        # its text, not the file: a module's copy lives in Snakemake's source cache, renewed every run
        description=Path(REPORT_DESCRIPTION).read_text(),
        target_accuracy=lookup(dpath="target_accuracy", within=config),
        references=config.get("references", []),
        # the script and every package module it imports (mpinet.fingerprints)
        code=script_code(workflow.source_path("../scripts/aggregate.py")),
    message:
        "Aggregating the metrics of {params.n_runs} runs"
    script:
        "../scripts/aggregate.py"
