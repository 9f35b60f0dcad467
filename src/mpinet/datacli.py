"""The data jobs' command lines, as the workflow's shell rules run them:

    python -m mpinet.datacli synthetic ARCHIVE [--train-per-class N ...]
    python -m mpinet.datacli fetch SOURCE OUT_DIR [--sha256 HEX]
    python -m mpinet.datacli prepare RAW_DIR OUT_DIR --format csv|images [--options JSON ...]

each with `--log FILE`: everything the command prints goes to FILE, and its one-line error, if
any, is printed on the console too, with FILE's path.

Commands rather than Snakemake scripts: a shell rule reruns when its command's text changes and a
script rule whenever its script file is touched, so these jobs rerun only when their parameters
or their code fingerprint (mpinet.fingerprints) change. This module is in no fingerprint: a help
text here refetches nothing. Errors are one line, `mpinet.datacli: error: ...`, and exit 1 (2 for
bad --options: not JSON, or a key no reader knows); a preparation's names the --source's files (the
user's file or folder, or `<archive>: <member>`), not their fetched copies under RAW_DIR.
"""

import argparse
import difflib
import json
import os
import re
import sys
import traceback
from pathlib import Path

PROG = "mpinet.datacli"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=f"python -m {PROG}", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("synthetic", help="draw the synthetic Intel-layout image archive (a zip of JPEGs)")
    s.add_argument("archive", help="the zip file to write")
    s.add_argument("--train-per-class", type=int, default=40, help="training images per class (default 40)")
    s.add_argument("--test-per-class", type=int, default=10, help="test images per class (default 10)")
    s.add_argument("--pred-count", type=int, default=6, help="unlabelled seg_pred images (default 6)")
    s.add_argument("--size", type=int, default=32, help="image side in pixels (default 32)")
    s.add_argument("--seed", type=int, default=0, help="random seed (default 0)")

    f = sub.add_parser("fetch", help="download or copy a dataset source and unpack it into a directory")
    f.add_argument("source", help="http(s) URL, local archive, file or folder, or kaggle:owner/dataset")
    f.add_argument("out_dir", help="the directory to fill (replaced only when the fetch succeeds)")
    f.add_argument("--sha256", default="", help="the expected sha256 of a downloaded or local file")

    r = sub.add_parser("prepare", help="preprocess a fetched dataset into .npy arrays")
    r.add_argument("raw_dir", help="the fetched dataset's directory")
    r.add_argument("out_dir", help="the dataset directory to write (train_x.npy ... summary.json)")
    r.add_argument("--format", required=True, choices=["csv", "images"], help="how to read raw_dir")
    r.add_argument("--options", default="{}", help="the dataset's config keys as a JSON object")
    r.add_argument("--source", default="", help="the source, as the summary records it")
    r.add_argument("--workers", type=int, default=None, help="image decoding processes (default: the CPUs, at most 8)")
    for command in (s, f, r):
        command.add_argument("--log", default="", help="write all output to this file; the error line also on stderr")
    return p.parse_args(argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    return logged(a.log, lambda: run(a)) if a.log else run(a)


def logged(log: str, command) -> int:
    """command() with everything it and its worker processes print written to log; on failure its
    error line (or, after a traceback, the traceback's last line) on the console with the log's path."""
    console = os.fdopen(os.dup(2), "w")
    saved = os.dup(1), os.dup(2)
    with open(log, "w") as f:
        for fd in (1, 2):
            os.dup2(f.fileno(), fd)
        try:
            code = command()
        except Exception:  # a bug, not bad input: its traceback stays in the log
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, old in zip((1, 2), saved, strict=True):
                os.dup2(old, fd)
                os.close(old)
    if code:
        lines = [line for line in Path(log).read_text(errors="replace").splitlines() if line.strip()]
        error = next((line for line in lines if line.startswith(f"{PROG}: error:")), None)
        error = error or f"{PROG}: error: {lines[-1] if lines else 'failed'} (a bug: the traceback is in the log)"
        print(f"{error} (full log: {log})", file=console, flush=True)
    console.close()
    return code


def said_on_the_console(report: str) -> bool:
    """Whether the failure a report of Snakemake's is about (a job's shell command, or the exception
    naming it and its exit status) was said on the console already: one of these commands run with
    --log, which prints its one-line error whenever it ends with status 1 or 2 (logged). A command
    killed, or ended by the shell with another status, printed nothing: its report is not this."""
    if f"-m {PROG} " not in report or " --log " not in report:
        return False
    status = re.search(r"returned non-zero exit status (\d+)", report)
    return status is None or status.group(1) in ("1", "2")


def run(a: argparse.Namespace) -> int:
    """The command a parses to, as an exit status."""
    from mpinet.adapters import run_command

    if a.command == "synthetic":
        from mpinet.datasets.synthetic import make_archive

        sizes = (a.train_per_class, a.test_per_class, a.pred_count, a.size, a.seed)
        return run_command(PROG, make_archive, a.archive, *sizes)
    if a.command == "fetch":
        from mpinet.datasets.fetch import fetch

        return run_command(PROG, fetch, a.source, a.out_dir, sha256=a.sha256 or None)
    if not os.path.isdir(a.raw_dir):
        print(
            f"{PROG}: error: {a.raw_dir}: no such directory; expected a fetched dataset (fetch it first)",
            file=sys.stderr,
        )
        return 1
    try:
        options = json.loads(a.options)
    except ValueError as e:
        print(f"{PROG}: error: --options is not JSON ({e})", file=sys.stderr)
        return 2
    if message := options_error(options):
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return 2
    return run_command(PROG, prepare, a.raw_dir, a.out_dir, a.format, options, a.source, workers=a.workers)


def prepare(raw_dir: str, out_dir: str, fmt: str, options: dict, source: str, workers=None) -> dict:
    """prepare_dataset, whose errors name the user's source instead of the fetched copy in raw_dir."""
    from mpinet import MpinetError
    from mpinet.datasets.origin import as_written
    from mpinet.datasets.prepare import prepare_dataset

    try:
        return prepare_dataset(raw_dir, out_dir, fmt, options, source, workers=workers)
    except MpinetError as e:
        raise MpinetError(as_written(str(e), raw_dir, source)) from None


def option_keys() -> tuple[str, ...]:
    """The keys --options may hold: a dataset's config keys but its source (what the workflow passes,
    mpinet.datasets.sources.prepare_options), taken from the readers that use them."""
    from mpinet.datasets import csvdata, images

    return ("format", "sha256", *csvdata.DEFAULTS, *csvdata.READING_KEYS, *images.DEFAULTS)


def options_error(options) -> str | None:
    """Why --options cannot be a dataset's options (not a JSON object, or a key no reader knows, with
    its close match), or None."""
    if not isinstance(options, dict):
        return f'--options is not a JSON object ({type(options).__name__}); expected {{"key": value, ...}}'
    known = list(dict.fromkeys(option_keys()))
    unknown = []
    for key in (k for k in options if k not in known):
        match = difflib.get_close_matches(key, known, n=1)
        unknown.append(f"{key} (did you mean {match[0]}?)" if match else key)
    if unknown:
        return f"--options: unknown key(s) {', '.join(unknown)}; expected {', '.join(known)}"
    return None


if __name__ == "__main__":
    sys.exit(main())
