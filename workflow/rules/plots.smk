rule plots:
    input:
        epochs=rules.aggregate.output.epochs,
        runs=rules.aggregate.output.runs,
        model=rules.aggregate.output.model,
        environment=rules.aggregate.output.environment,
        summary=f"{DATA_ROOT}/{{dataset}}/summary.json",
        confusions=lambda w: GRID.confusion_files(w.dataset),
        timelines=lambda w: GRID.dataset_files(w.dataset, TIMELINE_FILE),
    output:
        **PLOT_OUTPUT,
    log:
        f"logs/{STUDY}/plots/{{dataset}}.log",
    localrule: True
    conda:
        "../envs/mpinet.yaml"
    params:
        target_accuracy=lookup(dpath="target_accuracy", within=config),
        # the script and every package module it imports (mpinet.fingerprints)
        code=script_code(workflow.source_path("../scripts/plots.py")),
    message:
        "Plotting dataset {wildcards.dataset}"
    script:
        "../scripts/plots.py"


rule allocation:
    input:
        steps=steps_table(STUDY_DIR),
    output:
        figure=report(
            f"{STUDY_DIR}/plots/{ALLOCATION.name}.png",
            caption=f"../report/{ALLOCATION.name}.rst",
            category=ALLOCATION.category,
            labels={"figure": ALLOCATION.label},
        ),
    log:
        f"logs/{STUDY}/plots/{ALLOCATION.name}.log",
    localrule: True
    conda:
        "../envs/mpinet.yaml"
    params:
        # the script and every package module it imports (mpinet.fingerprints)
        code=script_code(workflow.source_path("../scripts/allocation.py")),
    message:
        "Drawing the packed allocation's job steps"
    script:
        "../scripts/allocation.py"
