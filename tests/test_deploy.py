"""The workflow used the way the Snakemake catalog deploys workflows: from the user's own directory,
as a module of the user's Snakefile, and through snakedeploy at a pinned version."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import REPO, env

from mpinet.analysis.figures import NAMES

pytestmark = pytest.mark.workflow

SNAKEMAKE = [sys.executable, "-m", "snakemake", "--cores", "2"]
STUDY = {
    "study": "mine",
    "datasets": {"iris": {"source": "bundled:iris", "format": "csv"}},
    "experiments": [{"dataset": "iris", "algorithm": ["serial", "allreduce"], "ranks": [1, 2], "epochs": 3}],
}


def user_dir(tmp_path: Path) -> Path:
    wd = tmp_path / "project"
    (wd / "config").mkdir(parents=True)
    (wd / "config" / "config.yaml").write_text(yaml.safe_dump(STUDY))
    return wd


def run(wd: Path, *args, check=True) -> subprocess.CompletedProcess:
    p = subprocess.run([*SNAKEMAKE, *args], cwd=wd, capture_output=True, text=True, env=env(), timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def assert_study_done_here(wd: Path, *args):
    runs = pd.read_csv(wd / "results/mine/metrics/runs.csv")
    assert len(runs) == 3 and runs["final_test_accuracy"].notna().all()
    assert len(list((wd / "results/mine/plots/iris").glob("*.png"))) == len(NAMES)  # every figure of a dataset
    assert (wd / "results/mine/runs.txt").read_text().count("results/runs/iris/") == 3
    assert len(list((wd / "results/runs").rglob("run.json"))) == 3
    again = run(wd, "-n", *args)
    assert "Nothing to be done" in again.stdout + again.stderr


@pytest.mark.mpi
@pytest.mark.each_mpi  # the small workflow run under Open MPI too (make test-mpi)
def test_a_study_runs_from_its_own_directory_with_the_checkouts_snakefile(tmp_path):
    wd = user_dir(tmp_path)
    args = ["-s", str(REPO / "workflow" / "Snakefile"), "--configfile", "config/config.yaml"]
    run(wd, *args)
    assert_study_done_here(wd, *args)
    meta = next((wd / "results/runs").glob("iris/algorithm~allreduce/ranks~2/**/run.json")).read_text()
    assert '"launcher": "mpiexec' in meta  # the launcher line the detected MPI got


def test_the_workflow_runs_as_a_module_of_the_users_snakefile(tmp_path):
    """With the rule names prefixed (`as mpinet_*`), the harder of the two ways to import it."""
    prefix = "mpinet_*"
    wd = user_dir(tmp_path)
    as_ = f" as {prefix}" if prefix else ""
    snakefile = REPO / "workflow" / "Snakefile"
    module = f'module mpinet:\n    snakefile:\n        "{snakefile}"\n    config:\n        config\n'
    (wd / "Snakefile").write_text(f'configfile: "config/config.yaml"\n\n\n{module}\n\nuse rule * from mpinet{as_}\n')
    run(wd)
    assert_study_done_here(wd)
    status = run(wd, f"{prefix.rstrip('*')}status", "--quiet", "all")
    assert "3 done of 3 experiments" in status.stdout


def test_snakedeploy_deploys_a_pinned_version_from_a_local_git_repository(tmp_path):
    repo = tmp_path / "mpinet-repo"  # not *.git: snakedeploy strips that suffix from a local path
    subprocess.run(["git", "clone", "-q", str(REPO), str(repo)], check=True)
    import mpinet

    # the release tag the manual's deployment instructions pin, on this code (-f: the clone may hold it)
    tag = f"v{mpinet.__version__}"
    subprocess.run(["git", "-C", str(repo), "tag", "-f", tag], check=True, capture_output=True)
    wd = tmp_path / "project"
    bin_ = Path(sys.executable).parent
    subprocess.run([bin_ / "snakedeploy", "deploy-workflow", repo, wd, "--tag", tag], check=True, env=env())
    snakefile = wd / "workflow" / "Snakefile"
    text = snakefile.read_text()
    # snakedeploy 0.17.1 copies config/ and profiles/ and writes the module; from a local path its
    # `snakefile:` is relative to the repository ("workflow/Snakefile"), which Snakemake would read
    # next to the deployed Snakefile: the README's step pins it with gitfile() instead
    assert (wd / "config" / "config.yaml").exists() and (wd / "profiles" / "slurm" / "config.yaml").exists()
    # and the workflow profile, whose rerun triggers leave out `code` (Snakemake 9.27 fails on the
    # `script:` rules of a gitfile() module when it checks their code: LocalGitFile.join)
    assert "rerun-triggers" in (wd / "profiles" / "default" / "config.yaml").read_text()
    assert '"workflow/Snakefile"' in text and "use rule * from" in text
    pinned = f'gitfile("{repo}", path="workflow/Snakefile", tag="{tag}")'
    snakefile.write_text(text.replace('"workflow/Snakefile"', pinned))
    (wd / "config" / "config.yaml").write_text(yaml.safe_dump(STUDY))
    run(wd)
    assert_study_done_here(wd)


def test_the_deployment_instructions_pin_this_releases_tag():
    import re

    import mpinet

    tags = set(re.findall(r'tag[= ]"?(v[\w.-]+)', (REPO / "README.md").read_text()))
    tags |= set(re.findall(r'tag[= ]"?(v[\w.-]+)', "".join(p.read_text() for p in (REPO / "docs").rglob("*.md"))))
    assert tags == {f"v{mpinet.__version__}"}
    citation = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert citation["version"] == mpinet.__version__  # what a citation names is this release


def test_make_tag_tags_this_checkout_with_its_version_once(tmp_path):
    """A repository that landed without tags gets the one the deployment instructions pin; a second
    `make tag` refuses to move it."""
    import mpinet

    repo = tmp_path / "checkout"
    subprocess.run(["git", "clone", "-q", str(REPO), str(repo)], check=True, capture_output=True)
    version = mpinet.__version__
    subprocess.run(["git", "-C", str(repo), "tag", "-d", f"v{version}"], capture_output=True)  # as landed: none
    first = subprocess.run(["make", "-s", "tag"], cwd=repo, capture_output=True, text=True, env=env())
    assert first.returncode == 0 and f"tagged v{version}" in first.stdout, first.stderr
    tags = subprocess.run(["git", "-C", str(repo), "tag", "-l"], capture_output=True, text=True).stdout.split()
    assert f"v{version}" in tags
    again = subprocess.run(["make", "-s", "tag"], cwd=repo, capture_output=True, text=True, env=env())
    assert again.returncode != 0 and f"error: tag v{version} exists" in again.stderr
