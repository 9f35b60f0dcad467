rule make_synthetic:
    output:
        SYNTHETIC_ARCHIVE,
    log:
        "logs/data/make_synthetic.log",
    localrule: True
    conda:
        "../envs/mpinet.yaml"
    params:
        train_per_class=lookup(dpath="synthetic/train_per_class", within=config),
        test_per_class=lookup(dpath="synthetic/test_per_class", within=config),
        pred_count=lookup(dpath="synthetic/pred_count", within=config),
        size=lookup(dpath="synthetic/size", within=config),
        seed=lookup(dpath="synthetic/seed", within=config),
    message:
        "Drawing the synthetic Intel-layout image archive"
    script:
        "../scripts/make_synthetic.py"


rule fetch:
    input:
        get_fetch_input,
        code=code("fetch.py"),
    output:
        directory("resources/raw/{dataset}"),
    log:
        "logs/data/fetch_{dataset}.log",
    localrule: True
    conda:
        "../envs/mpinet.yaml"
    params:
        source=get_source,
        sha256=dataset_option("sha256"),
    message:
        "Fetching dataset {wildcards.dataset} from {params.source}"
    script:
        "../scripts/fetch.py"


rule prepare:
    input:
        raw="resources/raw/{dataset}",
        code=code("prepare.py", "tables.py", "images.py", "dataset.py"),
    output:
        multiext("resources/data/{dataset}/", *DATASET_FILES),
    log:
        "logs/data/prepare_{dataset}.log",
    conda:
        "../envs/mpinet.yaml"
    threads: 2
    params:
        fmt=dataset_option("format"),
        options=get_dataset_options,
        source=get_source,
    message:
        "Preprocessing dataset {wildcards.dataset} into .npy arrays"
    script:
        "../scripts/prepare.py"
