"""The benchmark script runs and reports every design (a smoke test on a tiny workload, not a timing)."""

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO, env


@pytest.mark.mpi
def test_benchmark_script_writes_its_table(tmp_path):
    cmd = [sys.executable, str(REPO / "benchmarks" / "bench.py"), "--samples", "64", "--features", "500"]
    cmd += ["--repeats", "1", "--epochs", "1", "--batches", "4", "--dtypes", "float32", "--no-torch"]
    cmd += ["--unfused", "--before", str(REPO / "src")]  # the variants' code path (here: this engine twice)
    p = subprocess.run([*cmd, "--out", str(tmp_path)], capture_output=True, text=True, env=env(), timeout=300)
    assert p.returncode == 0, p.stderr
    table = next(tmp_path.glob("bench-*.md")).read_text()
    for design in ("serial | 1", "allreduce | 2", "allgather | 2", "sharded | 2", "paramserver | 2"):
        assert f"| float32 | 4 | {design} | 1 | " in table  # one run each (--repeats 1, no noise check needed)
    for row in ("| float32 | 4 | serial [unfused] | 1 |", "| float32 | 4 | serial [before] | 1 |"):
        assert row in table
    assert "| before ÷ ours |" in next(line for line in table.splitlines() if line.startswith("| dtype |"))
    assert "PyTorch DDP: skipped" in table and "GEMM limit, one thread" in table
    assert "roofline %" in table and "at the parameter buffer's size" in table
    kernels = [row.split(" | ") for row in table.splitlines() if row.startswith("| float32/4 |")]
    named = [(k[1], k[2]) for k in kernels]
    alone = [("allreduce", n) for n in ("forward", "backward", "update", "step")]
    at_once = [("allreduce, 2 ranks at once", n) for n in ("forward", "backward", "update", "step")]
    assert named == [("serial", "forward"), ("serial", "backward + update"), ("serial", "step"), *alone, *at_once]
    assert all(float(k[3]) > 0 and float(k[4]) > 0 for k in kernels)  # bound and measured milliseconds
    assert next(tmp_path.glob("bench-*.json")).stat().st_size > 0


def test_the_benchmark_repeats_a_configuration_until_its_median_holds_still():
    """A steady configuration stops at --repeats runs; a noisy one runs again, round after round, up to
    --max-repeats, and is then reported as noisy; the interval is the bootstrap's over runs and epochs."""
    import argparse

    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench

    rng = np.random.default_rng(0)

    def fake(kind, args, impl, rep):
        algorithm, ranks, batch, dtype = args[:4]
        epochs = [1.0, 1.0] if algorithm == "serial" else list(rng.uniform(0.5, 1.5, 2))
        common = {"impl": impl, "design": algorithm, "ranks": ranks, "batch": batch, "dtype": dtype}
        return {**common, "repeat": rep, "epoch_s": float(np.median(epochs)), "epochs_s": epochs}

    cells = [("ours", ("serial", 1, 4, "float32"), "mpinet"), ("ours", ("allreduce", 2, 4, "float32"), "mpinet")]
    a = argparse.Namespace(repeats=3, max_repeats=6, precision=0.05)
    runs = bench.run_rounds(cells, a, fake)
    assert [r["repeat"] for r in runs if r["design"] == "serial"] == [0, 1, 2]
    assert [r["repeat"] for r in runs if r["design"] == "allreduce"] == [0, 1, 2, 3, 4, 5]
    steady = bench.spread([r for r in runs if r["design"] == "serial"])
    assert steady["median"] == steady["low"] == steady["high"] == 1.0 and steady["half_width"] == 0
    noisy = bench.spread([r for r in runs if r["design"] == "allreduce"])
    assert noisy["low"] < noisy["median"] < noisy["high"] and noisy["half_width"] > 0.05


def test_cold_rows_script_times_every_mode_per_batch():
    cmd = [sys.executable, str(REPO / "benchmarks" / "cold_rows.py"), "--samples", "64", "--features", "3000"]
    cmd += ["--batches", "4", "32", "--block", "1000", "--repeats", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=120)
    assert p.returncode == 0, p.stderr
    rows = [line.split("|")[1:-1] for line in p.stdout.splitlines() if line.startswith("| ") and "batch" not in line]
    assert [(r[0].strip(), r[1].strip()) for r in rows] == [(d, b) for d in ("float32", "float64") for b in ("4", "32")]
    assert all(float(c) > 0 for r in rows for c in r[3:])


def test_shared_cache_script_times_each_mode_per_width_and_batch():
    cmd = [sys.executable, str(REPO / "benchmarks" / "shared_cache.py"), "--samples", "64", "--features", "3000"]
    cmd += ["--batches", "4", "16", "--hidden", "8", "4", "--steps", "3", "--blocks", "2", "--repeats", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=120)
    assert p.returncode == 0, p.stderr
    rows = [line.split("|")[1:-1] for line in p.stdout.splitlines() if line.startswith("| ") and "batch" not in line]
    assert [(r[0].strip(), r[3].strip()) for r in rows] == [(f"3000-{h}", b) for h in (8, 4) for b in ("4", "16")]
    assert all(float(c) > 0 for r in rows for c in r[4:])


@pytest.mark.mpi
def test_model_accuracy_script_prints_every_configuration():
    cmd = [sys.executable, str(REPO / "benchmarks" / "model_accuracy.py"), "--samples", "64", "--features", "20"]
    p = subprocess.run(
        [*cmd, "--epochs", "2", "--repeats", "1"], capture_output=True, text=True, env=env(), timeout=300
    )
    assert p.returncode == 0, p.stderr
    rows = [line.split(" | ") for line in p.stdout.splitlines() if line.startswith("| ") and "design" not in line]
    assert [(r[0].strip("| "), r[1]) for r in rows] == [("serial", "1"), ("allreduce", "1"), ("allreduce", "2")]


@pytest.mark.mpi
def test_the_recording_benchmark_compares_this_engine_with_a_release(tmp_path):
    cmd = [sys.executable, str(REPO / "benchmarks" / "recording.py"), "--release", "HEAD", "--samples", "64"]
    p = subprocess.run([*cmd, "--launches", "2", "--epochs", "3"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "this / release" in p.stdout and "serial on 1" in p.stdout and "allreduce on 2" in p.stdout


@pytest.mark.mpi
def test_node_benchmark_runs_from_a_bare_checkout_and_writes_every_design(tmp_path):
    """benchmarks/node.py on a tiny workload, its package from src/ alone (no install, no Snakemake,
    seaborn or YAML importable): a row per design and rank count with its model and speedup, the
    calibration table, and the JSON."""
    blocked = ("snakemake", "yaml", "jsonschema", "seaborn", "matplotlib", "PIL", "psutil")
    code = (
        "import runpy, sys\n"
        f"for m in {blocked!r}: sys.modules[m] = None\n"
        f"sys.argv = ['node.py', '--features', '600', '--steps', '2', '--epochs', '1', '--no-torch', '--out', "
        f"{str(tmp_path)!r}]\n"
        f"runpy.run_path({str(REPO / 'benchmarks' / 'node.py')!r}, run_name='__main__')\n"
    )
    e = {k: v for k, v in env().items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    table = next(tmp_path.glob("node-*.md")).read_text()
    rows = [r.split(" | ") for r in table.splitlines() if r.startswith("| ") and " | 600" not in r]
    cells = {(r[0][2:], r[1], r[2]) for r in rows if r[1].isdigit() and len(r) == 10}
    from mpinet.engine.options import ALGORITHMS

    expected = {("serial", "1", b) for b in ("32", "4")}
    expected |= {(d, "2", b) for d in ALGORITHMS if d != "serial" for b in ("32", "4")}
    assert cells == expected
    assert all(float(r[5]) > 0 and r[7] != "-" for r in rows if r[1].isdigit() and len(r) == 10)  # speedup, model
    assert {r[3] for r in rows if r[0] == "| grid"} == {"grid 1x2"}  # the shape it trained with
    assert "Calibration" in table and "Best design per rank count" in table
    assert json.loads(next(tmp_path.glob("node-*.json")).read_text())["cells"]
    assert p.stdout.count(" epoch ") >= len(expected)  # a line per finished cell
