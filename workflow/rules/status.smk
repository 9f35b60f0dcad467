# Views of the study, run on demand and never part of `all`: `make status`, `make leftovers`.


rule status:
    log:
        f"logs/{STUDY}/status.log",
    localrule: True
    conda:
        "../envs/mpinet.yaml"
    params:
        experiments=lambda wildcards: GRID.status_rows(),
        # the experiments' rows, in the same order: each line's short label
        table=lambda wildcards: GRID.experiments,
        # a dataset's data jobs: a failed one is shown with its error line
        # (patterns with {dataset}: functions, so Snakemake does not fill them in)
        data_logs=lambda wildcards: {
            "fetch": str(rules.fetch.log[0]),
            "prepare": str(rules.prepare.log[0]),
        },
        prepared=lambda wildcards: [str(f) for f in rules.prepare.output],
    message:
        f"Status of study {STUDY}"
    script:
        "../scripts/status.py"


rule record_study:
    output:
        runs=f"{STUDY_DIR}/{LEFTOVERS_RECORD}",
        datasets=f"{STUDY_DIR}/{DATASETS_RECORD}",
    log:
        f"logs/{STUDY}/record_study.log",
    localrule: True
    params:
        # the study's run list: when it changes, the record is rewritten
        run_dirs=lambda wildcards: GRID.run_dirs(),
        # and its datasets' definitions (not the config file's name): another study defining one
        # differently is refused
        definitions={name: d["definition"] for name, d in DEFINITIONS.items()},
        code=job_code("mpinet.study.leftovers", "mpinet.study.definitions"),
    message:
        f"Recording the run directories and dataset definitions of study {STUDY}"
    run:
        write_record(output.runs, params.run_dirs)
        write_definitions(output.datasets, DEFINITIONS)


rule leftovers:
    log:
        "logs/leftovers.log",
    localrule: True
    conda:
        "../envs/mpinet.yaml"
    params:
        study_runs=lambda wildcards: GRID.run_dirs(),
        results_root="results",
        config_dir="config",
        schema=SCHEMA,
        runs_root=RUNS_ROOT,
        logs_root=TRAIN_LOGS,
        delete=lookup(dpath="remove_leftovers", within=config),
    message:
        "Run directories no study uses: none recorded in results/*/runs.txt or listed in config/"
    script:
        "../scripts/leftovers.py"
