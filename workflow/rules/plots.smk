rule plots:
    input:
        epochs=rules.aggregate.output.epochs,
        runs=rules.aggregate.output.runs,
        model=rules.aggregate.output.model,
        summary="resources/data/{dataset}/summary.json",
        confusions=get_dataset_run_files,
    output:
        curves=report(
            f"{STUDY_DIR}/plots/{{dataset}}/curves.png",
            caption="../report/curves.rst",
            category="Training curves",
            subcategory="{dataset}",
            labels={"figure": "loss and accuracy"},
        ),
        data_size=report(
            f"{STUDY_DIR}/plots/{{dataset}}/data_size.png",
            caption="../report/data_size.rst",
            category="Training curves",
            subcategory="{dataset}",
            labels={"figure": "by training-set size"},
        ),
        time_to_accuracy=report(
            f"{STUDY_DIR}/plots/{{dataset}}/time_to_accuracy.png",
            caption="../report/time_to_accuracy.rst",
            category="Training curves",
            subcategory="{dataset}",
            labels={"figure": "time to accuracy"},
        ),
        confusion=report(
            f"{STUDY_DIR}/plots/{{dataset}}/confusion.png",
            caption="../report/confusion.rst",
            category="Training curves",
            subcategory="{dataset}",
            labels={"figure": "confusion matrix"},
        ),
        scaling=report(
            f"{STUDY_DIR}/plots/{{dataset}}/scaling.png",
            caption="../report/scaling.rst",
            category="Scaling",
            subcategory="{dataset}",
            labels={"figure": "speedup and efficiency"},
        ),
        time_split=report(
            f"{STUDY_DIR}/plots/{{dataset}}/time_split.png",
            caption="../report/time_split.rst",
            category="Scaling",
            subcategory="{dataset}",
            labels={"figure": "compute vs communication"},
        ),
        class_counts=report(
            f"{STUDY_DIR}/plots/{{dataset}}/class_counts.png",
            caption="../report/class_counts.rst",
            category="Data",
            subcategory="{dataset}",
            labels={"figure": "samples per class"},
        ),
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
