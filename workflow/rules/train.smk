# Training: one job per experiment. 1-rank runs start without an MPI launcher (the SLURM
# plugin refuses `mpi` with one task); larger runs start under `{resources.mpi}`, which a
# profile swaps (mpiexec locally, srun on SLURM). Never cap `tasks` with --resources: it
# would silently shrink rank counts (the trainer's --expect-ranks check catches that).
# A failed run's one-line error (or its log's last lines) is repeated on stderr, so it reaches
# the console and not only the log.


# What the two training rules share, defined once. What reruns a job is its parameters and inputs,
# the numerics fingerprint among them: the workflow profile (profiles/default) leaves Snakemake's
# `code` trigger out, so these shell texts can be edited without retraining anything.
TRAIN_INPUT = {"data": multiext("resources/data/{dataset}/", *DATASET_FILES)}
TRAIN_OUTPUT = {output_key(f): f"{RUNS_ROOT}/{RUN}/{f}" for f in RUN_FILES}
TRAIN_LOG = f"{TRAIN_LOGS}/{RUN}.log"
TRAIN_BENCHMARK = f"results/benchmarks/train/{RUN}.tsv"
TRAIN_RESOURCES = {
    "mem_mb_per_cpu": get_mem_per_cpu,
    "runtime": get_runtime,
    "cpus_per_task": get_blas_threads,
    "train_slots": get_train_slots,
    "isolation": get_isolation,
}
TRAIN_PARAMS = {
    "data": get_data_dir,
    "out": get_run_dir,
    "options": get_run_options,
    "checkpoint": get_checkpoint,
    # a changed computation retrains; a comment, help text or run.json field does not
    "numerics": NUMERICS.value(),
}


rule train_single:
    input:
        **TRAIN_INPUT,
    output:
        **TRAIN_OUTPUT,
    log:
        TRAIN_LOG,
    benchmark:
        TRAIN_BENCHMARK
    wildcard_constraints:
        ranks="1",
        algorithm="serial|allreduce",
    priority: get_launch_priority
    group:
        get_pool
    conda:
        "../envs/mpinet.yaml"
    threads: get_cores
    resources:
        **TRAIN_RESOURCES,
    params:
        **TRAIN_PARAMS,
    message:
        "Training {wildcards.dataset}: {wildcards.algorithm} on 1 rank, seed {wildcards.seed}, launch {wildcards.repeat}"
    shell:
        logged(
            "python -m mpinet.train --data {params.data:q} --out {params.out:q} "
            "--checkpoint {params.checkpoint:q} --isolation {resources.isolation} {params.options}"
        )


rule train_mpi:
    input:
        **TRAIN_INPUT,
    output:
        **TRAIN_OUTPUT,
    log:
        TRAIN_LOG,
    benchmark:
        TRAIN_BENCHMARK
    wildcard_constraints:
        ranks=r"[2-9]|[1-9]\d+",
        algorithm="allreduce|paramserver",
    priority: get_launch_priority
    group:
        get_pool
    conda:
        "../envs/mpinet.yaml"
    threads: get_cores
    resources:
        **TRAIN_RESOURCES,
        mpi=get_mpi_launcher,
        tasks=get_ranks,
        nodes=get_nodes,
    params:
        **TRAIN_PARAMS,
    message:
        "Training {wildcards.dataset}: {wildcards.algorithm} on {wildcards.ranks} ranks, seed {wildcards.seed}, launch {wildcards.repeat}"
    shell:
        logged(
            "{resources.mpi} -n {resources.tasks} python -m mpi4py -m mpinet.train "
            "--data {params.data:q} --out {params.out:q} "
            "--checkpoint {params.checkpoint:q} --isolation {resources.isolation} {params.options} "
            "--launcher {resources.mpi:q}"
        )


rule commbench:
    output:
        f"{STUDY_DIR}/metrics/commbench.csv",
    log:
        f"logs/{STUDY}/commbench.log",
    group:
        get_bench_pool
    conda:
        "../envs/mpinet.yaml"
    threads: get_bench_ranks
    resources:
        mpi=get_mpi_launcher,
        tasks=get_bench_ranks,
        # seconds of ping-pong even across nodes; minutes on SLURM, added to its pool's time limit
        runtime=5,
        nodes=get_bench_nodes,
        train_slots=get_train_slots,
        isolation=get_isolation,
    params:
        max_bytes=64 << 20,
        code=job_code("mpinet.commbench"),
    message:
        "Measuring the cost of MPI messages here (alpha, beta) on {resources.tasks} ranks"
    shell:
        "{resources.mpi} -n {resources.tasks} python -m mpi4py -m mpinet.commbench "
        "--max-bytes {params.max_bytes} --out {output:q} > {log:q} 2>&1"
