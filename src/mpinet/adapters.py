"""Package functions as workflow jobs: as a Snakemake script (run_script) or as the command a shell
rule runs (run_command). Either way a MpinetError is one line on the console, and anything else a
traceback in the job's log."""

import sys
import traceback

from mpinet import MpinetError


def run_script(log_path: str, func, *args, **kwargs):
    """Call func with stderr going to log_path; a MpinetError becomes one line there and on the console."""
    console = sys.stderr
    with open(log_path, "w", buffering=1) as log:
        sys.stderr = log
        try:
            return func(*args, **kwargs)
        except MpinetError as e:
            lines = "\n".join(f"error: {line}" for line in str(e).splitlines())  # one per mistake
            print(lines, file=log)
            print(lines, file=console)
            sys.exit(1)
        except Exception:
            traceback.print_exc(file=log)
            raise
        finally:
            sys.stderr = console


def run_command(prog: str, func, *args, **kwargs) -> int:
    """Call func for a command line; a MpinetError becomes `prog: error: ...` on stderr and exit
    status 1 (the rule's shell repeats that line on the console)."""
    try:
        func(*args, **kwargs)
    except MpinetError as e:
        print(f"{prog}: error: {e}", file=sys.stderr, flush=True)
        return 1
    return 0
