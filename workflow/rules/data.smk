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
        synthesis=SYNTHESIS.value(),
    message:
        "Drawing the synthetic Intel-layout image archive"
    shell:
        "python -m mpinet.datacli synthetic {output:q} --train-per-class {params.train_per_class} "
        "--test-per-class {params.test_per_class} --pred-count {params.pred_count} "
        "--size {params.size} --seed {params.seed} --log {log:q}"


rule fetch:
    input:
        # a local source's files: changing, adding or removing one reruns everything downstream
        lambda w: local_inputs(get_source(w)),
    output:
        directory(f"{RAW_ROOT}/{{dataset}}"),
    log:
        "logs/data/fetch_{dataset}.log",
    localrule: True
    conda:
        "../envs/mpinet.yaml"
    params:
        source=get_source,
        sha256=lambda w: config["datasets"][w.dataset].get("sha256", ""),
        bundled=lambda w: source_digest(get_source(w)),
        # what the fetched files depend on besides the source: the fetching code's fingerprint
        fetching=FETCHING.value(),
    message:
        "Fetching dataset {wildcards.dataset} from {params.source}"
    shell:
        "python -m mpinet.datacli fetch {params.source:q} {output:q} --sha256={params.sha256:q} --log {log:q}"


rule prepare:
    input:
        raw=f"{RAW_ROOT}/{{dataset}}",
    output:
        multiext(f"{DATA_ROOT}/{{dataset}}/", *DATASET_FILES),
    log:
        "logs/data/prepare_{dataset}.log",
    conda:
        "../envs/mpinet.yaml"
    threads: 2
    params:
        out=f"{DATA_ROOT}/{{dataset}}",
        fmt=lambda w: config["datasets"][w.dataset]["format"],
        options=lambda w: prepare_options(config["datasets"][w.dataset]),
        source=get_source,
        # the preparing code's fingerprint, of this dataset's format
        preparation=lambda w: PREPARATION[config["datasets"][w.dataset]["format"]].value(),
    message:
        "Preprocessing dataset {wildcards.dataset} into .npy arrays"
    # the command writes its log itself (--log) and prints its one-line error, naming the user's
    # source rather than the copy in resources/raw, with the log's path: the command Snakemake
    # repeats when the job fails is just the command
    shell:
        "python -m mpinet.datacli prepare {input.raw:q} {params.out:q} --log {log:q} --format {params.fmt} "
        "--source {params.source:q} --workers {threads} --options {params.options:q}"
