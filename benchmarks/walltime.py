"""How far the SLURM time limits (mpinet.launch.walltime) were from what the runs took.

For every run of a finished study: its measured training time (run.json train_seconds), the
estimate without safety factor from the network's size alone (what a first run asks for) and from
the calibrated cost model (what a rerun asks for, fitted on this study's runs.csv and commbench.csv),
and the minutes each would request.

    python benchmarks/walltime.py results/default        (from the study's working directory)
"""

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from mpinet.launch import walltime


def table(study_dir: Path, data_root: Path) -> pd.DataFrame:
    runs = pd.read_csv(study_dir / "metrics/runs.csv")
    calibrated, link = walltime.calibration(study_dir)
    rows = []
    for _, r in runs.iterrows():
        row = r.to_dict()
        shape = walltime.data_shape(data_root / row["dataset"], row)
        measured = json.loads((Path(row["run_dir"]) / "run.json").read_text())["train_seconds"]
        first = walltime.uncalibrated(row, shape)
        model = walltime.from_model(row, shape, calibrated, link)
        rows.append(
            {
                "dataset": row["dataset"],
                "algorithm": row["algorithm"],
                "ranks": row["ranks"],
                "epochs": row["epochs"],
                "measured_s": measured,
                "size_s": first.epoch_s * first.epochs,
                "size_min": first.minutes(),
                "model_s": model.epoch_s * model.epochs if model else float("nan"),
                "model_min": model.minutes() if model else float("nan"),
            }
        )
    df = pd.DataFrame(rows)
    df["size/measured"] = df["size_s"] / df["measured_s"]
    df["model/measured"] = df["model_s"] / df["measured_s"]
    return df


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("study_dir", type=Path, help="results/<study> of a finished study")
    p.add_argument("--data", type=Path, default=Path("resources/data"), help="the prepared datasets' root")
    args = p.parse_args(argv)
    if not (args.study_dir / "metrics/runs.csv").exists():
        print(f"walltime.py: error: {args.study_dir}/metrics/runs.csv does not exist; run the study", file=sys.stderr)
        return 2
    df = table(args.study_dir, args.data)
    print(df.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    print(
        f"\nmedian estimate / measured: from the size {df['size/measured'].median():.2f} "
        f"(range {df['size/measured'].min():.2f}-{df['size/measured'].max():.2f}), from the model "
        f"{df['model/measured'].median():.2f} (range {df['model/measured'].min():.2f}-{df['model/measured'].max():.2f})"
    )
    print(
        f"minutes requested for all {len(df)} runs: {int(df['size_min'].sum())} (first run), "
        f"{int(df['model_min'].sum())} (calibrated); measured {df['measured_s'].sum() / 60:.1f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
