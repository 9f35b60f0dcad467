"""W -= dᵀ·x in one BLAS call (GEMM with beta = 1) through numpy's own OpenBLAS.

numpy's matmul always overwrites its output, so an SGD step done with it writes the weight
gradient to memory and then reads it back for the update: for the Intel network's 8.1 MB first
layer that is two of the step's five passes over the weights. GEMM with beta = 1 adds the product
to the weights as it computes it. It goes to the same library and kernel numpy's matmul uses, so
the result is matmul-then-subtract at the batches tested (tests/test_model.py; OpenBLAS sums a K of a
few hundred rows in registers before it adds C), only faster; bit for bit on some kernels, not on all
(Haswell's rounds the two differently), so switching it off (OFF) is part of the numerics fingerprint
(mpinet.fingerprints.NUMERICS.switches). Where numpy's BLAS is
not an ILP64 OpenBLAS with known symbol names, `subtract_product` returns False and the caller
does the two steps.
"""

import ctypes
import os
from functools import cache

import numpy as np

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112  # CBLAS enums
SYMBOLS = ("scipy_cblas_{t}gemm64_", "cblas_{t}gemm64_")  # numpy's PyPI wheels; an ILP64 OpenBLAS
OFF = "MPINET_FUSED_UPDATE"  # set to 0 to use matmul-then-subtract (tests compare the two)


@cache
def _gemm(dtype: np.dtype):
    """The cblas ?gemm of the BLAS numpy loaded, for float32/float64, or None."""
    if os.environ.get(OFF) == "0" or dtype not in (np.float32, np.float64):
        return None
    from threadpoolctl import threadpool_info

    paths = [i["filepath"] for i in threadpool_info() if i.get("internal_api") == "openblas"]
    scalar = ctypes.c_float if dtype == np.float32 else ctypes.c_double
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    for path in paths:
        lib = ctypes.CDLL(path)
        for name in SYMBOLS:
            f = getattr(lib, name.format(t="s" if dtype == np.float32 else "d"), None)
            if f is not None:
                f.argtypes = [ctypes.c_int] * 3 + [i64] * 3 + [scalar, ptr, i64, ptr, i64, scalar, ptr, i64]
                f.restype = None
                return f
    return None


def _row_major(a: np.ndarray) -> bool:
    """Rows of unit-stride elements, any row stride (a batch of a memory map qualifies)."""
    return a.ndim == 2 and a.strides[1] == a.itemsize and a.strides[0] >= a.shape[1] * a.itemsize


def subtract_product(w: np.ndarray, d: np.ndarray, x: np.ndarray) -> bool:
    """w -= d.T @ x in place (w: [m, k], d: [n, m], x: [n, k], one dtype; each row-major, with any row
    stride: w may be some columns of the weights). False when this BLAS or these arrays' layout cannot
    do it; then nothing was written."""
    f = _gemm(w.dtype)
    if f is None or not (d.dtype == x.dtype == w.dtype and _row_major(w) and _row_major(d) and _row_major(x)):
        return False
    (m, k), n = w.shape, len(d)
    ld = [a.strides[0] // a.itemsize for a in (d, x, w)]
    f(ROW_MAJOR, TRANS, NO_TRANS, m, k, n, -1.0, d.ctypes.data, ld[0], x.ctypes.data, ld[1], 1.0, w.ctypes.data, ld[2])
    return True


def fused_available(dtype) -> bool:
    return _gemm(np.dtype(dtype)) is not None
