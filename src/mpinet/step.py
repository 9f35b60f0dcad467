"""Running a package function as a Snakemake step: log to the job's log, one-line errors."""

import sys
import traceback

from mpinet import MpinetError


def run_step(log_path: str, func, *args, **kwargs):
    """Call func with stderr going to log_path; a MpinetError becomes one line there and on the console."""
    console = sys.stderr
    with open(log_path, "w", buffering=1) as log:
        sys.stderr = log
        try:
            return func(*args, **kwargs)
        except MpinetError as e:
            print(f"error: {e}", file=log)
            print(f"error: {e}", file=console)
            sys.exit(1)
        except Exception:
            traceback.print_exc(file=log)
            raise
        finally:
            sys.stderr = console
