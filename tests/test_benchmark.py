"""The benchmark script runs and reports every design (a smoke test on a tiny workload, not a timing)."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
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
    from mpinet.engine.designs import EXCHANGES

    for design in ("serial | 1", "allreduce | 1", *(f"{d} | 2" for d in EXCHANGES if d != "serial")):
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
    # the JSON alone makes the same report: the docs' table is generated from it
    result = next(tmp_path.glob("bench-*.json"))
    assert json.loads(result.read_text())["machine"]["cpu"]  # the machine kept beside the runs
    again = [*cmd[:2], "--markdown-from", str(result)]
    p = subprocess.run(again, capture_output=True, text=True, env=env(), timeout=60)
    assert p.returncode == 0 and table.endswith(p.stdout) and table.startswith("## mpinet benchmark"), p.stderr


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
def test_node_benchmark_runs_from_a_bare_checkout_and_writes_both_axes(tmp_path):
    """benchmarks/node.py on a tiny workload, its package from src/ alone (no install, no Snakemake,
    seaborn or YAML importable): a row per design and rank count on the throughput axis, the fixed
    global batch 8 (2 ranks at 4 against serial at 8) beside it, launches round-robin, the calibration
    table, and the JSON with every launch's epochs."""
    blocked = ("snakemake", "yaml", "jsonschema", "seaborn", "matplotlib", "PIL", "psutil")
    args = ["--ranks", "2", "--batches", "8", "4", "--features", "600", "--steps", "2", "--epochs", "1"]
    args += ["--launches", "2", "--no-torch", "--out", str(tmp_path)]
    code = (
        "import runpy, sys\n"
        f"for m in {blocked!r}: sys.modules[m] = None\n"
        f"sys.argv = ['node.py', *{args!r}]\n"
        f"runpy.run_path({str(REPO / 'benchmarks' / 'node.py')!r}, run_name='__main__')\n"
    )
    e = {k: v for k, v in env().items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    table = next(tmp_path.glob("node-*.md")).read_text()
    rows = [r.split(" | ") for r in table.splitlines() if r.startswith("| ") and len(r.split(" | ")) >= 16]
    rows = [r for r in rows if r[2].isdigit()]
    from mpinet.engine.options import ALGORITHMS

    designs = [d for d in ALGORITHMS if d != "serial"]
    throughput = {(r[1], r[2], r[3]) for r in rows if r[0] == "| throughput"}
    assert throughput == {("serial", "1", b) for b in ("8", "4")} | {(d, "2", b) for d in designs for b in ("8", "4")}
    fixed = {(r[1], r[2], r[3]) for r in rows if r[0] == "| global"}
    assert fixed == {("serial", "1", "8")} | {(d, "2", "4") for d in designs if d != "paramserver"}
    assert all(r[6] == "2" and r[13] != "-" for r in rows)  # two launches each, the model's prediction
    assert all(r[8] == "serial b=8 (" + r[8].split("(")[1] for r in rows if r[0] == "| global" and r[1] != "serial")
    assert {r[5] for r in rows if r[1] == "grid"} == {"grid 1x2"}  # the shape it trained with
    assert "Calibration" in table and "Best design per axis" in table and "over best serial" in table
    report = json.loads(next(tmp_path.glob("node-*.json")).read_text())
    assert report["global_batches"] == [8] and report["date"] and report["machine"]
    assert all(len(c["launches_s"]) == 2 and len(c["launches_s"][0]) == 1 for c in report["cells"])
    launched = [line.split()[4] for line in p.stdout.splitlines() if " launch " in line]  # "serial P=1 b=8 launch 1:"
    assert launched == ["1:"] * (len(launched) // 2) + ["2:"] * (len(launched) // 2)  # round-robin


def _node():
    """benchmarks/node.py as a module, this process's environment and path left as they were."""
    return _benchmark("node")


def _benchmark(name: str):
    """benchmarks/<name>.py as a module, this process's environment and path left as they were."""
    import importlib.util
    import os

    saved, path = dict(os.environ), list(sys.path)
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        sys.path[:] = path
    return module


def _cell(design, ranks, batch, us_launches, samples=1000):
    """A fabricated cell: each launch's epoch seconds from its µs a sample."""
    launches = [[u * samples / 1e6 for u in launch] for launch in us_launches]
    return {
        "design": design,
        "ranks": ranks,
        "batch": batch,
        "samples": samples,
        "chose": [design] * len(launches),
        "launches_s": launches,
        "model_s": 0.1,
    }


def _report(cells, batches=(64, 32), global_batches=(64,), launches=3):
    args = {"batches": list(batches), "features": 600, "hidden": [30, 20], "steps": 16, "epochs": 3}
    args |= {"launches": launches, "budget": 460.0}
    return {
        "date": "2026-01-01",
        "machine": "a test machine",
        "args": args,
        "ranks": [2],
        "global_batches": list(global_batches),
        "calibration": {},
        "cells": cells,
    }


def test_the_node_benchmark_reads_both_axes_off_the_issue_command_and_runs_launches_round_robin():
    """--ranks 2 --batches 64 32: serial at 64 and 32 and every design at 2 x 64 and 2 x 32, which give
    the throughput axis at both batches and the fixed global batch 64 (2 x 32 against serial at 64)
    with no extra cell; a global batch asked for adds serial at G and the designs at G/P, on one set."""
    import argparse

    node = _node()
    a = argparse.Namespace(batches=[64, 32], global_batches=[], designs=["node", "paramserver"], steps=16)
    plan = node.make_plan(a, [2], False)
    assert plan["global_batches"] == [64]
    assert plan["order"] == [
        ("serial", 1, 64),
        ("serial", 1, 32),
        ("node", 2, 64),
        ("paramserver", 2, 64),
        ("node", 2, 32),
        ("paramserver", 2, 32),
    ]
    assert plan["samples"][("serial", 1, 64)] == 2 * plan["samples"][("node", 2, 32)] == 16 * 64 * 2
    a.global_batches = [256, 128]  # 2 x 128 a cell of its own; 2 x 64 measured already
    plan = node.make_plan(a, [2], False)
    assert plan["global_batches"] == [256, 128, 64]
    assert plan["order"][2:4] == [("serial", 1, 256), ("serial", 1, 128)]
    assert ("node", 2, 128) in plan["order"] and ("paramserver", 2, 128) not in plan["order"]  # no global batch
    assert plan["samples"][("serial", 1, 256)] == plan["samples"][("node", 2, 128)] == 16 * 256  # one set
    assert node.interleave(["a", "b", "c"], 2) == [(0, "a"), (0, "b"), (0, "c"), (1, "a"), (1, "b"), (1, "c")]


def test_the_node_benchmark_launches_serial_through_the_mpi_launcher_bound_like_the_ranks(tmp_path):
    import argparse

    node = _node()
    a = argparse.Namespace(hidden=[30, 20], epochs=3)
    serial = node.train_argv(tmp_path, tmp_path / "out", "serial", 1, 64, a, 2)
    ranks = node.train_argv(tmp_path, tmp_path / "out", "node", 2, 32, a, 2)
    assert serial[: len(node.launcher(1, 2))] == node.launcher(1, 2)
    assert "mpiexec" in serial[0] and serial[serial.index("-n") + 1] == "1"
    assert serial[serial.index("mpi4py") + 1 : serial.index("mpi4py") + 3] == ["-m", "mpinet.train"]
    bind = [x for x in node.launcher(2, 2) if "bind" in x]
    assert bind and all(x in serial for x in bind)  # bound as the ranks are
    assert ranks[: len(node.launcher(2, 2))] == node.launcher(2, 2)


def test_node_benchmark_speedups_divide_per_sample_medians_with_intervals_over_launches():
    """Fabricated launches: exact times give exact ratios; spread between launches widens the interval
    and stays inside it; the best serial run at any batch is the second base."""
    node = _node()
    serial64 = node.summarize(_cell("serial", 1, 64, [[175.0] * 3] * 3, samples=2048))
    serial32 = node.summarize(_cell("serial", 1, 32, [[125.0] * 3] * 3, samples=1024))
    two = node.summarize(_cell("node", 2, 32, [[100.0] * 3] * 3, samples=1024))
    assert serial64["us"] == 175.0 and serial64["low"] == serial64["high"] == 175.0
    assert node.ratio(serial64, two) == (1.75, 1.75, 1.75)
    assert node.ratio(serial32, two) == (1.25, 1.25, 1.25)
    assert node.ratio(two, two) == (1.0, 1.0, 1.0)
    noisy = node.summarize(_cell("node", 2, 32, [[90.0, 91, 89], [100, 101, 99], [110, 111, 109]]))
    speedup, low, high = node.ratio(serial64, noisy)
    assert speedup == 175 / 100 and low < 175 / 110 * 1.01 and high > 175 / 90 * 0.99 and low < speedup < high
    cells = [_cell("serial", 1, 64, [[175.0] * 3] * 3, samples=2048), _cell("serial", 1, 32, [[125.0] * 3] * 3)]
    table = node.rows(_report([*cells, _cell("node", 2, 32, [[100.0] * 3] * 3)]))
    fixed = next(r for r in table if r["axis"] == "global" and r["cell"]["design"] == "node")
    assert fixed["speedup"] == (1.75, 1.75, 1.75) and fixed["over_best"] == (1.25, 1.25, 1.25)
    assert fixed["efficiency"] == 1.75 / 2 and fixed["base"]["batch"] == 64
    through = next(r for r in table if r["axis"] == "throughput" and r["cell"]["design"] == "node")
    assert through["speedup"] == (1.25, 1.25, 1.25) and through["base"]["batch"] == 32


def test_a_node_benchmark_cell_is_unsettled_when_its_launches_disagree_beyond_their_own_intervals():
    node = _node()
    assert node.unsettled([[1.0, 1.01, 0.99], [1.5, 1.51, 1.49]]) is True
    assert node.unsettled([[1.0, 1.2, 0.9], [1.1, 1.3, 1.0], [1.05, 0.95, 1.15]]) is False
    assert node.unsettled([[1.0, 1.01, 0.99]]) is None  # one launch: nothing to compare


def test_the_node_benchmark_table_names_each_axis_and_base_and_renders_from_json(tmp_path):
    node = _node()
    report = _report(
        [
            _cell("serial", 1, 64, [[175.0] * 3] * 3, samples=2048),
            _cell("serial", 1, 32, [[125.0] * 3] * 3, samples=1024),
            _cell("node", 2, 64, [[150.0] * 3] * 3, samples=2048),
            _cell("node", 2, 32, [[100.0, 101, 99], [150, 151, 149], [100, 101, 99]], samples=1024),
        ]
    )
    text = node.markdown(report)
    rows = [r.split(" | ") for r in text.splitlines() if r.startswith("| ") and r.split(" | ")[2].isdigit()]
    assert [(r[0], r[1], r[2], r[3], r[4]) for r in rows] == [
        ("| throughput", "serial", "1", "64", "64"),
        ("| throughput", "node", "2", "64", "128"),
        ("| throughput", "serial", "1", "32", "32"),
        ("| throughput", "node", "2", "32", "64"),
        ("| global", "serial", "1", "64", "64"),
        ("| global", "node", "2", "32", "64"),
    ]
    fixed = rows[-1]
    assert (
        fixed[8] == "serial b=64 (175.0)" and fixed[9].startswith("1.73 [") and fixed[10].startswith("1.24 [")
    )  # ÷ 101 µs, the pooled median
    assert fixed[12] == "**unsettled**" and rows[3][12] == "**unsettled**" and rows[1][12] == "no"
    assert rows[0][8] == "itself (175.0)" and rows[0][9] == "1 (base)"
    assert "(serial at batch 32, 125.0 µs/sample)" in text and "**global** = fixed global batch" in text
    doc = tmp_path / "doc.md"
    data = tmp_path / "run.json"
    data.write_text(json.dumps(report))
    doc.write_text(f"before\n{node.BEGIN}{data} -->\nold table\n{node.END}\nafter\n")
    node.render(str(data), str(doc))
    assert doc.read_text() == f"before\n{node.BEGIN}{data} -->\n\n{text}\n{node.END}\nafter\n"


def _calibration(grad_s, allreduce_s, b=8) -> dict:
    """One rank count's calibration: every kernel 1 ms but the gradient step, the given Allreduce."""
    kernels = {k: {str(b): 0.001} for k in ("fused_s", "partial_s", "node_s")}
    return (
        kernels
        | {"grad_s": {str(b): grad_s}, "shard_s": {str(b): {}}, "update_s": 0.001}
        | {
            "allreduce_s": allreduce_s,
            "message_s": 0.0005,
            "latency_s": 0.00001,
        }
    )


def test_the_node_benchmark_scores_a_model_held_out_from_the_rank_counts_above_its_calibration():
    """4 cores: the held-out model is calibrated on P <= 2 and scored on P = 4 alone. Its allreduce step
    at P = 4 is the gradient step and update timed on 2 ranks at once and the Allreduce measured on 4:
    32 steps of 1000 samples at 4 x 8, (4 + 1 + 2) ms each = 224 µs a sample against 200 measured."""
    node = _node()
    report = _report(
        [
            _cell("serial", 1, 8, [[300.0] * 3] * 3),
            _cell("allreduce", 2, 8, [[250.0] * 3] * 3),
            _cell("allreduce", 4, 8, [[200.0] * 3] * 3),
        ],
        batches=(8,),
        global_batches=(),
    )
    report |= {"cores": 4, "ranks": [2, 4]}
    report["calibration"] = {1: _calibration(0.003, 0.0), 2: _calibration(0.004, 0.001), 4: _calibration(0.010, 0.002)}
    text = node.markdown(report)
    head, *rows = [r.split(" | ") for r in text.splitlines() if r.startswith(("| axis", "| throughput"))]
    held = {r[1] + r[2]: r[head.index("held-out error")] for r in rows}
    assert held == {"serial1": "-", "allreduce2": "-", "allreduce4": "12 %"}  # 224 / 200 - 1
    assert "Median absolute error over the 1 held-out cell(s): 12 %" in text
    report["cores"] = 8  # calibrated on P <= 4: nothing held out, no column
    assert "held-out" not in node.markdown(report)


def test_the_held_out_model_slows_the_kernels_by_the_copy_rate_lost_at_the_cells_ranks():
    """With a copy timed at every count, the held-out kernels slow as the workflow model's contention
    says: here the copy rate halves from 2 ranks to 4, so the update pass (all of it streamed) takes
    2 ms, and the gradient step, of which 292.8 kB of rows and weights stream in its 4 ms (0.37 %),
    4.0146 ms: 32 x (4.0146 + 2 + 2) ms for 1000 samples, 256.5 µs a sample against 200 measured."""
    node = _node()
    report = _report(
        [_cell("serial", 1, 8, [[300.0] * 3] * 3), _cell("allreduce", 4, 8, [[200.0] * 3] * 3)],
        batches=(8,),
        global_batches=(),
    )
    report |= {"cores": 4, "ranks": [2, 4]}
    copy = 2 * node.STREAM_BYTES  # read and written
    report["calibration"] = {
        1: _calibration(0.003, 0.0) | {"stream_s": copy / 25e9},
        2: _calibration(0.004, 0.001) | {"stream_s": copy / 20e9},
        4: _calibration(0.010, 0.002) | {"stream_s": copy / 10e9},
    }
    text = node.markdown(report)
    head, *rows = [r.split(" | ") for r in text.splitlines() if r.startswith(("| axis", "| throughput"))]
    held = {r[1] + r[2]: r[head.index("held-out error")] for r in rows}
    assert held["allreduce4"] == "28 %"  # 256.5 / 200 - 1
    assert "slowed by the drop in the copy rate" in text
    del report["calibration"][2]["stream_s"]  # an older run: no copy timed, no contention
    assert "12 %" in node.markdown(report).split("Median absolute error")[1]


def test_the_docs_node_tables_are_generated_from_their_committed_json():
    """docs/performance.md's node tables are the generator's output of the raw JSON committed beside
    them (docs/data/node/), not typed by hand."""
    node = _node()
    doc = (REPO / "docs" / "performance.md").read_text()
    sections = doc.split(node.BEGIN)[1:]
    assert sections, "docs/performance.md has no generated node table"
    for section in sections:
        path = section.split()[0]
        assert (REPO / path).exists() and path.startswith("docs/data/node/")
        body = section[section.index("\n") + 1 : section.index(node.END)]
        assert body == "\n" + node.markdown(json.loads((REPO / path).read_text())) + "\n"


def _launch(design: str, epochs_s: list, trials=None, weights="w") -> dict:
    return {"design": design, "epochs_s": epochs_s, "trials_s": trials, "weights": weights}


def test_auto_s_verdict_charges_the_trials_over_the_epochs_and_reads_the_chosen_design_s_interval():
    auto = _benchmark("auto")
    args = {"epochs": 4, "ranks": 2, "batch": 32, "steps": 16, "out": "auto.json"}
    times = [1.0, 1.02, 0.98, 1.01]
    chosen = [_launch("node", times) for _ in range(5)]
    runs = [_launch("node", times, trials=2.5)] + [_launch("node", times) for _ in range(4)]
    v = auto.verdict({"args": args, "auto": runs, "chosen": chosen})
    assert v["trials_s"] == 2.5 and v["deciding_launches"] == 1 and v["designs"] == ["node"]
    assert v["auto_charged_epoch_s"] == pytest.approx(1.005 + 0.5)  # 2.5 s over 5 epochs, warm-up included
    low, high = v["chosen_plus_trials_ci"]
    assert v["within"] and low <= 1.505 <= high and v["same_weights"] and v["as_the_design_by_hand"]
    slow = [dict(r, epochs_s=[1.3] * 4) for r in runs]
    assert not auto.verdict({"args": args, "auto": slow, "chosen": chosen})["within"]
    mixed = runs[:4] + [_launch("sharded", times, weights="v")]
    v = auto.verdict({"args": args, "auto": mixed, "chosen": chosen})
    assert v["designs"] == ["node", "sharded"] and not v["same_weights"] and not v["as_the_design_by_hand"]
    report = {
        "args": args,
        "auto": runs,
        "chosen": chosen,
        "verdict": auto.verdict({"args": args, "auto": runs, "chosen": chosen}),
        "machine": {"machine": "m", "commit": "c" * 40, "date": "d"},
    }
    assert "| 5 auto, 5 node | node | yes (yes) | 2.50 (1 launch decided) | 1.505 |" in auto.markdown(report)


def test_the_docs_auto_table_is_generated_from_its_committed_json():
    """docs/engine.md's verdict on auto is the generator's output of docs/data/auto.json, with its machine."""
    auto = _benchmark("auto")
    doc = (REPO / "docs" / "engine.md").read_text()
    (section,) = doc.split(auto.BEGIN)[1:]
    path = section.split()[0]
    assert path == "docs/data/auto.json"
    report = json.loads((REPO / path).read_text())
    assert report["machine"]["machine"] and report["verdict"] == auto.verdict(report)
    body = section[section.index("\n") + 1 : section.index(_node().END)]
    assert body == "\n" + auto.markdown(report) + "\n"


def test_a_finished_study_s_model_error_is_written_with_its_machine_and_scored_as_the_front_page_scores_it(
    tmp_path,
):
    """model_accuracy.py --from-study: every run on several ranks the model priced, the machine from the
    study's environment.csv; the table lists the scored runs and the median the report gives."""
    from mpinet.analysis.costmodel import held_out_error

    model = _benchmark("model_accuracy")
    metrics = tmp_path / "s" / "metrics"
    metrics.mkdir(parents=True)
    base = dict(dataset="iris", global_batch=8, seed=1, repeat=1, faithful=False, train_samples=0, samples_per_rank=0)
    base |= dict(batch_size=4, median_epoch_s=0.01, isolated=True, contention="clean", oversubscribed=False)
    base |= dict(median_compute_s=0.008, median_comm_s=0.002)
    rows = [
        dict(base, algorithm="serial", ranks=1, model_epoch_s=0.01, model_error=float("nan")),
        dict(base, algorithm="allreduce", ranks=2, model_epoch_s=0.008, model_error=-0.2),
        dict(base, algorithm="allreduce", ranks=2, seed=2, model_epoch_s=0.011, model_error=0.1, faithful=True),
        dict(base, algorithm="allreduce", ranks=3, model_epoch_s=0.002, model_error=-0.8, oversubscribed=True),
    ]
    pd.DataFrame(rows).to_csv(metrics / "runs.csv", index=False)
    env = [("cpu", "CPU X"), ("cores", 2), ("mpi", "MPICH 5"), ("blas", "openblas"), ("python", "3.11")]
    pd.DataFrame(env, columns=["field", "value"]).assign(runs=4).to_csv(metrics / "environment.csv", index=False)
    bench = {"bytes": [8, 512 << 10], "ranks": [2, 2], "one_way_s": [2e-6, 1e-4]}
    pd.DataFrame(bench).to_csv(metrics / "commbench.csv", index=False)
    report = model.from_study(tmp_path / "s")
    assert report["study"] == "s" and report["machine"].startswith("CPU X; openblas; MPICH 5; 2 cores")
    assert [c["ranks"] for c in report["cells"]] == [2, 2, 3]
    assert held_out_error(pd.DataFrame(report["cells"]))["median_abs"] == pytest.approx(0.15)
    text = model.markdown(json.loads(json.dumps(report)))
    assert "| iris | - | allreduce | 2 | 4 | 8 | 1 | 10.00 | 8.00, 2.00 | 8.00 | -20 % |" in text
    assert "| iris | faithful | allreduce | 2 | 4 | 8 | 2 | 10.00 | 8.00, 2.00 | 11.00 | +10 % |" in text
    assert "moved 512 KiB one way between 2 ranks in 100 µs." in text
    # a file written before the split and the link were kept: the table says so with a dash
    older = dict(
        report, link=None, cells=[{k: v for k, v in c.items() if k not in model.SPLIT_COLUMNS} for c in report["cells"]]
    )
    assert "| iris | - | allreduce | 2 | 4 | 8 | 1 | 10.00 | - | 8.00 | -20 % |" in model.markdown(older)
    assert "over these 2 runs: **15 %**; 1 more" in text and "| 3 |" not in text
    # bad input: one line naming the file and what it lacks
    with pytest.raises(SystemExit, match=r"^error: .*none/metrics/runs.csv: no such file"):
        model.from_study(tmp_path / "none")
    (tmp_path / "empty.json").write_text("{}")
    with pytest.raises(SystemExit, match=r"empty.json: not a --from-study JSON \(no study, mpinet"):
        model.read_report(tmp_path / "empty.json")
    for text, why in (("[]", "no study"), (json.dumps(dict(report, cells=5)), "its cells are no list")):
        (tmp_path / "odd.json").write_text(text)
        with pytest.raises(SystemExit, match=rf"odd.json: not a --from-study JSON \({why}"):
            model.read_report(tmp_path / "odd.json")


def test_the_docs_model_table_is_generated_from_its_committed_json():
    """docs/performance.md's table of the report's model on a study is the generator's output of the
    JSON committed beside it (docs/data/model/)."""
    model = _benchmark("model_accuracy")
    doc = (REPO / "docs" / "performance.md").read_text()
    sections = doc.split(model.BEGIN)[1:]
    assert sections, "docs/performance.md has no generated model table"
    for section in sections:
        path = section.split()[0]
        assert path.startswith("docs/data/model/")
        body = section[section.index("\n") + 1 : section.index(_node().END)]
        assert body == "\n" + model.markdown(json.loads((REPO / path).read_text())) + "\n"


def test_the_lent_node_script_unpacks_the_wheels_it_is_given_and_refuses_a_folder_without_them(tmp_path):
    """benchmarks/lent_node.sh on a machine with no MPI: the wheels' programs keep their execute bits,
    MPICH's bin/ comes first on PATH and the unpacked packages import (fake wheels: a `mpiexec` that
    says its version, an mpi4py that says its own); node.py then runs with the script's arguments."""
    import stat
    import zipfile

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "mpich-9.9-py3-none-any.whl", "w") as z:
        info = zipfile.ZipInfo("mpich-9.9.data/data/bin/mpiexec")
        info.external_attr = (stat.S_IFREG | 0o755) << 16
        z.writestr(info, "#!/bin/sh\necho 'HYDRA build details:'\necho '    Version:     9.9'\n")
        z.writestr("mpich-9.9.data/data/lib/libmpi.so.12", "")
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    with zipfile.ZipFile(wheels / f"mpi4py-8.8-{tag}-{tag}-linux_x86_64.whl", "w") as z:
        z.writestr("mpi4py/__init__.py", "__version__ = '8.8'\n")
    script = REPO / "benchmarks" / "lent_node.sh"
    run = dict(capture_output=True, text=True, timeout=120)
    e = {**env(), "PYTHON": sys.executable}
    p = subprocess.run(["bash", script, "--help"], env={**e, "WHEELS": str(wheels)}, **run)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == "lent_node: MPICH 9.9, mpi4py 8.8" and "--global-batches" in p.stdout
    p = subprocess.run(["bash", script, "--help"], env={**e, "WHEELS": str(tmp_path)}, **run)
    assert p.returncode == 1 and p.stderr.strip().count("\n") == 0
    assert p.stderr.startswith(f"error: {tmp_path}: expected the mpich and mpi4py wheels")
    assert f"LENT_PYTHON={sys.version_info[0]}.{sys.version_info[1]})" in p.stderr
    # an mpi4py built for another Python imports without its MPI: refused before anything runs
    (wheels / f"mpi4py-8.8-{tag}-{tag}-linux_x86_64.whl").rename(wheels / "mpi4py-8.8-cp30-cp30-linux_x86_64.whl")
    p = subprocess.run(["bash", script, "--help"], env={**e, "WHEELS": str(wheels)}, **run)
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "is not for this Python" in p.stderr
    assert f"make lent-wheels LENT_PYTHON={sys.version_info[0]}.{sys.version_info[1]}" in p.stderr


def test_a_generated_table_into_a_file_without_its_section_is_refused_in_one_line(tmp_path, capsys):
    node = _node()
    doc = tmp_path / "page.md"
    doc.write_text("no generated section here\n")
    assert node.publish("| a |\n", "docs/data/x.json", str(doc), node.BEGIN) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{doc}: no section generated from docs/data/x.json")
    assert doc.read_text() == "no generated section here\n"


@pytest.mark.parametrize("script", ["node", "auto", "bench", "decode", "checkpoint", "walltime", "sync_every"])
def test_a_benchmark_refuses_another_s_json_in_one_line(script, tmp_path):
    """--markdown-from a JSON that is not this benchmark's result, or no file: one line naming it, exit 1."""
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps({"cells": []}))
    cmd = [sys.executable, str(REPO / "benchmarks" / f"{script}.py"), "--markdown-from", str(bad)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=60)
    assert p.returncode == 1 and p.stdout == "" and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert str(bad) in p.stderr and f"not a result of {script}.py" in p.stderr
    cmd[-1] = str(tmp_path / "missing.json")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=60)
    why = "not a readable JSON (No such file or directory)"
    assert p.returncode == 1 and p.stderr == f"{script}.py: {cmd[-1]}: {why}\n"


def test_walltime_writes_its_rows_with_the_machine_and_refuses_a_missing_study(tmp_path, capsys):
    """walltime.py --out keeps what --markdown-from makes the docs' row of; no study is one line."""
    walltime = _benchmark("walltime")
    assert walltime.main([str(tmp_path / "nothing")]) == 2
    assert "nothing: no finished study there (no metrics/runs.csv)" in capsys.readouterr().err
    rows = [
        {"size/measured": r, "model/measured": r / 3, "size_min": 1, "model_min": 1, "measured_s": 6.0}
        for r in (1.0, 2.0, 4.0)
    ]
    text = walltime.markdown({"study": "s", "machine": {"date": "d", "machine": "m"}, "runs": rows})
    assert "| s | 3 | median 2.00 (1.00–4.00) | median 0.67 (0.33–1.33) | 3 | 3 | 0.3 |" in text
