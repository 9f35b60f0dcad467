import functools
import os
import re
import sys
import time
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import Paramspace, validate

# The workflow's own files are found next to this file (from any working directory, and as a
# module); the study's files (config, data, results) are relative to the working directory.
WORKFLOW_VERSION = re.search(
    r'__version__ = "(.+)"', Path(workflow.source_path("../../src/mpinet/__init__.py")).read_text()
)[1]
try:
    import mpinet
except ModuleNotFoundError:
    raise WorkflowError(
        f"the mpinet package is not installed in this Python ({sys.executable}); install the "
        f"workflow's own version {WORKFLOW_VERSION}: pip install <the mpinet checkout or its git URL at that tag>"
    ) from None
if mpinet.__version__ != WORKFLOW_VERSION:
    raise WorkflowError(
        f"this workflow is mpinet {WORKFLOW_VERSION} but the mpinet package in {sys.executable} is "
        f"{mpinet.__version__} ({Path(mpinet.__file__).parent}); install the workflow's version"
    )

from mpinet import MpinetError
from mpinet.datasets import dataset
from mpinet.engine import mpilib
from mpinet.launch import launcher, walltime
from mpinet.analysis.figures import FIGURES
from mpinet.fingerprints import FETCHING, NUMERICS, PREPARATION, SYNTHESIS, job_code, script_code
from mpinet.layout import (
    DATA_ROOT,
    RECORD_FILE,
    RUN_FILES,
    RUNS_ROOT,
    TRAIN_LOGS,
    TIMELINE_FILE,
    RunPaths,
    output_key,
    RESULTS_ROOT,
    runs_table,
    study_dir,
)
from mpinet.engine.checkpoint import remove_finished
from mpinet.engine.options import ALGORITHMS
from mpinet.launch.slurm import TrainingJob, check_fits, partitions, training_mem_per_cpu
from mpinet.datasets.sources import local_inputs, prepare_options, source_digest
from mpinet.study.config import check_study
from mpinet.study.experiments import COLUMNS, dropped_lines
from mpinet.study.grid import Grid
from mpinet.study.status import failures, study_name
from mpinet.analysis.summary import end_of_run
from mpinet.study.leftovers import RECORD as LEFTOVERS_RECORD, write_record
from mpinet.study.definitions import RECORD as DATASETS_RECORD
from mpinet.study.definitions import check_definitions, definitions, write_definitions

# One line naming the key for a bad config (mpinet.study.config); Snakemake's own validate then
# fills in the defaults.
SCHEMA = workflow.source_path("../schemas/config.schema.yaml")
try:
    EXPERIMENTS = check_study(config, SCHEMA, lambda d: dataset.prepared_size(f"{DATA_ROOT}/{d}"))
except MpinetError as e:
    raise WorkflowError(str(e)) from None
for line in dropped_lines(EXPERIMENTS):
    print(f"config: {line}", file=sys.stderr)
CONFIGFILES = workflow.config_settings.configfiles or [DEFAULT_CONFIG]
DEFINITIONS = definitions(config, CONFIGFILES)
validate(config, schema=SCHEMA)

# Training jobs whose times enter a speedup run one at a time: every training job claims one
# train_slot and there is one, unless `--resources train_slots=N` gives more (isolate_timing:
# false makes the jobs claim none). The SLURM profile isolates with whole nodes instead.
if "train_slots" not in workflow.global_resources:
    workflow.register_resource("train_slots", 1)
ISOLATE = config["isolate_timing"]
TRAIN_SLOTS = 1 if ISOLATE else 0
# recorded in run.json: how other training jobs were kept off this one's cores
ISOLATION = "one-at-a-time" if ISOLATE else "shared"

# The study's own tables, plots and report live under results/<study>/; the runs are shared, so
# an experiment that two studies list is trained once.
STUDY = study_name(config, CONFIGFILES)
workflow_start = time.time()
STUDY_DIR = str(study_dir(STUDY))
try:  # one dataset name, one definition among the studies that ran here (mpinet.study.definitions)
    check_definitions(STUDY, DEFINITIONS, RESULTS_ROOT)
except MpinetError as e:
    raise WorkflowError(f"config: {e}") from None

# Where an experiment's files live: <root>/<dataset>/<grid path> under the roots of mpinet.layout.
# One directory level per grid column under results/runs/<dataset>/ (dataset is its own level).
PARAMSPACE = Paramspace(EXPERIMENTS[list(COLUMNS)])
RUN = f"{{dataset}}/{PARAMSPACE.wildcard_pattern}"
DATASET_FILES = list(dataset.FILES)
# every figure of a dataset, from the package's one table (mpinet.analysis.figures)
PLOT_OUTPUT = {
    f.name: report(
        f"{STUDY_DIR}/plots/{{dataset}}/{f.name}.png",
        caption=f"../report/{f.name}.rst",
        category=f.category,
        subcategory="{dataset}",
        labels={"figure": f.label},
    )
    for f in FIGURES
}
DATASETS = sorted(EXPERIMENTS["dataset"].unique())
SYNTHETIC_ARCHIVE = "resources/synthetic/intel-synthetic.zip"
REPORT_DESCRIPTION = workflow.source_path("../report/workflow.rst")


wildcard_constraints:
    dataset="|".join(config["datasets"]),
    algorithm="|".join(ALGORITHMS),
    ranks=r"\d+",
    blas_threads=r"\d+",
    batch_size=r"\d+",
    epochs=r"\d+",
    train_samples=r"\d+",
    samples_per_rank=r"\d+",
    sync_every=r"\d+",
    seed=r"-?\d+",
    repeat=r"\d+",


# the study's grid: each run's row, arguments, priority and files by its name (mpinet.study.grid)
GRID = Grid.of(EXPERIMENTS)


def grid_path(wildcards):
    """<dataset>/<grid path> of a training job's wildcards."""
    return RUN.format(**dict(wildcards.items()))


def on_slurm():
    """Whether this invocation submits to SLURM: the executor says so once the DAG is built; a
    dry run with the SLURM profile says so by its pooling setting (it is planned as submitted)."""
    plugin = workflow.executor_plugin
    return (plugin is not None and plugin.name == "slurm") or pooled()


def in_slurm_job():
    """Whether this is the Snakemake inside a SLURM job (for an MPI job the plugin runs the rule with
    the local executor there): a resource must come out the same as at submission."""
    return "SLURM_JOB_ID" in os.environ


def get_final_targets():
    return [
        *rules.record_study.output,
        *rules.aggregate.output,
        *(f"{STUDY_DIR}/plots/{d}/{f.name}.png" for d in DATASETS for f in FIGURES),
    ]


def get_source(wildcards):
    """The dataset source as the fetch command takes it: synthetic:intel is the generated archive;
    bundled:iris stays a name (the package's copy enters by content hash, source_digest)."""
    source = config["datasets"][wildcards.dataset]["source"]
    return SYNTHETIC_ARCHIVE if source.startswith("synthetic:") else source


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


def get_bench_ranks(wildcards):
    """Ranks of the MPI microbenchmark: the study's largest count; locally no more than the cores
    here (a rank waiting on an oversubscribed core would slow the ping-pong it is timing)."""
    largest = int(EXPERIMENTS["ranks"].max())
    if on_slurm() or in_slurm_job():
        return max(2, largest)
    return max(2, min(largest, os.cpu_count() or 2))


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


def logged(command):
    """A training command with its output in the log and, when it fails, the run's error line (or
    the log's last lines) on the console too."""
    return (
        f"{command} > {{log:q}} 2>&1 "
        "|| {{ grep -m1 'mpinet.train: error' {log:q} >&2 || tail -n 3 {log:q} >&2; exit 1; }}"
    )
