# Views of the study, run on demand and never part of `all`: `make status`, `make leftovers`.


rule status:
    log:
        f"logs/{STUDY}/status.log",
    localrule: True
    conda:
        "../envs/mpinet.yaml"
    params:
        experiments=lambda wildcards: GRID.status_rows(),
    message:
        f"Status of study {STUDY}"
    script:
        "../scripts/status.py"


rule record_study:
    output:
        f"{STUDY_DIR}/{LEFTOVERS_RECORD}",
    log:
        f"logs/{STUDY}/record_study.log",
    localrule: True
    params:
        # the study's run list: when it changes, the record is rewritten
        run_dirs=lambda wildcards: GRID.run_dirs(),
        code=job_code("mpinet.study.leftovers"),
    message:
        f"Recording the run directories of study {STUDY} (what make leftovers keeps)"
    run:
        write_record(output[0], params.run_dirs)


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
