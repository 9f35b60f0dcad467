# What a job asks for and how it runs: on SLURM or not, memory, runtime, the MPI launcher and
# its log.


def on_slurm():
    """Whether this invocation submits to SLURM: the executor says so once the DAG is built; a
    dry run with the SLURM profile says so by its pooling setting (it is planned as submitted)."""
    plugin = workflow.executor_plugin
    return (plugin is not None and plugin.name == "slurm") or pooled()


def in_slurm_job():
    """Whether this is the Snakemake inside a SLURM job (for an MPI job the plugin runs the rule with
    the local executor there): a resource must come out the same as at submission."""
    return "SLURM_JOB_ID" in os.environ


def packed():
    """The isolation of the job steps of a `make slurm-pack` allocation (launcher.PACK_MODES; its
    batch script sets it), '' anywhere else."""
    return os.environ.get(launcher.PACK_ENV, "") if in_slurm_job() else ""


def get_isolation(wildcards):
    """Recorded in run.json: how other training jobs were kept off this one's cores."""
    return packed() or ISOLATION


def get_train_slots(wildcards):
    """Training slots a job claims: locally one per job (or none, isolate_timing: false); in a
    packed allocation, which has one slot per node, its step's whole nodes (none when shared)."""
    if packed() == "exclusive-node":
        return get_step_nodes(wildcards)
    return 0 if packed() else TRAIN_SLOTS


def get_step_nodes(wildcards):
    """Nodes of a training's (or the microbenchmark's) step in a packed allocation."""
    if "ranks" in wildcards.keys():
        w = wildcards
        ranks, threads, nodes = int(w.ranks), int(w.blas_threads), GRID.nodes(grid_path(w))
    else:
        ranks, threads, nodes = get_bench_ranks(wildcards), 1, GRID.widest()
    return launcher.step_nodes(ranks, threads, nodes, launcher.allocation_node_cpus())


def get_priority(wildcards, input, attempt):
    """A job's place in the queue: a training's launch order (GRID.priorities); in a packed allocation
    the widest steps first, the longest estimate first among a width, the microbenchmark first."""
    bench = "ranks" not in wildcards.keys()
    if not packed():
        return 0 if bench else GRID.priorities[grid_path(wildcards)]
    if bench:
        return launcher.step_priority(get_step_nodes(wildcards), float("inf"))
    paths = RunPaths(grid_path(wildcards))
    row, data = GRID.rows[paths.name], Path(input.data[0]).parent
    seconds = walltime.expected_seconds(row, data, paths.checkpoint, *calibration())
    return launcher.step_priority(get_step_nodes(wildcards), seconds)


def get_step(wildcards, input, attempt):
    """srun options of the job's own step in a packed allocation ('' elsewhere): its nodes (whole
    unless steps share nodes), its own time limit and, as its name in sacct, the run's name."""
    if not packed():
        return ""
    if "ranks" in wildcards.keys():
        name, minutes = RunPaths(grid_path(wildcards)).name, get_runtime(wildcards, input, attempt)
    else:
        name, minutes = "commbench", COMMBENCH_MINUTES
    whole = packed() == "exclusive-node"
    return launcher.step_options(get_step_nodes(wildcards), minutes, name, whole)


def get_single_launcher(wildcards, input, attempt):
    """What starts a 1-rank run: nothing (the job's own process), but in a packed allocation a job
    step of its own, so SLURM places it on a free node and not on the batch script's."""
    if not packed():
        return ""
    threads = int(wildcards.blas_threads)
    return f"{launcher.srun_command(mpi_library(), threads)} {get_step(wildcards, input, attempt)} -n 1"


def get_mem_per_cpu(wildcards, input):
    """MB per CPU of a training job, sized from its prepared data (mpinet.launch.slurm.training_mem_per_cpu)."""
    return training_mem_per_cpu(
        input.data,
        int(wildcards.ranks),
        int(wildcards.blas_threads),
        wildcards.algorithm,
        int(wildcards.batch_size),
        wildcards.dtype,
    )


@functools.cache
def calibration():
    """The study's earlier runs.csv and measured link: the cost model the time limits come from."""
    return walltime.calibration(Path(STUDY_DIR))


def get_runtime(wildcards, input, attempt):
    """Minutes a training job asks SLURM for (mpinet.launch.walltime): from its own earlier epochs, the
    calibrated cost model or the network's size, with a safety factor; a pool asks for the sum."""
    paths = RunPaths(grid_path(wildcards))
    row, data = GRID.rows[paths.name], Path(input.data[0]).parent
    return walltime.request(row, data, paths.checkpoint, *calibration(), attempt)


def mpi_library():
    """The MPI library mpi4py loads here (MPICH, Open MPI or Intel MPI), asked once."""
    try:
        lib = mpilib.library()
        if not (on_slurm() or in_slurm_job()):
            launcher.check_mpiexec(lib)
    except MpinetError as e:
        raise WorkflowError(f"MPI: {e}") from None
    return lib


def get_mpi_launcher(wildcards):
    """The launcher line for the MPI library in use: on SLURM srun with that library's PMI; locally
    its mpiexec, binding each rank to a core when jobs run alone and the ranks fit the cores
    (steadier epoch times), oversubscribing when they do not."""
    lib = mpi_library()
    threads = int(wildcards.get("blas_threads", 1))
    if on_slurm() or in_slurm_job():
        return launcher.srun_command(lib, threads)
    ranks = int(wildcards.ranks) if "ranks" in wildcards.keys() else get_bench_ranks(wildcards)
    bind = ISOLATE and threads == 1
    return launcher.mpiexec_command(lib, ranks, os.cpu_count() or 1, bind, os.geteuid() == 0)


COMMBENCH_MINUTES = 5  # seconds of timings even across nodes; minutes on SLURM


def get_bench_ranks(wildcards):
    """Ranks of the MPI microbenchmark: the study's largest count; locally no more than the cores
    here (a rank waiting on an oversubscribed core would slow the ping-pong it is timing)."""
    largest = int(EXPERIMENTS["ranks"].max())
    if on_slurm() or in_slurm_job():
        return max(2, largest)
    return max(2, min(largest, os.cpu_count() or 2))


def logged(command):
    """A training command with its output in the log and, when it fails, the run's error line (or
    the log's last lines) on the console too."""
    return (
        f"{command} > {{log:q}} 2>&1 "
        "|| {{ grep -m1 'mpinet.train: error' {log:q} >&2 || tail -n 3 {log:q} >&2; exit 1; }}"
    )
