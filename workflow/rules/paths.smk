# Where a study's files live: the run directories (one level per grid column), the figures, the
# grid's look-ups by run name, and the targets.


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


def get_final_targets():
    return [
        *rules.record_study.output,
        *rules.aggregate.output,
        *(f"{STUDY_DIR}/plots/{d}/{f.name}.png" for d in DATASETS for f in FIGURES),
        # a packed allocation's picture, once make slurm-pack has written its steps.csv (after the
        # allocation ended: the steps' account exists only then)
        *(rules.allocation.output if Path(steps_table(STUDY_DIR)).exists() else []),
    ]


def get_source(wildcards):
    """The dataset source as the fetch command takes it: synthetic:intel is the generated archive;
    bundled:iris stays a name (the package's copy enters by content hash, source_digest)."""
    source = config["datasets"][wildcards.dataset]["source"]
    return SYNTHETIC_ARCHIVE if source.startswith("synthetic:") else source
