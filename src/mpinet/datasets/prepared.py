"""Finishing a prepared dataset: the arrays written in a staging directory move into place, classes and
summary last, so a dataset directory is never seen half written (read back by mpinet.datasets.dataset)."""

import os
from pathlib import Path

from mpinet.datasets.dataset import FILES, ContentDigest, fingerprint
from mpinet.files import write_json


def write(
    out_dir: str | Path, staging: Path, classes: list[str], summary: dict, digest: ContentDigest | None = None
) -> None:
    """Finish a dataset: move the four arrays from `staging` into out_dir, then classes and summary last.

    The summary records the content fingerprint, so training need not read the arrays to know it:
    from `digest` when the writer fed it the four arrays as it wrote them, else read from the files.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json(staging / "classes.json", classes)
    if digest is not None:
        digest.add_file(staging / "classes.json")
    summary = {**summary, "fingerprint": digest.hexdigest() if digest is not None else fingerprint(staging)}
    for name in FILES[:5]:
        os.replace(staging / name, out / name)
    write_json(out / "summary.json", summary)
