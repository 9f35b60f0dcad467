"""mpinet: a small fully connected network trained data-parallel over MPI."""

__version__ = "0.10.0"


class MpinetError(Exception):
    """An error the user can act on; CLIs print it as one line and exit with status 1."""
