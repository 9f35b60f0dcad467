"""The project's own shell scripts, read as text: mistakes that only show as a rare failure."""

import re
import subprocess

from conftest import REPO

# `cmd | grep -q PATTERN` under pipefail: grep exits at its first match, cmd may then die of SIGPIPE
# and the pipeline is false although the pattern was there (5 % of `ip addr show | grep -q` here),
# which once made the cluster script add an address twice and fail CI.
EARLY_EXIT_GREP = re.compile(r"\|\s*grep\s+(-[a-zA-Z]*q|--quiet)")


def _shell_scripts():
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True)
    for name in tracked.stdout.split():
        path = REPO / name
        if path.suffix == ".sh" or name == ".ci/run":
            yield path


def test_no_pipe_into_an_early_exiting_grep_where_pipefail_is_set():
    scripts = list(_shell_scripts())
    assert any(p.name == "local-cluster.sh" for p in scripts)
    found = []
    for path in scripts:
        text = path.read_text()
        if "pipefail" not in text:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if EARLY_EXIT_GREP.search(line) and not line.lstrip().startswith("#"):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not found, "grep -q reads a pipe under pipefail:\n" + "\n".join(found)
