# Views of the study, run on demand and never part of `all`: `make status`, `make leftovers`.


rule status:
    log:
        f"logs/{STUDY}/status.log",
    localrule: True
    conda:
        "../envs/mpinet.yaml"
    params:
        experiments=study_experiments(),
    message:
        "Status of study {STUDY}"
    script:
        "../scripts/status.py"


rule leftovers:
    log:
        "logs/leftovers.log",
    localrule: True
    conda:
        "../envs/mpinet.yaml"
    params:
        referenced=all_studies_run_dirs(),
        runs_root=RUNS_ROOT,
        logs_root=TRAIN_LOGS,
        delete=lookup(dpath="remove_leftovers", within=config),
    message:
        "Run directories no study in config/ refers to"
    script:
        "../scripts/leftovers.py"


onsuccess:
    print_summary()


onerror:
    print_failures()
