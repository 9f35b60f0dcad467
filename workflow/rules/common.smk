from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import Paramspace, validate

from mpinet import MpinetError
from mpinet.cluster import TrainingJob, check_fits, partitions
from mpinet.fetch import local_files, source_error
from mpinet.experiments import COLUMNS, config_error, expand_sweeps, train_arguments

# One line naming the key for a bad config; Snakemake's own validate then fills in the defaults.
SCHEMA = Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml"
if message := config_error(config, SCHEMA):
    raise WorkflowError(message)
validate(config, schema="../schemas/config.schema.yaml")
for name, entry in config["datasets"].items():
    if message := source_error(name, entry):
        raise WorkflowError(f"config: {message}")

try:
    EXPERIMENTS = expand_sweeps(config["experiments"], config["datasets"])
except MpinetError as e:
    raise WorkflowError(f"config: {e}") from None

# One directory level per grid column under results/runs/<dataset>/ (dataset is its own level).
PARAMSPACE = Paramspace(EXPERIMENTS[list(COLUMNS)])
RUN = f"{{dataset}}/{PARAMSPACE.wildcard_pattern}"
RUN_FILES = ["metrics.csv", "confusion.csv", "weights.npz", "run.json"]
DATASET_FILES = [
    "train_x.npy",
    "train_y.npy",
    "test_x.npy",
    "test_y.npy",
    "classes.json",
    "summary.json",
]
FIGURES = [
    "curves",
    "scaling",
    "time_split",
    "time_to_accuracy",
    "confusion",
    "class_counts",
]
DATASETS = sorted(EXPERIMENTS["dataset"].unique())
SYNTHETIC_ARCHIVE = "resources/synthetic/intel-synthetic.zip"
CODE = Path(workflow.basedir) / "src" / "mpinet"


wildcard_constraints:
    dataset="|".join(config["datasets"]),
    algorithm="serial|allreduce|paramserver",
    ranks=r"\d+",
    batch_size=r"\d+",
    epochs=r"\d+",
    sync_every=r"\d+",
    seed=r"-?\d+",


def code(*modules):
    """Package modules as job inputs: editing one reruns exactly the jobs that import it."""
    return [str(CODE / m) for m in ("__init__.py", *modules)]


def run_dirs():
    """results/runs/<dataset>/<grid path> of every experiment, in table order."""
    return [
        f"results/runs/{d}/{p}"
        for d, p in zip(EXPERIMENTS["dataset"], PARAMSPACE.instance_patterns)
    ]


def get_final_targets():
    return [
        "results/metrics/epochs.csv",
        "results/metrics/runs.csv",
        "results/metrics/seeds.csv",
        *(f"results/plots/{d}/{f}.png" for d in DATASETS for f in FIGURES),
    ]


def dataset_option(key, default=None):
    """An option of the {dataset} wildcard's config entry, as a params function."""
    return lambda wildcards: config["datasets"][wildcards.dataset].get(key, default)


def get_source(wildcards):
    """The dataset source with synthetic:intel replaced by the generated archive."""
    source = config["datasets"][wildcards.dataset]["source"]
    return SYNTHETIC_ARCHIVE if source.startswith("synthetic:") else source


def get_fetch_input(wildcards):
    """A local source's files are inputs, so changing, adding or removing one reruns everything downstream."""
    source = get_source(wildcards)
    if source.startswith(("http://", "https://", "kaggle:")):
        return []
    return local_files(source)


def get_dataset_options(wildcards):
    entry = dict(config["datasets"][wildcards.dataset])
    entry.pop("source")
    return entry


def get_ranks(wildcards):
    """MPI ranks of a training job: its `tasks`, and locally its `threads` so MPI jobs don't share cores."""
    return int(wildcards.ranks)


def get_run_options(wildcards):
    """The row of the experiment table for these wildcards, as python -m mpinet.train options."""
    return train_arguments(PARAMSPACE.instance(wildcards))


def get_mem_per_rank(wildcards, input):
    """MB per rank: its shard of the training array, the whole test array (every rank evaluates its
    share through the same memory map) and 300 MB of Python, numpy and MPI."""
    sizes = {Path(f).name: Path(f).stat().st_size / 2**20 for f in input.data if Path(f).exists()}
    shard = sizes.get("train_x.npy", 0) / max(1, int(wildcards.ranks))
    return int(shard + sizes.get("test_x.npy", 0) + 300)


def get_data_dir(wildcards, input):
    """The prepared dataset's directory, from the training job's own inputs."""
    return str(Path(input.data[0]).parent)


def get_run_dir(wildcards, output):
    return str(Path(output.metrics).parent)


def get_checkpoint(wildcards):
    """Kept outside the job's outputs, so Snakemake does not delete it when the job fails."""
    return f"results/checkpoints/{RUN.format(**dict(wildcards.items()))}/checkpoint.npz"


def get_runs(wildcards):
    """Every experiment's parameters and output directory, for the aggregation."""
    records = EXPERIMENTS.to_dict("records")
    return [dict(r, dir=d) for r, d in zip(records, run_dirs())]


def get_run_files(wildcards):
    return [f"{d}/{f}" for d in run_dirs() for f in ("metrics.csv", "run.json")]


def get_dataset_run_files(wildcards):
    return [
        f"{d}/confusion.csv"
        for d, ds in zip(run_dirs(), EXPERIMENTS["dataset"])
        if ds == wildcards.dataset
    ]


def check_slurm_fit():
    """On SLURM, a training job no node set of its partition can hold is an error before submission."""
    plugin = workflow.executor_plugin
    if plugin is None or plugin.name != "slurm":
        return
    jobs = [
        TrainingJob(
            f"results/runs/{RUN.format(**dict(job.wildcards.items()))}",
            int(job.wildcards.ranks),
            partition=job.resources.get("slurm_partition"),
        )
        for job in workflow.dag.needrun_jobs()
        if job.rule.name in ("train_single", "train_mpi")
    ]
    try:
        check_fits(jobs, *partitions())
    except MpinetError as e:
        raise WorkflowError(f"SLURM: {e}") from None


onstart:
    check_slurm_fit()
