# On SLURM, training jobs are pooled: a group job is one allocation whose members run one after
# another as job steps. The profile sizes the pools with Snakemake's own setting
# (`group-components: train=N`, N experiments per allocation; 1 is one job per experiment).
POOL_GROUP = "train"


def pooled():
    """Whether training jobs are pooled: the profile (or --group-components) sizes the `train`
    group. Known at parse time, so a dry run shows the allocations; inside a SLURM job the
    members run one by one and form no group."""
    return POOL_GROUP in workflow.group_settings.group_components and not in_slurm_job()


def pool_name(kind, threads, nodes):
    """One pool per kind of allocation, so a 1-rank run (no `mpi` resource, which every member of a
    group must share), a run over 2 nodes or one with 2 BLAS threads per rank never sizes the
    allocation of runs that need less. Every pool counts as the profile's `train` group."""
    name = f"{POOL_GROUP}-{kind}-t{threads}" + (f"-n{nodes}" if nodes else "")
    # Snakemake's own map of a group name to its --group-components entry (rules.py fills it for a
    # group named by a function; a pool's name is one): no public way to say it, kept by a test
    workflow.parent_groupids[name] = POOL_GROUP
    return name


def get_pool(wildcards):
    """The pool a training job joins (None unless pooled: locally groups would only serialise)."""
    if not pooled():
        return None
    kind = "mpi" if int(wildcards.ranks) > 1 else "single"
    return pool_name(kind, wildcards.blas_threads, GRID.nodes(grid_path(wildcards)))


def get_bench_pool(wildcards):
    """The MPI microbenchmark is timed alone too, so it joins the 1-thread MPI runs' pool."""
    return pool_name("mpi", 1, GRID.widest()) if pooled() else None
