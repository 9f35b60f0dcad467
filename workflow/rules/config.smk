# The study's config, checked before anything runs: the package's version, the schema and the
# sweeps, the datasets' definitions among the studies here, timing isolation and the study's name.

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
from mpinet.analysis.figures import ALLOCATION, FIGURES, steps_table
from mpinet.fingerprints import FETCHING, NUMERICS, PREPARATION, SYNTHESIS, job_code, script_code
from mpinet.layout import (
    DATA_ROOT,
    RAW_ROOT,
    RECORD_FILE,
    RUN_FILES,
    RUNS_ROOT,
    TRAIN_LOGS,
    TIMELINE_FILE,
    RunPaths,
    output_key,
    RESULTS_ROOT,
    SYNTHETIC_ARCHIVE,
    runs_table,
    study_dir,
)
from mpinet.engine.checkpoint import remove_finished
from mpinet.engine.options import ALGORITHMS
from mpinet.launch.slurm import TrainingJob, check_fits, partitions, training_mem_per_cpu
from mpinet.datasets.sources import local_inputs, prepare_options, source_digest
from mpinet.datasets.origin import missing_source
from mpinet.study.config import check_study, config_source
from mpinet.study.experiments import COLUMNS, dropped_lines
from mpinet.study.oversubscription import TRAINS_ELSEWHERE, oversubscription_lines
from mpinet.study.grid import Grid
from mpinet.study.status import failures, study_name
from mpinet.analysis.summary import end_of_run
from mpinet.study.leftovers import RECORD as LEFTOVERS_RECORD, write_record
from mpinet.study.definitions import RECORD as DATASETS_RECORD
from mpinet.study.definitions import check_definitions, definitions, write_definitions

# A bad config: one line per problem naming the config file and the key (mpinet.study.config),
# printed as it is and exit 1, with no WorkflowError frame around it; Snakemake's own validate then
# fills in the defaults.
SCHEMA = workflow.source_path("../schemas/config.schema.yaml")
CONFIGFILES = workflow.config_settings.configfiles or [DEFAULT_CONFIG]
try:
    EXPERIMENTS = check_study(
        config,
        SCHEMA,
        lambda d: dataset.prepared_size(f"{DATA_ROOT}/{d}"),
        source=config_source(CONFIGFILES),
    )
except MpinetError as e:
    print(e, file=sys.stderr)
    sys.exit(1)
# a local source that is not there, named as written (not a MissingInputException of a fetch job);
# by the main Snakemake only: a job's own Snakemake (a cluster node's) need not see the user's files
SOURCES = config["datasets"].items() if workflow.is_main_process else []
if missing := [m for d, e in SOURCES if (m := missing_source(d, e.get("source", "")))]:
    print("\n".join(f"{config_source(CONFIGFILES)}: {m}" for m in missing), file=sys.stderr)
    sys.exit(1)
for line in dropped_lines(EXPERIMENTS):
    print(f"config: {line}", file=sys.stderr)
# more ranks than this machine's cores: said once, by the main process (not a `run:` job's), and
# not for SLURM (which its profile's pools mean), whose nodes run the jobs, nor by a Snakemake that
# trains nothing here (a report; a SLURM launcher's data and tables on the login node)
LOCAL_PLAN = workflow.is_main_process and not (
    "SLURM_JOB_ID" in os.environ
    or workflow.group_settings.group_components
    or "--report" in sys.argv
    or TRAINS_ELSEWHERE in os.environ
)
for line in oversubscription_lines(EXPERIMENTS, os.cpu_count() if LOCAL_PLAN else None):
    print(f"config: {line}", file=sys.stderr)
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
    print(f"config: {e}", file=sys.stderr)
    sys.exit(1)
