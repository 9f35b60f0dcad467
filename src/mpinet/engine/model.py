"""The network: input -> hidden layers -> output, sigmoid units, L2 or cross-entropy loss.

All parameters live in one flat buffer and all gradients in another; the per-layer
weight and bias arrays are views into them, so a whole gradient can be reduced by one
MPI call without packing, and an SGD update is one subtraction.
"""

from dataclasses import dataclass

import numpy as np

from mpinet.engine import blas
from mpinet.engine.machine import Machine, this_machine

LOSSES = ("l2", "xent")
EPS = 1e-5  # variance floor of the per-sample standardization
TRANSPOSED_FIRST_BELOW = {np.float32: 64, np.float64: 1 << 62}  # see first_layer_plan
# up to this batch the first layer sums W @ x.T over blocks of (L2 bytes // L2_PER_BLOCK_ELEMENT) //
# batch inputs: 32768 inputs x samples on a core with 1 MiB of L2
FIRST_BLOCKED_UP_TO = 40
L2_PER_BLOCK_ELEMENT = 32


@dataclass
class Net:
    """Layer sizes and the options that change the forward pass."""

    sizes: tuple[int, ...]  # (input, hidden..., output)
    loss: str = "l2"
    standardize: bool = True
    dtype: np.dtype = np.dtype(np.float32)
    # Reproduce the original Go project's numerics, bugs included, for comparison: U[0, 1) init,
    # its two wrong standardization formulas (no Jacobian in backprop) and the raw output error
    # propagated into the last hidden layer. (Its summed updates are the trainer's part.)
    faithful: bool = False

    @property
    def n_params(self) -> int:
        return sum(a * b + b for a, b in zip(self.sizes[:-1], self.sizes[1:]))


def layer_views(net: Net, flat: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per-layer (W: [out, in], b: [out]) views into a flat buffer of n_params values.

    W is stored [out, in] (as in PyTorch) because the weight-gradient GEMM d.T @ x then
    writes whole contiguous rows; it ran 10-30 % faster than x.T @ d for the wide first layer.
    """
    views, offset = [], 0
    for n_in, n_out in zip(net.sizes[:-1], net.sizes[1:]):
        w = flat[offset : offset + n_in * n_out].reshape(n_out, n_in)
        offset += n_in * n_out
        views.append((w, flat[offset : offset + n_out]))
        offset += n_out
    return views


def init_params(net: Net, seed: int) -> np.ndarray:
    """Seeded zero-mean weights, uniform in +-sqrt(3/fan_in) (unit variance pre-activations); zero biases."""
    rng = np.random.default_rng(seed)
    if net.faithful:  # every weight and bias uniform in [0, 1), as the original
        return rng.random(net.n_params).astype(net.dtype)
    flat = np.zeros(net.n_params, dtype=net.dtype)
    for w, _ in layer_views(net, flat):
        bound = np.sqrt(3.0 / w.shape[1])
        w[...] = rng.uniform(-bound, bound, size=w.shape)
    return flat


@dataclass(frozen=True)
class FirstLayerPlan:
    """How the wide first layer's forward GEMM runs at one batch size: as W @ x.T into [units, batch]
    (transposed) or as x @ W.T, and summed over blocks of `block` inputs (0: one GEMM)."""

    transposed: bool
    block: int

    def describe(self) -> str:
        order = "W @ x.T" if self.transposed else "x @ W.T"
        return f"{order} in blocks of {self.block} inputs" if self.block else order


def first_layer_plan(n_inputs: int, batch: int, dtype, machine: Machine) -> FirstLayerPlan:
    """The fixed rule, from the machine's facts (never a timing: the orders and blockings round
    differently, and a run must be reproducible on its machine).

    With numpy's OpenBLAS, below TRANSPOSED_FIRST_BELOW the layer runs as W @ x.T: OpenBLAS packs the
    operands differently, 0.61 against 0.98 ms at batch 4 (67500 x 30, one thread); float32 at 64
    and above is 3-10 % slower that way, float64 faster at every size. Up to FIRST_BLOCKED_UP_TO it
    sums over blocks of inputs whose inputs x samples are L2 / L2_PER_BLOCK_ELEMENT elements: on two
    machines with 1 MiB of L2 per core (AMD Zen 4 and Zen 5) 32768 elements was the best block at
    every batch up to 32 in both dtypes (1.5-2.9x one GEMM), and twice that fell off a cliff, a
    capacity effect, so the block follows the L2 (benchmarks/cold_rows.py, docs/performance.md).
    Another BLAS was not measured: it gets the plain x @ W.T."""
    if machine.blas != "openblas":
        return FirstLayerPlan(False, 0)
    transposed = batch < TRANSPOSED_FIRST_BELOW.get(np.dtype(dtype).type, 0)
    block = block_elements(machine) // batch if transposed and batch <= FIRST_BLOCKED_UP_TO else 0
    return FirstLayerPlan(transposed, block if 0 < block < n_inputs else 0)


def block_elements(machine: Machine) -> int:
    """Inputs x samples of one block of the first layer's blocked GEMM on this machine."""
    return machine.l2_bytes // L2_PER_BLOCK_ELEMENT


class Workspace:
    """Activations for up to `batch` samples, allocated once so training steps make no large temporaries."""

    def __init__(self, net: Net, batch: int, machine: Machine | None = None):
        self.batch = batch
        dt = net.dtype
        # a[l]: float[batch, sizes[l+1]] activations; h[l]: standardized pre-activations of hidden layer l
        self.a = [np.empty((batch, n), dtype=dt) for n in net.sizes[1:]]
        self.h = [np.empty((batch, n), dtype=dt) for n in net.sizes[1:-1]]
        self.inv_std = [np.empty((batch, 1), dtype=dt) for _ in net.sizes[1:-1]]
        self.delta = [np.empty((batch, n), dtype=dt) for n in net.sizes[1:]]
        self.row = np.empty((batch, 1), dtype=dt)
        self.plan = first_layer_plan(net.sizes[0], batch, dt, machine or this_machine())
        self.first_transposed, self.first_block = self.plan.transposed, self.plan.block
        # [units, batch]: the transposed first layer, and some of its units (first_layer_units)
        self.first_t = np.empty((net.sizes[1], batch), dtype=dt)
        self.first_part = np.empty_like(self.first_t) if self.first_block else None
        if self.first_block:
            warm_gemm(net.sizes[1], batch, self.first_block, dt)


def warm_gemm(units: int, batch: int, block: int, dtype) -> None:
    """One GEMM of the blocked layer's shape with an inner size past its block, on zeros: with numpy's
    OpenBLAS 0.3.31 (Haswell kernel on AMD EPYC) every GEMM with an inner size of 512 or less ran 2.2x
    slower (float32, batch 32: 13.9 against 6.4 ms for the first layer) until the process had made one
    with a larger inner size, which a run at batch 32 never does (benchmarks/warm_gemm.py). The
    product is thrown away: no weight or result changes, only the time."""
    k = 4 * block
    np.matmul(np.zeros((units, k), dtype), np.zeros((batch, k), dtype).T)


def _first_layer(w: np.ndarray, x: np.ndarray, z: np.ndarray, ws: Workspace) -> None:
    """z = x @ w.T, in the order (and the blocks) the workspace chose."""
    if not ws.first_transposed:
        np.matmul(x, w.T, out=z)
        return
    zt = ws.first_t[:, : len(x)]
    if ws.first_block:
        blocked_matmul(w, x, zt, ws.first_part[:, : len(x)], ws.first_block)
    else:
        np.matmul(w, x.T, out=zt)
    z[...] = zt.T


def blocked_matmul(w: np.ndarray, x: np.ndarray, out: np.ndarray, part: np.ndarray, k: int) -> None:
    """out = w @ x.T summed over blocks of k inputs (part: scratch shaped like out)."""
    np.matmul(w[:, :k], x[:, :k].T, out=out)
    for start in range(k, w.shape[1], k):
        np.matmul(w[:, start : start + k], x[:, start : start + k].T, out=part)
        out += part


def first_layer_units(w: np.ndarray, x: np.ndarray, ws: Workspace) -> np.ndarray:
    """[units of w, n] = w @ x.T for some rows (units) of the first layer's weights, in the plan's
    blocks (mpinet.engine.exchanges.ShardedFirstLayer); a view in ws."""
    zt = ws.first_t[: len(w), : len(x)]
    if ws.first_block:
        blocked_matmul(w, x, zt, ws.first_part[: len(w), : len(x)], ws.first_block)
    else:
        np.matmul(w, x.T, out=zt)
    return zt


def forward(net: Net, layers, x: np.ndarray, ws: Workspace, first_t: np.ndarray | None = None) -> np.ndarray:
    """Run x: float[n, input] (n <= ws.batch) through the net; returns the output activations, a view in ws.
    first_t: the first layer's W @ x.T ([units, n]) when it was computed elsewhere (ShardedFirstLayer)."""
    n = len(x)
    a_prev = x
    last = len(layers) - 1
    for i, (w, b) in enumerate(layers):
        z = ws.a[i][:n]
        if i == 0 and first_t is not None:
            z[...] = first_t.T
        elif i == 0:
            _first_layer(w, a_prev, z, ws)
        else:
            np.matmul(a_prev, w.T, out=z)
        z += b
        if i < last:
            if net.standardize:
                h = ws.h[i][:n]
                if net.faithful:
                    _standardize_original(z, h, ws.inv_std[i][:n], first=i == 0)
                else:
                    _standardize(z, h, ws.inv_std[i][:n])
                z[...] = h
            _sigmoid(z)
        elif net.loss == "xent":
            _softmax(z, ws.row[:n])
        else:
            _sigmoid(z)
        a_prev = z
    return a_prev


def loss_and_correct(net: Net, out: np.ndarray, y: np.ndarray) -> tuple[float, int]:
    """Summed loss over the batch and the number of correct argmax predictions; y: int[n]."""
    n = len(y)
    picked = out[np.arange(n), y]
    if net.loss == "xent":
        loss = -float(np.log(np.maximum(picked, np.finfo(out.dtype).tiny)).sum(dtype=np.float64))
    else:  # 0.5 * ||out - onehot||^2 = 0.5 * (sum out^2 - 2 out[y] + 1)
        loss = 0.5 * (float(np.square(out).sum(dtype=np.float64)) - 2.0 * float(picked.sum(dtype=np.float64)) + n)
    return loss, int(np.count_nonzero(np.argmax(out, axis=1) == y))


@dataclass
class Views:
    """A net with the per-layer views of its weights and gradient and its workspace: what backward
    reads and writes (mpinet.engine.loop's run of a rank has the same four names)."""

    net: Net
    layers: list
    grad_layers: list
    ws: Workspace


def backward(m: Views, x: np.ndarray, y: np.ndarray, scale: float, update=False, first=True) -> None:
    """Write scale * d(summed loss)/d(params) into the gradient views m.grad_layers, after forward(x);
    with update=True subtract it from the weights m.layers instead (the serial SGD step). With
    first=False the first layer's weight gradient is left out (its factors stay in ws.delta[0] and x:
    mpinet.engine.exchanges.FactorAllgather); with first=slice(...) (and update) only those rows of the
    first layer's weights are stepped, its whole bias still (ShardedFirstLayer).

    Training passes scale = learning_rate / global_batch, so the gradient buffer already
    holds the averaged, lr-scaled step and the update is one subtraction. The update folds it into
    the weight-gradient GEMM (mpinet.engine.blas): the gradient is never written, two passes over the
    weights fewer. Each layer's error is propagated through its weights before they change.
    """
    net, layers, grads, ws = m.net, m.layers, m.grad_layers, m.ws
    n = len(x)
    last = len(layers) - 1
    out = ws.a[last][:n]
    d = ws.delta[last][:n]
    d[...] = out
    d[np.arange(n), y] -= 1
    s = net.dtype.type(scale)  # a numpy scalar of our dtype: no promotion to float64
    raw_error = d * s if net.faithful else None
    if net.loss == "l2":  # d/dz 0.5 ||sigmoid(z) - t||^2 = (a - t) a (1 - a)
        _mul_sigmoid_prime(d, out)
    d *= s
    for i in range(last, -1, -1):
        d = ws.delta[i][:n]
        a_in = x if i == 0 else ws.a[i - 1][:n]
        if i > 0:
            d_prev = ws.delta[i - 1][:n]
            # the original propagated the raw output error, without the output sigmoid's derivative
            np.matmul(raw_error if net.faithful and i == last else d, layers[i][0], out=d_prev)
            _mul_sigmoid_prime(d_prev, ws.a[i - 1][:n])
            if net.standardize and not net.faithful:  # the original ignored the standardization's Jacobian
                _standardize_backward(d_prev, ws.h[i - 1][:n], ws.inv_std[i - 1][:n], ws.row[:n])
        _layer_gradient(layers[i], grads[i], d, a_in, update, weights=first if i == 0 else True)


def _layer_gradient(layer, grad, d: np.ndarray, a_in: np.ndarray, update: bool, weights=True) -> None:
    """grad = (d.T @ a_in, sum d), or with update the layer's weights minus it; only the bias's
    part without `weights`, and only those rows of the weights when `weights` is a slice."""
    (w, b), (gw, gb) = layer, grad
    np.sum(d, axis=0, out=gb)
    if not weights:
        return
    if isinstance(weights, slice):
        w, gw, d = w[weights], gw[weights], d[:, weights]
    if not update:
        np.matmul(d.T, a_in, out=gw)
        return
    if not blas.subtract_product(w, d, a_in):
        np.matmul(d.T, a_in, out=gw)
        w -= gw
    b -= gb


# --- elementwise helpers, all in place and dtype-preserving ---------------------------


def _sigmoid(z: np.ndarray) -> None:
    with np.errstate(over="ignore"):  # exp overflow gives inf, and 1 / (1 + inf) = 0 is right
        np.negative(z, out=z)
        np.exp(z, out=z)
    z += 1
    np.reciprocal(z, out=z)


def _softmax(z: np.ndarray, row: np.ndarray) -> None:
    np.max(z, axis=1, keepdims=True, out=row)
    z -= row
    np.exp(z, out=z)
    np.sum(z, axis=1, keepdims=True, out=row)
    z /= row


def _mul_sigmoid_prime(d: np.ndarray, a: np.ndarray) -> None:
    """d *= a * (1 - a), with a the sigmoid output."""
    d *= a
    d -= d * a


def _standardize(z: np.ndarray, h: np.ndarray, inv_std: np.ndarray) -> None:
    """h = (z - mean) / sqrt(var + EPS) over the neurons of each sample (a LayerNorm without gain)."""
    np.mean(z, axis=1, keepdims=True, out=inv_std)
    np.subtract(z, inv_std, out=h)
    np.mean(np.square(h), axis=1, keepdims=True, out=inv_std)
    inv_std += z.dtype.type(EPS)
    np.sqrt(inv_std, out=inv_std)
    np.reciprocal(inv_std, out=inv_std)
    h *= inv_std


def _standardize_original(z: np.ndarray, h: np.ndarray, inv_std: np.ndarray, first: bool) -> None:
    """The original's formulas: std = sqrt(sum (v - m)^2) / n in the first hidden layer (sqrt(n) times
    too small) and sqrt(sum 2^(v - m)) / n after it (a typo for (v - m)^2); no variance floor."""
    n_units = z.shape[1]
    np.mean(z, axis=1, keepdims=True, out=inv_std)
    np.subtract(z, inv_std, out=h)
    spread = np.square(h) if first else np.exp2(h)
    np.sum(spread, axis=1, keepdims=True, out=inv_std)
    np.sqrt(inv_std, out=inv_std)
    inv_std /= z.dtype.type(n_units)
    np.reciprocal(inv_std, out=inv_std)
    h *= inv_std


def _standardize_backward(d: np.ndarray, h: np.ndarray, inv_std: np.ndarray, row: np.ndarray) -> None:
    """Turn dL/dh into dL/dz in place: dz = inv_std * (dh - mean(dh) - h * mean(dh * h))."""
    np.mean(d * h, axis=1, keepdims=True, out=row)
    dh_h = h * row
    np.mean(d, axis=1, keepdims=True, out=row)
    d -= row
    d -= dh_h
    d *= inv_std
