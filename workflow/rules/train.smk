# Training: one job per experiment. 1-rank runs start without an MPI launcher (the SLURM
# plugin refuses `mpi` with one task; in a packed allocation srun makes them a step of their
# own); larger runs start under `{resources.mpi}`, which a profile swaps (mpiexec locally, srun
# on SLURM). Never cap `tasks` with --resources: it would silently shrink rank counts (the
# trainer's --expect-ranks check catches that).
# A failed run's one-line error (or its log's last lines) is repeated on stderr, so it reaches
# the console and not only the log.


# What the two training rules share, defined once. What reruns a job is its parameters and inputs,
# the numerics fingerprint among them: the workflow profile (profiles/default) leaves Snakemake's
# `code` trigger out, so these shell texts can be edited without retraining anything.
TRAIN_INPUT = {"data": multiext(f"{DATA_ROOT}/{{dataset}}/", *DATASET_FILES)}
TRAIN_OUTPUT = {output_key(f): f"{RUNS_ROOT}/{RUN}/{f}" for f in RUN_FILES}
TRAIN_LOG = f"{TRAIN_LOGS}/{RUN}.log"
TRAIN_BENCHMARK = f"results/benchmarks/train/{RUN}.tsv"
TRAIN_RESOURCES = {
    "mem_mb_per_cpu": get_mem_per_cpu,
    "runtime": get_runtime,
    # BLAS threads per rank: --cpus-per-task on SLURM
    "cpus_per_task": lambda w: int(w.blas_threads),
    "train_slots": get_train_slots,
    "isolation": get_isolation,
    # srun options of the run's own step in a packed allocation (make slurm-pack), '' elsewhere
    "step": get_step,
}
TRAIN_PARAMS = {
    "data": lambda w, input: str(Path(input.data[0]).parent),
    "out": lambda w, output: str(Path(output.metrics).parent),
    "options": lambda w: GRID.arguments(grid_path(w)),
    # kept outside the job's outputs, so Snakemake does not delete it when the job fails
    "checkpoint": lambda w: str(RunPaths(grid_path(w)).checkpoint),
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
        # every design but the parameter server (its rank 0 does not train) runs on one rank
        algorithm="|".join(a for a in ALGORITHMS if a != "paramserver"),
    priority: get_priority
    group:
        get_pool
    conda:
        "../envs/mpinet.yaml"
    # ranks x BLAS threads: locally, jobs never share cores
    threads: lambda w: int(w.ranks) * int(w.blas_threads)
    resources:
        **TRAIN_RESOURCES,
        launcher=get_single_launcher,
    params:
        **TRAIN_PARAMS,
    message:
        "Training {wildcards.dataset}: {wildcards.algorithm} on 1 rank, seed {wildcards.seed}, launch {wildcards.repeat}"
    shell:
        logged(
            "{resources.launcher} python -m mpinet.train --data {params.data:q} --out {params.out:q} "
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
        algorithm="|".join(a for a in ALGORITHMS if a != "serial"),
    priority: get_priority
    group:
        get_pool
    conda:
        "../envs/mpinet.yaml"
    # ranks x BLAS threads: locally, jobs never share cores
    threads: lambda w: int(w.ranks) * int(w.blas_threads)
    resources:
        **TRAIN_RESOURCES,
        mpi=get_mpi_launcher,
        tasks=lambda w: int(w.ranks),
        # nodes the ranks are spread over (--nodes on SLURM); None lets SLURM place them
        nodes=lambda w: GRID.nodes(grid_path(w)),
    params:
        **TRAIN_PARAMS,
    message:
        "Training {wildcards.dataset}: {wildcards.algorithm} on {wildcards.ranks} ranks, seed {wildcards.seed}, launch {wildcards.repeat}"
    shell:
        logged(
            "{resources.mpi} {resources.step} -n {resources.tasks} python -m mpi4py -m mpinet.train "
            "--data {params.data:q} --out {params.out:q} "
            "--checkpoint {params.checkpoint:q} --isolation {resources.isolation} {params.options} "
            "--launcher {resources.mpi:q}"
        )


rule commbench:
    input:
        # the study's data prepared (checked) first: a data error stops the study before any MPI
        # timing; ancient: re-prepared data does not remeasure the messages' cost
        data=ancient(expand(f"{DATA_ROOT}/{{dataset}}/summary.json", dataset=DATASETS)),
    output:
        f"{STUDY_DIR}/metrics/commbench.csv",
    log:
        f"logs/{STUDY}/commbench.log",
    priority: get_priority
    group:
        get_bench_pool
    conda:
        "../envs/mpinet.yaml"
    threads: get_bench_ranks
    resources:
        mpi=get_mpi_launcher,
        tasks=get_bench_ranks,
        # added to its pool's time limit
        runtime=COMMBENCH_MINUTES,
        # as many nodes as the widest experiment, so its ping-pong crosses the link those runs use
        nodes=GRID.widest(),
        train_slots=get_train_slots,
        isolation=get_isolation,
        step=get_step,
    params:
        max_bytes=64 << 20,
        code=job_code("mpinet.commbench"),
    message:
        "Measuring the cost of MPI messages here (alpha, beta) on {resources.tasks} ranks"
    shell:
        "{resources.mpi} {resources.step} -n {resources.tasks} python -m mpi4py -m mpinet.commbench "
        "--max-bytes {params.max_bytes} --out {output:q} > {log:q} 2>&1"
