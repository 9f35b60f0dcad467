"""The catalogue of a user's own mistakes: each is caused for real (the planner, `snakemake -n`, on a
study of its own; the data command) and must print one line naming the user's file and key, found
word for word on docs/troubleshooting.md, with no traceback around it. The page's config rows
written for `config/x.yaml` are exactly the ones caused here, so the page cannot drift."""

import re
import shutil
import subprocess
import sys
from collections import Counter

import pytest
import yaml
from conftest import REPO
from test_workflow import SNAKEMAKE, TINY, copy_env

from mpinet import MpinetError

PAGE = REPO / "docs" / "troubleshooting.md"
CONFIG = "config/x.yaml"
# Snakemake's own line before it reads the workflow (the workflow's profiles/default): nothing else
# may stand beside a refusal
SNAKEMAKE_NOISE = ["Using workflow specific profile profiles/default for setting default command line arguments."]


def _experiment(i, **keys):
    return lambda c: c["experiments"][i].update(keys)


def _typos(c):
    c["experiments"][0]["algoritm"] = "serial"
    c["experiments"][2]["learnin_rate"] = 0.1
    c["datasets"]["iris"]["formt"] = "csv"


# (what the user got wrong, the change to a good config, the key path of each line it must print)
MISTAKES = [
    ("a misspelt experiment key", _experiment(2, learnin_rate=0.1), ["experiments[2].learnin_rate"]),
    (
        "three misspelt keys, reported at once",
        _typos,
        ["datasets.iris.formt", "experiments[0].algoritm", "experiments[2].learnin_rate"],
    ),
    ("an unknown top-level key", lambda c: c.update(colour="red"), ["colour"]),
    ("a misspelt design", _experiment(0, algorithm="allreduc"), ["experiments[0].algorithm"]),
    ("a quoted number", _experiment(0, batch_size="8"), ["experiments[0].batch_size"]),
    ("no ranks", _experiment(0, ranks=0), ["experiments[0].ranks"]),
    ("a misspelt dataset name", _experiment(0, dataset="iriss"), ["experiments[0].dataset"]),
    ("paramserver alone", _experiment(0, algorithm="paramserver", ranks=1), ["experiments[0]"]),
    (
        "an unknown bundled dataset",
        lambda c: c["datasets"]["iris"].update(source="bundled:mnist"),
        ["datasets.iris.source"],
    ),
    (
        "a source file that is not there",
        lambda c: c["datasets"]["iris"].update(source="data/iris.csv"),
        ["datasets.iris.source"],
    ),
]


def page_messages(prefix: str) -> list[str]:
    """Every message quoted on the troubleshooting page that starts with prefix."""
    return [m for m in re.findall(r"`([^`\n]+)`", PAGE.read_text()) if m.startswith(prefix)]


def shown_as(message: str, line: str) -> bool:
    """Whether a printed line is the page's message ('…' on the page stands for any text)."""
    return re.fullmatch(".*".join(map(re.escape, message.split("…"))), line) is not None


def shown_for(path: str, line: str) -> bool:
    """Whether a printed line is one of the page's messages for a config mistake at this key path."""
    messages = [m for m in page_messages(f"{CONFIG}: ") if m.startswith(f"{CONFIG}: {path}: ")]
    return any(shown_as(m, line) for m in messages)


def workflow_copy(wd):
    """wd with the workflow, its configs, the package and the profile: a study directory of its own."""
    for part in ("workflow", "config", "src", "profiles"):
        shutil.copytree(REPO / part, wd / part, ignore=shutil.ignore_patterns("__pycache__"))
    return wd


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A directory of its own with the workflow and a good study (TINY and a third sweep)."""
    return workflow_copy(tmp_path_factory.mktemp("errors"))


def good_config() -> dict:
    config = yaml.safe_load(yaml.safe_dump(TINY))
    config["experiments"].append({"dataset": "iris", "algorithm": "serial", "epochs": 3, "seed": 2})
    return config


@pytest.mark.workflow
@pytest.mark.parametrize("mistake,change,paths", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_a_config_mistake_is_refused_at_plan_time_in_one_line_naming_file_and_key(study, mistake, change, paths):
    config = good_config()
    change(config)
    (study / CONFIG).write_text(yaml.safe_dump(config))
    cmd = [*SNAKEMAKE, "-n", "--cores", "1", "--configfile", CONFIG]
    p = subprocess.run(cmd, cwd=study, capture_output=True, text=True, timeout=300, env=copy_env(study))
    assert p.returncode == 1, p.stdout + p.stderr
    assert "Traceback" not in p.stdout + p.stderr and 'File "' not in p.stdout + p.stderr, p.stderr
    lines = p.stderr.splitlines()
    assert p.stdout == "" and lines[: len(SNAKEMAKE_NOISE)] == SNAKEMAKE_NOISE, p.stdout + p.stderr
    refusals = lines[len(SNAKEMAKE_NOISE) :]
    assert len(refusals) == len(paths), refusals
    for line, path in zip(sorted(refusals), sorted(paths)):
        assert line.startswith(f"{CONFIG}: {path}: ") and shown_for(path, line), (line, path)
    assert not (study / "results").exists() and not (study / "resources").exists()


def page_message(containing: str) -> str:
    """The one message on the page that contains this text."""
    (message,) = [m for m in page_messages("") if containing in m]
    return message


def run_study(wd, datasets: dict) -> subprocess.CompletedProcess:
    """`snakemake` (no dry run) of a study with these datasets, one experiment each."""
    config = {"datasets": datasets, "experiments": [{"dataset": name, "epochs": 1} for name in datasets]}
    (wd / CONFIG).write_text(yaml.safe_dump(config))
    cmd = [*SNAKEMAKE, "--cores", "2", "--configfile", CONFIG]
    return subprocess.run(cmd, cwd=wd, capture_output=True, text=True, timeout=300, env=copy_env(wd))


# what Snakemake's own report of a failed job shows: its exception, its block, the shell command
# and the command's JSON options
SNAKEMAKE_REPORT = ["CalledProcessError", "RuleException", "Error in rule", "-m mpinet.datacli", "--options", '{"']


def data_refusal(p: subprocess.CompletedProcess, wd) -> str:
    """The one error line of a run stopped by bad data, after checking the rest: a non-zero exit, no
    traceback or Python frame, no report of Snakemake's about the job (the line is all it says), the
    fetched copy not named, no MPI timing yet and nothing prepared."""
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "Traceback" not in out and 'File "' not in out, out
    assert not [text for text in SNAKEMAKE_REPORT if text in out], out
    (line,) = [line for line in out.splitlines() if line.startswith("mpinet.datacli: error:")]
    assert "resources/raw" not in line, line
    assert not list(wd.glob("results/*/metrics/commbench.csv")) and not list(wd.glob("resources/data/*/summary.json"))
    return line


@pytest.mark.workflow
def test_a_bad_table_cell_stops_the_study_before_any_mpi_timing_in_one_line_naming_the_users_file(tmp_path):
    wd = workflow_copy(tmp_path)
    (wd / "data").mkdir()
    (wd / "data" / "t.csv").write_text("a,b,label\n1,2,x\n3,oops,y\n" + "5,6,x\n7,8,y\n" * 3)
    line = data_refusal(run_study(wd, {"t": {"source": "data/t.csv", "format": "csv"}}), wd)
    assert shown_as(page_message("'oops' is not a number (full log"), line), line


@pytest.mark.workflow
def test_two_corrupt_images_are_both_named_in_one_line_before_any_mpi_timing(tmp_path):
    from mpinet.datasets.fetch import fetch
    from mpinet.datasets.synthetic import make_archive

    wd = workflow_copy(tmp_path / "study")
    photos = fetch(str(make_archive(tmp_path / "a.zip", 4, 3, 0, 16)), wd / "photos")
    bad = [photos / "seg_train/seg_train/forest/00001.jpg", photos / "seg_test/seg_test/sea/00002.jpg"]
    for f in bad:
        f.write_bytes(b"\xff\xd8 not really a jpeg")
    line = data_refusal(run_study(wd, {"photos": {"source": "photos", "format": "images", "image_size": 16}}), wd)
    assert shown_as(page_message("2 images cannot be decoded"), line), line
    assert all(str(f.relative_to(photos)) in line for f in bad)
    assert (wd / "logs/data/prepare_photos.log").read_text().count("cannot decode image (") == 2


def test_the_page_quotes_no_config_refusal_the_catalogue_does_not_cause():
    caused = Counter(path for _, _, paths in MISTAKES for path in paths)
    quoted = Counter(m.split(": ")[1] for m in page_messages(f"{CONFIG}: "))
    # every key path quoted is caused above, by at least as many mistakes as the page has messages for it
    assert set(quoted) == set(caused) and all(quoted[path] <= caused[path] for path in quoted), (quoted, caused)


def test_a_close_match_is_offered_for_unknown_keys_and_values_and_none_where_nothing_is_close():
    from mpinet.study.config import check_study

    config = good_config()
    config["experiments"][1].update(shufle="batches", loss="xnet")
    config["datasets"]["images"]["zzz"] = 1
    with pytest.raises(MpinetError) as refused:
        check_study(config, REPO / "workflow/schemas/config.schema.yaml", lambda d: None, source=CONFIG)
    assert str(refused.value).splitlines() == [
        f"{CONFIG}: datasets.images.zzz: unknown key; expected one of source, format, sha256, label_column, "
        "id_column, header, separator, missing, test_fraction, split_seed, image_size, standardize_inputs, "
        "skip_bad_images, include_pred",
        f"{CONFIG}: experiments[1].shufle: unknown key; did you mean shuffle?",
        f"{CONFIG}: experiments[1].loss: 'xnet' is not one of l2, xent; did you mean xent?",
    ]


def test_the_prepare_command_refuses_options_no_reader_knows_naming_a_close_match(tmp_path):
    (message,) = page_messages("mpinet.datacli: error: --options: unknown key")
    out = tmp_path / "out"
    options = '{"format": "csv", "image_sise": 32, "colour": 1}'
    cmd = [sys.executable, "-m", "mpinet.datacli", "prepare", tmp_path, out, "--format", "csv", "--options", options]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    (line,) = p.stderr.splitlines()
    assert p.returncode == 2 and shown_as(message, line) and not out.exists(), p.stderr
    assert "image_sise (did you mean image_size?), colour;" in line


def test_the_prepare_command_knows_every_dataset_key_of_the_schema():
    """What --options may hold (the readers' keys) and the schema's dataset keys are one list."""
    from mpinet.datacli import option_keys

    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    keys = schema["properties"]["datasets"]["additionalProperties"]["properties"]
    assert set(option_keys()) == set(keys) - {"source"}


def test_only_a_data_command_that_printed_its_error_has_snakemake_s_report_of_it_left_off_the_console():
    """mpinet.datacli with --log prints its one-line error whenever it ends with 1 or 2: Snakemake's
    report of that job (its `Error in rule` block's command, the exception naming the command and its
    status) is left off; one killed, a training job and a command without its log are reported."""
    from mpinet.datacli import said_on_the_console

    command = "python -m mpinet.datacli prepare resources/raw/t resources/data/t --log logs/data/prepare_t.log"
    assert said_on_the_console(command)  # the block: the command, no status
    for status, said in ((1, True), (2, True), (137, False)):
        exception = f"CalledProcessError in file \"data.smk\", line 71:\nCommand 'set -euo pipefail;  {command}'"
        assert said_on_the_console(f"{exception} returned non-zero exit status {status}.") is said, status
    assert not said_on_the_console(command.replace(" --log logs/data/prepare_t.log", ""))
    assert not said_on_the_console("mpiexec -n 2 python -m mpinet.train --log x > x.log 2>&1 || exit 1")
    assert not said_on_the_console("At least one job did not complete successfully.")


def test_a_config_file_that_is_not_there_is_one_line_naming_it():
    cmd = ["make", "-s", "study-config", "CONFIG=config/nope.yaml"]
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    lines = [line for line in p.stderr.splitlines() if not re.match(r"make(\[\d+\])?: \*\*\*", line)]  # make's own
    assert p.returncode != 0 and len(lines) == 1 and p.stdout == "", p.stderr
    assert shown_as(page_message("CONFIG=config/nope.yaml"), lines[0]) and "config.yaml" in lines[0], lines
