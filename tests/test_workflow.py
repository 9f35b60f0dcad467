"""The Snakemake workflow run for real in a temporary copy of the repository."""

import json
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import REPO, env

from mpinet.analysis.figures import NAMES
from mpinet.engine.options import ALGORITHMS

pytestmark = pytest.mark.workflow

SNAKEMAKE = [sys.executable, "-m", "snakemake"]
TINY = {
    "datasets": {
        "iris": {"source": "bundled:iris", "format": "csv", "test_fraction": 0.3, "split_seed": 0},
        "images": {"source": "synthetic:intel", "format": "images", "image_size": 16},
    },
    "synthetic": {"train_per_class": 8, "test_per_class": 3, "pred_count": 2, "size": 16},
    "experiments": [
        {
            "dataset": "iris",
            "algorithm": ["serial", "allreduce", "paramserver"],
            "ranks": [1, 2],
            "learning_rate": [0.3],
            "epochs": 5,
            "seed": 1,
        },
        {"dataset": "images", "algorithm": ["serial", "allreduce"], "ranks": [1, 2], "batch_size": 8, "epochs": 3},
    ],
    "target_accuracy": 0.8,
}


EPOCHS_PACED = 120  # of Iris on 2 ranks, batch 4: 14 steps an epoch
# Snakemake's own --omit-from, for tests of what no figure shows (the figures' tests draw them): a
# study's runs and tables without its figures, or its runs alone (no microbenchmark, no tables)
NO_FIGURES = ("--omit-from", "plots")
RUNS_ONLY = ("--omit-from", "commbench", "plots")


def copy_repo(dest: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True)
    for name in files.stdout.splitlines():
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def copy_env(wd: Path) -> dict:
    """The environment with the copy's own package first on the path, so edits to it take effect."""
    e = env()
    if (wd / "src" / "mpinet").is_dir():
        e["PYTHONPATH"] = str(wd / "src")
    return e


def write_config(wd: Path, config: dict, name="test.yaml") -> Path:
    path = wd / "config" / name
    path.write_text(yaml.safe_dump(config))
    return path


def snakemake(wd: Path, *args, check=True, timeout=600) -> subprocess.CompletedProcess:
    cmd = [*SNAKEMAKE, "--cores", "2", "--configfile", "config/test.yaml", *args]
    p = subprocess.run(cmd, cwd=wd, capture_output=True, text=True, timeout=timeout, env=copy_env(wd))
    if check and p.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}")
    return p


def planned(wd: Path, *args) -> dict[str, int]:
    """Jobs a dry run would execute, by rule (empty when there is nothing to do)."""
    return jobs_of(snakemake(wd, "-n", "--quiet", "rules", *args))


def jobs_of(p: subprocess.CompletedProcess) -> dict[str, int]:
    """The job counts by rule a `snakemake -n --quiet rules` printed."""
    jobs = {}
    for line in (p.stdout + p.stderr).splitlines():
        m = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if m and m.group(1) != "total":
            jobs[m.group(1)] = int(m.group(2))
    return jobs


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    wd = copy_repo(tmp_path_factory.mktemp("wf"))
    write_config(wd, TINY)
    snakemake(wd)
    return wd


def test_workflow_produces_tables_plots_and_runs(workdir):
    runs = pd.read_csv(workdir / "results/test/metrics/runs.csv")
    assert len(runs) == 4 + 3  # iris: serial, allreduce on 1 and 2, paramserver on 2; images: 3
    assert set(runs["dataset"]) == {"iris", "images"}
    for d in ("iris", "images"):
        for f in NAMES:
            assert (workdir / f"results/test/plots/{d}/{f}.png").stat().st_size > 10_000
    run = workdir / "results/runs/iris/algorithm~allreduce/ranks~2/blas_threads~1/batch_size~4/learning_rate~0.3"
    rest = "epochs~5/train_samples~0/samples_per_rank~0/hidden~30-20/loss~l2/standardize~True/dtype~float32"
    rest += "/sync_every~1/shuffle~samples/faithful~False"
    rest += "/seed~1/repeat~1"
    assert (run / rest / "metrics.csv").exists()
    assert not list((workdir / "results").rglob("checkpoint.npz"))  # finished runs leave no checkpoint
    assert "synthetic" in (workdir / "resources/data/images/summary.json").read_text()


def test_training_jobs_ran_one_at_a_time_and_say_so(workdir):
    from datetime import datetime

    spans = []
    for meta_path in (workdir / "results/runs").rglob("run.json"):
        timing = json.loads(meta_path.read_text())["timing"]
        assert timing["isolation"] == "one-at-a-time" and timing["load1_start"] >= 0
        spans.append((datetime.fromisoformat(timing["start"]), datetime.fromisoformat(timing["end"])))
    spans.sort()
    runs = pd.read_csv(workdir / "results/test/metrics/runs.csv")
    assert len(spans) == len(runs) > 3
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert end <= start  # no two training jobs' [start, end] intervals overlap
    assert runs["speedup_isolated"].all() and (runs["iqr_epoch_s"] >= 0).all()


def test_second_run_has_nothing_to_do(workdir):
    assert planned(workdir) == {}


def test_report_lists_every_plot_and_table(workdir):
    snakemake(workdir, "--report", "results/test/report.html")
    html = (workdir / "results/test/report.html").read_text()
    for d in ("iris", "images"):
        for f in NAMES:
            assert f"results/test/plots/{d}/{f}.png" in html, f
    for t in ("epochs.csv", "runs.csv", "seeds.csv"):
        assert f"results/test/metrics/{t}" in html
    for category in ("Training curves", "Scaling", "Tables", "Data"):
        assert category in html


def test_a_study_with_auto_draws_every_figure_and_its_report(workdir):
    """Auto beside other designs, then alone, as studies of their own in the same directory: they
    share the Iris runs already trained (only auto's train), and every figure names auto by what it
    trained ('auto → allreduce'), a design the palette was once missing."""
    iris = {**TINY["experiments"][0], "algorithm": ["serial", "allreduce", "auto"]}
    for study, experiment in (("auto", iris), ("autoalone", {**iris, "algorithm": "auto"})):
        write_config(
            workdir, {"datasets": {"iris": TINY["datasets"]["iris"]}, "experiments": [experiment]}, f"{study}.yaml"
        )
        run = [*SNAKEMAKE, "--cores", "2", "--configfile", f"config/{study}.yaml"]
        for extra in ([], ["--report", f"results/{study}/report.html"]):
            p = subprocess.run([*run, *extra], cwd=workdir, capture_output=True, text=True, env=copy_env(workdir))
            assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        runs = pd.read_csv(workdir / f"results/{study}/metrics/runs.csv")
        auto = runs[runs["algorithm"] == "auto"]
        assert sorted(auto["ranks"]) == [1, 2] and auto["trained_as"].isin(set(ALGORITHMS) - {"auto"}).all(), auto
        html = (workdir / f"results/{study}/report.html").read_text()
        for f in NAMES:
            assert (workdir / f"results/{study}/plots/iris/{f}.png").stat().st_size > 10_000, f
            assert f"results/{study}/plots/iris/{f}.png" in html, f
    assert planned(workdir) == {}  # the shared study's runs and tables are untouched


def test_changing_one_learning_rate_reruns_only_its_experiments(workdir):
    cfg = yaml.safe_load(yaml.safe_dump(TINY))
    cfg["experiments"][0]["learning_rate"] = [0.3, 0.5]
    write_config(workdir, cfg)
    try:
        jobs = planned(workdir)
        assert jobs.get("train_single", 0) + jobs.get("train_mpi", 0) == 4  # the 4 iris runs with lr 0.5
        assert jobs.get("prepare", 0) == 0 and jobs.get("fetch", 0) == 0
        assert jobs["aggregate"] == 1 and jobs["plots"] == 2
    finally:
        write_config(workdir, TINY)


def test_adding_a_rank_count_schedules_only_the_new_experiments(workdir):
    cfg = yaml.safe_load(yaml.safe_dump(TINY))
    cfg["experiments"][0]["ranks"] = [1, 2, 3]
    write_config(workdir, cfg)
    try:
        jobs = planned(workdir)
        assert jobs.get("train_mpi") == 2 and "train_single" not in jobs  # allreduce and paramserver on 3
    finally:
        write_config(workdir, TINY)


def test_a_subset_trains_only_its_experiments_and_one_larger_than_the_data_stops_before_any_job(workdir):
    cfg = yaml.safe_load(yaml.safe_dump(TINY))
    cfg["experiments"].append({**TINY["experiments"][0], "algorithm": ["serial", "allreduce"], "train_samples": 40})
    write_config(workdir, cfg)
    try:
        jobs = planned(workdir)
        # serial, allreduce on 1 and on 2 ranks, on 40 rows; the whole-set runs are kept
        assert jobs.get("train_single") == 2 and jobs.get("train_mpi") == 1
        assert "prepare" not in jobs and jobs["aggregate"] == 1
        cfg["experiments"][-1]["train_samples"] = 5000
        write_config(workdir, cfg)
        p = snakemake(workdir, "-n", check=False)
        assert p.returncode != 0
        lines = [x for x in (p.stdout + p.stderr).splitlines() if "train_samples 5000" in x]
        n_train = json.loads((workdir / "resources/data/iris/summary.json").read_text())["shapes"]["train_x"][0]
        assert lines == [
            "config/test.yaml: experiments: dataset iris, serial on 1 rank: train_samples 5000 is more than the "
            f"{n_train} training samples of the data"
        ], p.stderr[-2000:]
        assert "Traceback" not in p.stdout + p.stderr
    finally:
        write_config(workdir, TINY)


def test_references_are_checked_in_the_tables_the_report_and_the_summary(workdir):
    cfg = yaml.safe_load(yaml.safe_dump(TINY))
    # serial's speedup is 1 by definition and never left out: a breach whatever the machine's load;
    # allreduce's is a breach, or left out (its note says why) when a test beside it took a core
    cfg["references"] = [
        {"dataset": "iris", "algorithm": "serial", "speedup": 50.0, "tolerance": 0.1},
        {"dataset": "iris", "algorithm": "serial", "speedup": 1.0, "tolerance": 0.5},
        {"dataset": "iris", "algorithm": "allreduce", "ranks": 2, "speedup": 50.0, "tolerance": 0.1},
    ]
    write_config(workdir, cfg)
    try:
        jobs = planned(workdir)
        assert "train_single" not in jobs and "train_mpi" not in jobs and jobs["aggregate"] == 1  # nothing retrains
        p = snakemake(workdir)
        checked = pd.read_csv(workdir / "results/test/metrics/references.csv")
        assert checked["status"].tolist()[:2] == ["breach", "ok"]
        last = checked.iloc[2]
        assert last["status"] == "breach" or (last["status"] == "left out" and last["note"]), last
        assert "reference 0 breached: iris serial 1 ranks" in p.stdout + p.stderr
        breached, left = (int((checked["status"] == s).sum()) for s in ("breach", "left out"))
        front = (workdir / "results/test/report.rst").read_text()
        assert f"**References**: {3 - left} checked: {breached} breached" in front and "outside 50 ± 10%" in front
        cfg["references"][0]["ranks"] = 7
        write_config(workdir, cfg)
        p = snakemake(workdir, "-n", check=False)
        assert p.returncode != 0 and "references[0]: selects no experiment of the study" in p.stdout + p.stderr
    finally:
        write_config(workdir, TINY)
        snakemake(workdir)  # the tables as the other tests expect them: without references


def test_a_placement_retrains_nothing_and_local_runs_record_their_one_host(workdir):
    cfg = yaml.safe_load(yaml.safe_dump(TINY))
    cfg["experiments"][0]["nodes"] = 2
    write_config(workdir, cfg)
    try:
        jobs = planned(workdir)
        assert "train_single" not in jobs and "train_mpi" not in jobs  # the numbers would not change
    finally:
        write_config(workdir, TINY)
    runs = pd.read_csv(workdir / "results/test/metrics/runs.csv")
    assert (runs["nodes"] == 1).all()  # locally every rank runs here, whatever nodes says
    meta = json.loads(next((workdir / "results/runs").glob("iris/algorithm~allreduce/ranks~2/**/run.json")).read_text())
    assert meta["nodes"] == 1 and meta["hosts"] == [socket.gethostname()]


def test_code_edits_rerun_exactly_the_jobs_whose_numbers_they_change(workdir):
    package = workdir / "src/mpinet"
    modules = (
        "analysis/plots.py",
        "engine/model.py",
        "engine/loop.py",
        "train.py",
        "engine/runfiles.py",
        "engine/options.py",
        "analysis/costmodel.py",
    )
    old = {m: (package / m).read_text() for m in modules}
    try:
        (package / "analysis/plots.py").write_text(old["analysis/plots.py"] + "\n# edited\n")
        assert planned(workdir) == {}  # a comment
        (package / "analysis/plots.py").write_text(old["analysis/plots.py"] + "\nX = 1\n")
        assert planned(workdir) == {"plots": 2, "all": 1}
        (package / "analysis/plots.py").write_text(old["analysis/plots.py"])
        # what the tables import, directly or not (costmodel: model.csv), reruns them and the figures
        (package / "analysis/costmodel.py").write_text(old["analysis/costmodel.py"] + "\nX = 1\n")
        assert planned(workdir) == {"aggregate": 1, "plots": 2, "commbench": 1, "all": 1}
        (package / "analysis/costmodel.py").write_text(old["analysis/costmodel.py"])
        # comments, docstrings, help texts, the CLI and run.json fields decide no number: nothing retrains
        (package / "engine/model.py").write_text(old["engine/model.py"] + "\n# edited\n")
        (package / "engine/loop.py").write_text(
            old["engine/loop.py"].replace('"""The epoch loop', '"""The loop, reworded,', 1)
        )
        (package / "train.py").write_text(old["train.py"] + "\n\ndef unused():\n    pass\n")
        (package / "engine/options.py").write_text(
            old["engine/options.py"].replace('"hidden layer sizes"', '"hidden sizes"')
        )
        (package / "engine/runfiles.py").write_text(
            old["engine/runfiles.py"].replace('"ranks": comm.size,', '"ranks": comm.size, "x": 1,')
        )
        assert planned(workdir) == {}
        # a change to the computation, or to which rows a run trains on, retrains every experiment
        # and redraws what comes from them, and nothing upstream of training
        for module, text in (("engine/model.py", "\nEPS = 1e-12\n"), ("engine/options.py", "\nX = 1\n")):
            (package / module).write_text(old[module] + text)
            jobs = planned(workdir)
            assert jobs["train_single"] == 4 and jobs["train_mpi"] == 3 and jobs["aggregate"] == 1, jobs
            assert "prepare" not in jobs and "fetch" not in jobs, jobs
            (package / module).write_text(old[module])
    finally:
        for m, text in old.items():
            (package / m).write_text(text)
    assert planned(workdir) == {}


def test_the_same_release_installed_at_another_path_plans_nothing(workdir, tmp_path):
    """A fresh clone or a new virtual environment: the study's results stand."""
    elsewhere = copy_repo(tmp_path / "another" / "clone")
    cmd = [*SNAKEMAKE, "-s", elsewhere / "workflow/Snakefile", "--cores", "2", "--configfile", "config/test.yaml"]
    e = {**copy_env(workdir), "PYTHONPATH": str(elsewhere / "src")}
    p = subprocess.run([*map(str, cmd), "-n", "--quiet", "rules"], cwd=workdir, capture_output=True, text=True, env=e)
    assert p.returncode == 0 and jobs_of(p) == {}, p.stdout[-3000:] + p.stderr[-3000:]
    probe = [sys.executable, "-c", "import mpinet; print(mpinet.__file__)"]
    probe = subprocess.run(probe, env=e, text=True, capture_output=True)
    assert probe.stdout.startswith(str(elsewhere))  # it really ran the other copy


def test_a_release_and_data_code_refactors_refetch_reprepare_and_retrain_nothing(workdir):
    package = workdir / "src/mpinet"
    old = {
        m: (package / m).read_text()
        for m in ("__init__.py", "datasets/images.py", "datasets/csvdata.py", "datasets/fetch.py", "datacli.py")
    }
    data_jobs = {"make_synthetic", "fetch", "prepare", "train_single", "train_mpi"}
    try:
        # a new version number, a comment, a docstring, a help text: the data and the runs stand
        (package / "__init__.py").write_text(
            re.sub(r'__version__ = "[^"]+"', '__version__ = "9.9.9"', old["__init__.py"])
        )
        (package / "datasets/images.py").write_text(old["datasets/images.py"] + "\n# edited\n")
        (package / "datasets/fetch.py").write_text(
            old["datasets/fetch.py"].replace('"""Fetch a dataset', '"""Fetch, reworded, a dataset', 1)
        )
        (package / "datacli.py").write_text(old["datacli.py"].replace('"the zip file to write"', '"the zip to write"'))
        jobs = planned(workdir)
        assert not data_jobs & set(jobs), jobs
        # a change to how images are read re-prepares the image dataset and retrains its runs (serial
        # and Allreduce on 1 rank, Allreduce on 2), but fetches nothing and leaves the table alone
        (package / "datasets/images.py").write_text(old["datasets/images.py"] + "\nX = 1\n")
        jobs = planned(workdir)
        assert jobs["prepare"] == 1 and jobs["train_single"] == 2 and jobs["train_mpi"] == 1, jobs
        assert "fetch" not in jobs and "make_synthetic" not in jobs, jobs
        (package / "datasets/images.py").write_text(old["datasets/images.py"])
        # and the table code, the Iris dataset and its runs (2 on 1 rank, 2 on 2 ranks)
        (package / "datasets/csvdata.py").write_text(old["datasets/csvdata.py"] + "\nX = 1\n")
        jobs = planned(workdir)
        assert jobs["prepare"] == 1 and jobs["train_single"] == 2 and jobs["train_mpi"] == 2, jobs
        assert "fetch" not in jobs and "make_synthetic" not in jobs, jobs
    finally:
        for m, text in old.items():
            (package / m).write_text(text)
    assert not data_jobs & set(planned(workdir))


def test_a_run_another_engine_timed_is_named_and_make_retime_s_targets_retrain_only_it(workdir):
    """As after an upgrade: one run of the study says another engine timed it. The tables leave its
    speedup out and the summary names it; the runs `make retime` hands Snakemake are that one run,
    which trains again (the same weights) and leaves no mix behind."""
    run = next((workdir / "results/runs/iris/algorithm~allreduce/ranks~2").rglob("run.json"))
    meta = json.loads(run.read_text())
    run.write_text(json.dumps({**meta, "timed_by": "an older engine"}))
    weights_before = (run.parent / "weights.npz").read_bytes()
    summary = snakemake(workdir).stdout
    runs = pd.read_csv(workdir / "results/test/metrics/runs.csv").set_index("run_dir")
    mixed = runs.loc[str(run.parent.relative_to(workdir))]
    assert mixed["timing_mixed"] and pd.isna(mixed["speedup"])
    assert "make retime" in summary and "algorithm=allreduce, ranks=2" in summary
    stale = subprocess.run(
        [sys.executable, "-m", "mpinet.study.status", "stale", "config/test.yaml"],
        cwd=workdir,
        capture_output=True,
        text=True,
        env=copy_env(workdir),
        check=True,
    ).stdout.split()
    assert stale == [str(run.parent.relative_to(workdir) / "metrics.csv")]
    snakemake(workdir, "--forcerun", *stale)
    assert json.loads(run.read_text())["timed_by"] == meta["timed_by"]
    assert (run.parent / "weights.npz").read_bytes() == weights_before
    assert not pd.read_csv(workdir / "results/test/metrics/runs.csv")["timing_mixed"].any()
    assert planned(workdir) == {}


def test_a_run_s_timeline_is_declared_and_an_input_of_its_dataset_s_figures(workdir):
    """Every run has its timeline.json, a declared output of training that its dataset's figures read:
    figures redrawn without it train its run again first, never draw without it."""
    runs = pd.read_csv(workdir / "results/test/metrics/runs.csv")
    assert all((workdir / d / "timeline.json").is_file() for d in runs["run_dir"])
    timeline = next((workdir / "results/runs/iris").rglob("timeline.json"))
    kept = timeline.with_name("kept.json")
    timeline.rename(kept)
    try:
        jobs = jobs_of(snakemake(workdir, "-n", "--quiet", "rules", "--forcerun", "plots"))
        assert jobs.get("train_single", 0) + jobs.get("train_mpi", 0) == 1 and jobs["plots"] == 2
    finally:
        kept.rename(timeline)
    assert planned(workdir) == {}


def test_a_second_study_defining_a_dataset_name_differently_is_refused_naming_both(workdir):
    """Another study in the same directory with its own `images` (another size) would re-prepare the
    shared resources/data/images and retrain the first study's runs: refused before any job."""
    assert json.loads((workdir / "results/test/datasets.json").read_text())["images"]["config"] == "config/test.yaml"
    other = yaml.safe_load(yaml.safe_dump(TINY))
    other["study"] = "other"
    other["datasets"]["images"]["image_size"] = 24
    write_config(workdir, other, "other.yaml")
    p = subprocess.run(
        [*SNAKEMAKE, "-n", "--cores", "1", "--configfile", "config/other.yaml"],
        cwd=workdir,
        capture_output=True,
        text=True,
        env=copy_env(workdir),
    )
    (workdir / "config/other.yaml").unlink()
    assert p.returncode != 0
    (line,) = [x for x in (p.stdout + p.stderr).splitlines() if "defined differently" in x]
    assert "study test (config/test.yaml) and this one (config/other.yaml): image_size: 16 there, 24 here" in line
    assert planned(workdir) == {}


def test_a_bad_config_fails_before_any_job_with_one_line_naming_the_key(tmp_path):
    """One case end to end (tests/test_config.py checks every kind of bad config on the function)."""
    wd = tmp_path
    for part in ("workflow", "config", "src", "profiles"):
        src = REPO / part
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, wd / part)
    cfg = yaml.safe_load(yaml.safe_dump(TINY))
    cfg["experiments"][0]["dataset"] = "mnist"
    write_config(wd, cfg)
    p = snakemake(wd, check=False, timeout=120)
    assert p.returncode != 0
    assert "config/test.yaml: experiments[0].dataset: 'mnist' is not defined" in p.stdout + p.stderr
    assert not (wd / "results").exists() and not (wd / "resources").exists()


def test_intel_config_plans_offline(tmp_path):
    wd = copy_repo(tmp_path)
    p = subprocess.run(
        [*SNAKEMAKE, "-n", "--quiet", "rules", "--configfile", "config/intel.yaml"],
        cwd=wd,
        capture_output=True,
        text=True,
        env=copy_env(wd),
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", p.stdout + p.stderr, flags=re.M))
    # a sweep of 15 experiments (four designs) at both of the original's data sizes (220 and all),
    # one of 10 (three designs), and the fixed global batch of 64: serial and 2 designs on 1-16 ranks
    # (allreduce on 2 ranks at 32 a rank is the second sweep's run)
    assert int(jobs["train_single"]) + int(jobs["train_mpi"]) == 50 and jobs["fetch"] == "1"


def test_install_profile_makes_the_bare_profile_name_work(tmp_path):
    home = tmp_path / "home"
    e = dict(env(), HOME=str(home))
    bare = [*SNAKEMAKE, "--profile", "slurm", "-n"]
    before = subprocess.run(bare, cwd=REPO, capture_output=True, text=True, env=e, timeout=120)
    assert before.returncode != 0 and "profile" in before.stderr  # Snakemake does not look in profiles/
    subprocess.run(["make", "-s", "install-profile"], cwd=REPO, check=True, env=e, capture_output=True)
    assert (home / ".config/snakemake/slurm/config.yaml").exists()
    after = subprocess.run(bare, cwd=REPO, capture_output=True, text=True, env=e, timeout=120)
    assert after.returncode == 0, after.stderr
    assert re.search(r"Using profiles? slurm\b", after.stdout + after.stderr)  # beside the workflow profile


@pytest.mark.timeout(900)
def test_make_run_on_a_clean_checkout_leaves_tables_plots_and_report(tmp_path):
    """The README's quick start, as written (the venv is the one running this test)."""
    wd = copy_repo(tmp_path / "checkout")
    (wd / ".venv").symlink_to(Path(sys.executable).parents[1])
    p = subprocess.run(["make", "run"], cwd=wd, capture_output=True, text=True, env=copy_env(wd), timeout=840)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "pip install" not in p.stdout  # setup was already done: make is idempotent
    for table in ("epochs", "runs", "seeds"):
        assert (wd / f"results/default/metrics/{table}.csv").stat().st_size > 0
    assert len(list((wd / "results/default/plots").glob("*/*.png"))) == 2 * len(NAMES)  # Iris and the images
    assert (wd / "results/default/report.html").stat().st_size > 1_000_000
    again = subprocess.run([*SNAKEMAKE, "-n", "--cores", "2"], cwd=wd, capture_output=True, text=True, env=copy_env(wd))
    assert "Nothing to be done" in again.stdout + again.stderr
