"""Snakemake adapter: list (and with remove_leftovers=true delete) run directories no study lists."""

from pathlib import Path

from mpinet.status import leftovers, remove

sm = snakemake  # noqa: F821 (injected by Snakemake)
runs, logs = Path(sm.params.runs_root), Path(sm.params.logs_root)
found = leftovers(runs, {Path(d) for d in sm.params.referenced})
lines = [f"leftover: {d}" for d in found] or ["no leftover run directories"]
if found and sm.params.delete:
    remove(found, logs, runs)
    lines.append(f"removed {len(found)} run directories and their logs")
Path(sm.log[0]).write_text("\n".join(lines) + "\n")
print("\n".join(lines))
