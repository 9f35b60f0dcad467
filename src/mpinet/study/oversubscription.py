"""A plan that puts more processes on this machine than it has cores: allowed (each run records its
cores and the figures mark it oversubscribed), and said once when the workflow plans it."""

import pandas as pd

SHOWN = 6  # kinds of experiment the line names; past that it counts the rest
# set for a Snakemake that trains nothing on this machine (the data and tables a SLURM launcher builds
# on the login node; make status and make leftovers): the line is not about it
TRAINS_ELSEWHERE = "MPINET_TRAINS_ELSEWHERE"


def oversubscription_lines(experiments: pd.DataFrame, cores: int | None) -> list[str]:
    """One line naming the experiments whose ranks × BLAS threads exceed `cores` (the runs that
    runs.csv's `oversubscribed` will mark), by dataset, design and ranks; none when all fit or when
    `cores` is None (the jobs run elsewhere, on SLURM)."""
    if not cores:
        return []
    over = experiments[experiments["ranks"] * experiments["blas_threads"] > cores]
    if over.empty:
        return []
    kinds = over.drop_duplicates(["dataset", "algorithm", "ranks", "blas_threads"])
    names = [_kind(row) for row in kinds.to_dict("records")]
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    n = len(over)
    they = ("need", "they run", "them") if n != 1 else ("needs", "it runs", "it")
    return [
        f"{n} experiment{'s' if n != 1 else ''} {they[0]} more ranks than this machine's {cores} cores: "
        f"{', '.join(names[:SHOWN])}{more}; {they[1]} oversubscribed, and the figures mark {they[2]}"
    ]


def _kind(row: dict) -> str:
    threads = f" × {row['blas_threads']} BLAS threads" if row["blas_threads"] > 1 else ""
    return f"{row['dataset']} {row['algorithm']} {row['ranks']} ranks{threads}"
