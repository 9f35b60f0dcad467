import numpy as np
import pytest

from mpinet.engine.machine import Machine, l2_cache, parse_size
from mpinet.engine.model import (
    LOSSES,
    Net,
    Views,
    Workspace,
    backward,
    first_layer_plan,
    forward,
    init_params,
    layer_views,
    loss_and_correct,
)


def _loss(net, layers, x, y, ws):
    return loss_and_correct(net, forward(net, layers, x, ws), y)[0]


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("standardize", [True, False])
def test_gradients_match_central_finite_differences(loss, standardize):
    net = Net((5, 7, 6, 3), loss, standardize, np.dtype(np.float64))
    params = init_params(net, seed=3)
    grads = np.zeros_like(params)
    layers, grad_layers = layer_views(net, params), layer_views(net, grads)
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(6, 5)), rng.integers(0, 3, 6)
    ws = Workspace(net, 8)
    forward(net, layers, x, ws)
    backward(Views(net, layers, grad_layers, ws), x, y, scale=1.0)
    numeric = np.empty_like(params)
    h = 1e-6
    for i in range(len(params)):
        old = params[i]
        params[i] = old + h
        up = _loss(net, layers, x, y, ws)
        params[i] = old - h
        down = _loss(net, layers, x, y, ws)
        params[i] = old
        numeric[i] = (up - down) / (2 * h)
    rel = np.linalg.norm(numeric - grads) / np.linalg.norm(numeric)
    assert rel < 1e-6
    assert np.abs(numeric - grads).max() / np.abs(numeric).max() < 1e-6


def test_standardization_is_differentiated_not_skipped():
    """Backprop without the standardization Jacobian (the original's bug) gives a different gradient."""
    net = Net((4, 6, 3), "l2", True, np.dtype(np.float64))
    params = init_params(net, seed=0)
    g_with = np.zeros_like(params)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(5, 4)), rng.integers(0, 3, 5)
    ws = Workspace(net, 5)
    forward(net, layer_views(net, params), x, ws)
    backward(Views(net, layer_views(net, params), layer_views(net, g_with), ws), x, y, 1.0)
    # hidden pre-activations are standardized per sample: mean 0, variance ~1
    h = ws.h[0][:5]
    assert np.allclose(h.mean(axis=1), 0, atol=1e-12)
    assert np.allclose(h.var(axis=1), 1, atol=1e-3)
    # the gradient of W1 [out, in] sums to zero over the hidden units: standardization removes the mean direction
    w1_grad = layer_views(net, g_with)[0][0]
    assert np.allclose(w1_grad.sum(axis=0), 0, atol=1e-10)


def test_float32_training_step_stays_float32():
    net = Net((20, 8, 4), "l2", True, np.dtype(np.float32))
    params = init_params(net, seed=0)
    grads = np.zeros_like(params)
    x = np.random.default_rng(0).random((4, 20), dtype=np.float32)
    y = np.array([0, 1, 2, 3])
    ws = Workspace(net, 4)
    out = forward(net, layer_views(net, params), x, ws)
    backward(Views(net, layer_views(net, params), layer_views(net, grads), ws), x, y, scale=0.1 / 4)
    params -= grads
    arrays = [params, grads, out, *ws.a, *ws.h, *ws.delta, *ws.inv_std]
    arrays += [a for pair in layer_views(net, params) for a in pair]
    assert {a.dtype for a in arrays} == {np.dtype(np.float32)}


def test_init_is_seeded_zero_mean_and_fan_in_scaled():
    net = Net((400, 300, 3), dtype=np.dtype(np.float64))
    a, b, c = init_params(net, 7), init_params(net, 7), init_params(net, 8)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    w1, b1 = layer_views(net, a)[0]
    assert abs(w1.mean()) < 0.01 and np.all(b1 == 0)
    assert np.isclose(w1.var() * 400, 1.0, rtol=0.05)  # unit-variance pre-activations for unit inputs


def test_parameter_views_share_one_flat_buffer():
    net = Net((3, 4, 2))
    flat = np.zeros(net.n_params, dtype=np.float32)
    views = layer_views(net, flat)
    views[1][1][:] = 5  # the last bias
    assert flat[-2:].tolist() == [5, 5]
    assert all(np.shares_memory(flat, v) for pair in views for v in pair)
    assert net.n_params == 3 * 4 + 4 + 4 * 2 + 2


def _original_step(W, b, x, t, lr):
    """The Go project's mini-batch step, transcribed from its code (W: [in, out] as in gonum).

    Per sample: forward with its two standardization formulas, then "Adj" deltas summed over
    the batch (weights fixed within it), the hidden error taken from the raw output error.
    """
    adj_w = [np.zeros_like(w) for w in W]
    adj_b = [np.zeros_like(v) for v in b]
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    for xs, ts in zip(x, t):
        z1 = xs @ W[0] + b[0]
        m = z1.mean()
        a1 = sig((z1 - m) / (np.sqrt(((z1 - m) ** 2).sum()) / len(z1)))
        z2 = a1 @ W[1] + b[1]
        m = z2.mean()
        a2 = sig((z2 - m) / (np.sqrt((2 ** (z2 - m)).sum()) / len(z2)))
        a3 = sig(a2 @ W[2] + b[2])
        err = ts - a3
        d3 = err * a3 * (1 - a3)
        d2 = (W[2] @ err) * a2 * (1 - a2)  # the bug: err, not d3
        d1 = (W[1] @ d2) * a1 * (1 - a1)
        for k, (d, a) in enumerate(((d1, xs), (d2, a1), (d3, a2))):
            adj_w[k] += lr * np.outer(a, d)
            adj_b[k] += lr * d
    return [w + a for w, a in zip(W, adj_w)], [v + a for v, a in zip(b, adj_b)]


def test_faithful_mode_reproduces_the_original_update():
    net = Net((4, 6, 5, 3), "l2", True, np.dtype(np.float64), faithful=True)
    params = init_params(net, seed=2)
    assert params.min() >= 0 and params.max() < 1  # U[0, 1) everywhere, biases included
    layers = layer_views(net, params)
    W, b = [w.T.copy() for w, _ in layers], [v.copy() for _, v in layers]
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(4, 4)), np.array([0, 2, 1, 2])
    W_new, b_new = _original_step(W, b, x, np.eye(3)[y], lr=0.01)

    grads = np.zeros_like(params)
    ws = Workspace(net, 4)
    forward(net, layers, x, ws)
    backward(Views(net, layers, layer_views(net, grads), ws), x, y, scale=0.01)  # summed, not averaged
    params -= grads
    for (w, v), w_ref, b_ref in zip(layer_views(net, params), W_new, b_new):
        assert np.allclose(w.T, w_ref, rtol=0, atol=1e-12) and np.allclose(v, b_ref, rtol=0, atol=1e-12)
    # and it is not the correct gradient
    correct = Net((4, 6, 5, 3), "l2", True, np.dtype(np.float64))
    g2 = np.zeros_like(params)
    forward(correct, layers, x, ws)
    backward(Views(correct, layers, layer_views(correct, g2), ws), x, y, scale=0.01)
    assert not np.allclose(g2, grads)


def _step_both_ways(net, x, y, scale=0.05):
    """One SGD step as gradient-then-subtract and as backward(update=True): the two weight buffers."""
    params = init_params(net, seed=4)
    fused = params.copy()
    grads = np.zeros_like(params)
    ws = Workspace(net, len(x))
    forward(net, layer_views(net, params), x, ws)
    backward(Views(net, layer_views(net, params), layer_views(net, grads), ws), x, y, scale)
    params -= grads
    forward(net, layer_views(net, fused), x, ws)
    backward(Views(net, layer_views(net, fused), layer_views(net, np.zeros_like(fused)), ws), x, y, scale, update=True)
    return params, fused


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("sizes,batch", [((4, 5, 4, 3), 4), ((3000, 30, 20, 6), 4), ((3000, 30, 20, 6), 32)])
def test_the_update_folded_into_the_gemm_is_the_subtraction_bit_for_bit(dtype, sizes, batch):
    from mpinet.engine import blas

    assert blas.fused_available(dtype)  # numpy's pinned wheel brings an ILP64 OpenBLAS
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(batch, sizes[0])).astype(dtype), rng.integers(0, sizes[-1], batch)
    params, fused = _step_both_ways(Net(sizes, dtype=np.dtype(dtype)), x, y)
    assert np.array_equal(params, fused) and not np.array_equal(params, init_params(Net(sizes), 4))


def test_without_the_fused_blas_call_backward_still_steps(monkeypatch):
    from mpinet.engine import blas

    monkeypatch.setenv(blas.OFF, "0")
    blas._gemm.cache_clear()
    try:
        net = Net((50, 6, 3), dtype=np.dtype(np.float64))
        assert not blas.fused_available(np.float64)
        rng = np.random.default_rng(3)
        params, fused = _step_both_ways(net, rng.normal(size=(7, 50)), rng.integers(0, 3, 7))
        assert np.array_equal(params, fused)
    finally:
        blas._gemm.cache_clear()


def test_a_strided_batch_of_a_memory_map_is_fused_and_other_layouts_are_refused():
    from mpinet.engine import blas

    rng = np.random.default_rng(5)
    x = rng.normal(size=(10, 40))
    w, d = rng.normal(size=(6, 40)), rng.normal(size=(5, 6))
    expected = w - d.T @ x[::2]
    assert blas.subtract_product(w, d, x[::2]) and np.allclose(w, expected, rtol=1e-14)
    before = w.copy()
    assert not blas.subtract_product(w, d, np.asfortranarray(x[:5]))  # columns, not rows: refused
    assert not blas.subtract_product(w, d.astype(np.float32), x[:5])  # mixed dtypes: refused
    assert np.array_equal(w, before)  # and nothing written


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_first_layer_in_either_order_agrees_to_rounding(dtype):
    rng = np.random.default_rng(6)
    net = Net((20000, 30, 6), dtype=np.dtype(dtype))
    layers = layer_views(net, init_params(net, 1))
    x = rng.random((16, 20000)).astype(dtype)
    ws = Workspace(net, 16, MIB_L2)
    assert ws.first_transposed  # small batches take W @ x.T
    out = forward(net, layers, x, ws).copy()
    ws.first_transposed = False
    plain = forward(net, layers, x, ws)
    assert np.allclose(out, plain, rtol=50 * np.finfo(dtype).eps, atol=0)
    assert not Workspace(Net((10, 4, 2)), 256, MIB_L2).first_transposed  # float32 at 256: x @ W.T is faster


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_first_layer_summed_over_blocks_of_inputs_agrees_to_rounding(dtype):
    rng = np.random.default_rng(7)
    net = Net((10000, 30, 6), dtype=np.dtype(dtype))
    layers = layer_views(net, init_params(net, 2))
    ws = Workspace(net, 8, MIB_L2)
    assert ws.first_block == 4096  # 32768 inputs x samples per GEMM: three blocks, the last a short one
    for n in (8, 3):  # a whole batch and an epoch's short last one
        x = rng.random((n, 10000)).astype(dtype)
        blocked = forward(net, layers, x, ws).copy()
        ws.first_block, kept = 0, ws.first_block
        whole = forward(net, layers, x, ws)
        ws.first_block = kept
        assert np.allclose(blocked, whole, rtol=50 * np.finfo(dtype).eps, atol=0)


def _machine(l2: int, blas="openblas") -> Machine:
    return Machine(l2, "sysfs", blas, "SkylakeX")


MIB_L2 = _machine(1 << 20)


@pytest.mark.parametrize(
    "n_inputs,batch,dtype,machine,expected",
    [
        (67500, 4, np.float32, MIB_L2, "W @ x.T in blocks of 8192 inputs"),  # 32768 inputs x samples
        (67500, 32, np.float32, MIB_L2, "W @ x.T in blocks of 1024 inputs"),
        (67500, 40, np.float32, MIB_L2, "W @ x.T in blocks of 819 inputs"),
        (67500, 48, np.float32, MIB_L2, "W @ x.T"),  # blocks were slower from batch 48 on
        (67500, 256, np.float32, MIB_L2, "x @ W.T"),  # float32 from 64 on
        (67500, 256, np.float64, MIB_L2, "W @ x.T"),  # float64 at every batch
        (67500, 4, np.float64, MIB_L2, "W @ x.T in blocks of 8192 inputs"),  # elements, not bytes
        (67500, 4, np.float32, _machine(512 << 10), "W @ x.T in blocks of 4096 inputs"),  # half the L2
        (67500, 4, np.float32, _machine(2 << 20), "W @ x.T in blocks of 16384 inputs"),
        (4, 4, np.float32, MIB_L2, "W @ x.T"),  # Iris: one block holds every input
        (67500, 4, np.float32, _machine(1 << 20, "mkl"), "x @ W.T"),  # the rule was measured on OpenBLAS
    ],
)
def test_the_first_layers_plan_follows_the_machine_by_a_fixed_rule(n_inputs, batch, dtype, machine, expected):
    assert first_layer_plan(n_inputs, batch, dtype, machine).describe() == expected


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_machines_with_other_caches_or_blas_train_to_the_same_weights_within_rounding(dtype):
    """Every plan the rule can give is the same arithmetic summed in another order."""
    rng = np.random.default_rng(8)
    net = Net((20000, 30, 6), dtype=np.dtype(dtype))
    x, y = rng.random((4, 20000)).astype(dtype), rng.integers(0, 6, 4)
    trained = []
    for machine in (MIB_L2, _machine(256 << 10), _machine(4 << 20), _machine(1 << 20, "blis")):
        params = init_params(net, 3)
        layers, ws = layer_views(net, params), Workspace(net, 4, machine)
        for _ in range(5):
            forward(net, layers, x, ws)
            backward(Views(net, layers, layer_views(net, np.zeros_like(params)), ws), x, y, 0.1, update=True)
        trained.append(params)
    assert len({Workspace(net, 4, m).plan for m in (MIB_L2, _machine(256 << 10), _machine(1 << 20, "blis"))}) == 3
    for other in trained[1:]:
        assert np.allclose(other, trained[0], rtol=200 * np.finfo(dtype).eps, atol=10 * np.finfo(dtype).eps)


def test_the_l2_cache_is_read_from_sysfs_else_assumed(tmp_path):
    caches = [(1, "Data", "32K"), (1, "Instruction", "32K"), (2, "Unified", "512K")]
    for index, (level, kind, size) in enumerate(caches):
        d = tmp_path / f"index{index}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert l2_cache(tmp_path) == (512 << 10, "sysfs")
    assert parse_size("2M") == 2 << 20 and parse_size("1048576") == 1 << 20
    size, source = l2_cache(tmp_path / "none")
    assert source in ("sysconf", "assumed") and size > 0


def test_warming_the_gemm_changes_no_byte_of_the_blocked_layer_or_the_fused_update():
    """warm_gemm only speeds the blocked first layer up: in a fresh process (the slow state is per
    process), the forward GEMM and the fused update give the same bytes before and after it."""
    import subprocess
    import sys

    code = """
import numpy as np
from mpinet.engine import blas
from mpinet.engine.model import blocked_matmul, warm_gemm
rng = np.random.default_rng(0)
w, x = rng.standard_normal((30, 67500)).astype(np.float32), rng.random((32, 67500)).astype(np.float32)
d = rng.standard_normal((32, 30)).astype(np.float32) * 1e-3
out, part = np.empty((30, 32), np.float32), np.empty((30, 32), np.float32)
def both():
    blocked_matmul(w, x, out, part, 512)
    updated = w.copy()
    assert blas.subtract_product(updated, d, x)
    return out.tobytes() + updated.tobytes()
cold = both()
warm_gemm(30, 32, 512, np.float32)
print(cold == both())
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.strip() == "True"
