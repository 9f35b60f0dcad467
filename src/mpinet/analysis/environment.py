"""On what a study ran, from its runs' run.json: the CPU, cores and nodes, the MPI library, mpi4py,
numpy and its BLAS with the kernel it chose, the binding. Written beside the tables
(environment.csv), shown on the report's front page and under the scaling figure, and set side by
side by `make compare` before its verdicts: two timings are only comparable on the same ground."""

from pathlib import Path

import pandas as pd

# what environment.csv holds per field, in this order (a field a run did not record says "not recorded")
FIELDS = ("cpu", "cores", "nodes", "mpi", "mpi4py", "numpy", "blas", "binding", "python", "mpinet")
UNKNOWN = "not recorded"


def run_environment(meta: dict) -> dict[str, str]:
    """One run's environment as text per FIELD, from its run.json."""
    models = sorted(set((meta.get("cpu_model") or {}).values()))
    blas = meta.get("blas") or []
    mpi = meta.get("mpi") or {}
    return {
        "cpu": ", ".join(models) or UNKNOWN,
        "cores": _cores(meta),
        "nodes": str(meta.get("nodes", len(meta.get("hosts", [])) or 1)),
        "mpi": " ".join(mpi.get("library", "none (serial)" if meta.get("ranks") == 1 else UNKNOWN).split()),
        "mpi4py": mpi.get("mpi4py", "-" if meta.get("ranks") == 1 else UNKNOWN),
        "numpy": meta.get("numpy", UNKNOWN),
        "blas": "; ".join(_blas(b) for b in blas) or UNKNOWN,
        "binding": _binding(meta.get("affinity")),
        "python": meta.get("python", UNKNOWN),
        "mpinet": meta.get("mpinet", UNKNOWN),
    }


def _cores(meta: dict) -> str:
    hosts = meta.get("hosts") or []
    cores = meta.get("cores")
    if not cores:
        return UNKNOWN
    return f"{cores} on {len(hosts)} host(s)" if len(hosts) > 1 else str(cores)


def _blas(info: dict) -> str:
    """'openblas 0.3.29 Zen' : the library, its version and the kernel it chose for this CPU."""
    return " ".join(str(info[k]) for k in ("internal_api", "version", "architecture") if info.get(k))


def _binding(affinity) -> str:
    """How the ranks were bound: the CPUs each rank could run on ('1 CPU(s) per rank'; '1/2' when
    ranks differ)."""
    if not affinity:
        return UNKNOWN
    sizes = sorted({len(cpus) for cpus in affinity})
    return "/".join(map(str, sizes)) + " CPU(s) per rank"


def environment_table(metas: list[dict]) -> pd.DataFrame:
    """Per field, each value the runs recorded and how many runs had it (field, value, runs)."""
    rows = pd.DataFrame([run_environment(m) for m in metas], columns=list(FIELDS))
    out = []
    for field in FIELDS:
        for value, n in rows[field].value_counts(sort=True).items():
            out.append({"field": field, "value": value, "runs": int(n)})
    return pd.DataFrame(out, columns=["field", "value", "runs"])


def read_environment(path: str | Path) -> pd.DataFrame | None:
    """environment.csv, or None when the study was aggregated before it existed."""
    try:
        return pd.read_csv(path, dtype=str, keep_default_na=False).astype({"runs": int})
    except (OSError, ValueError, KeyError):
        return None


def values(table: pd.DataFrame, field: str) -> list[str]:
    """A field's values, the most common first."""
    return table.loc[table["field"] == field, "value"].tolist()


def short_form(table: pd.DataFrame) -> str:
    """One line: 'AMD EPYC 7B13, 2 cores · MPICH Version: 4.3.0 · openblas 0.3.29 Zen · 1 node(s)'."""

    def one(field):
        v = values(table, field)
        return v[0] + (f" (+{len(v) - 1} other)" if len(v) > 1 else "") if v else UNKNOWN

    mpi = [v for v in values(table, "mpi") if not v.startswith("none")]
    mpi_text = mpi[0] if mpi else "no MPI run"
    return f"{one('cpu')}, {one('cores')} cores · {mpi_text} · {one('blas')} · {one('nodes')} node(s)"


def differences(a: pd.DataFrame | None, b: pd.DataFrame | None) -> list[str]:
    """'mpi: A MPICH Version: 4.3.0 | B Open MPI v5.0.8': the fields whose values differ between A and B."""
    if a is None or b is None:
        missing = " and ".join(n for n, t in (("A", a), ("B", b)) if t is None)
        return [f"environment of {missing} not recorded (aggregated before mpinet 0.5.0): cannot say what differs"]
    lines = []
    for field in FIELDS:
        va, vb = values(a, field), values(b, field)
        if sorted(va) != sorted(vb):
            lines.append(f"{field}: A {' / '.join(va) or UNKNOWN} | B {' / '.join(vb) or UNKNOWN}")
    return lines


def environment_rst(table: pd.DataFrame) -> list[str]:
    """The report front page's table of the environment (rst lines)."""
    lines = ["**Where it ran** (from each run's run.json):", "", ".. list-table::", "   :header-rows: 1", ""]
    lines += ["   * - what", "     - value", "     - runs"]
    for _, r in table.iterrows():
        lines += [f"   * - {r['field']}", f"     - {_rst_text(r['value'])}", f"     - {r['runs']}"]
    return [*lines, ""]


def _rst_text(text: str) -> str:
    """A value as literal text, so '*', '|' or '_' in a library's banner stay characters."""
    return f"``{text}``" if text and text != UNKNOWN else text
