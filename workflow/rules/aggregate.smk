rule aggregate:
    input:
        get_run_files,
        code=code("aggregate.py", "experiments.py"),
    output:
        epochs=report(
            "results/metrics/epochs.csv",
            caption="../report/epochs.rst",
            category="Tables",
            labels={"table": "per epoch"},
        ),
        runs=report(
            "results/metrics/runs.csv",
            caption="../report/runs.rst",
            category="Tables",
            labels={"table": "per run"},
        ),
        seeds=report(
            "results/metrics/seeds.csv",
            caption="../report/seeds.rst",
            category="Tables",
            labels={"table": "per configuration (seeds summarized)"},
        ),
    log:
        "logs/aggregate.log",
    localrule: True
    conda:
        "../envs/mpinet.yaml"
    params:
        runs=get_runs,
        target_accuracy=lookup(dpath="target_accuracy", within=config, default=0.9),
    message:
        "Aggregating the metrics of {input} runs"
    script:
        "../scripts/aggregate.py"
