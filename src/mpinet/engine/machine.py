"""Facts of the machine a rank runs on that the engine's operand order and blocking follow.

Read once per process, never timed: a rule applied to what the OS and the BLAS report gives the
same choice on every run on this machine, so a run stays reproducible here, while another machine
gets the choice that suits its caches (results differ between them at rounding level, as they
already do between BLAS kernels).
"""

import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

# When the OS does not say: the L2 of the two machines the rule was measured on (docs/performance.md)
L2_ASSUMED = 1 << 20
CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")


@dataclass(frozen=True)
class Machine:
    l2_bytes: int  # the L2 cache of one core
    l2_source: str  # where that came from: sysfs, sysconf or assumed
    blas: str  # the BLAS numpy calls, as threadpoolctl names it (internal_api), or "unknown"
    blas_kernel: str  # its kernel (threadpoolctl's architecture), or ""


@cache
def this_machine() -> Machine:
    l2, source = l2_cache()
    blas, kernel = _blas()
    return Machine(l2, source, blas, kernel)


def l2_cache(cache_dir: Path = CACHE_DIR) -> tuple[int, str]:
    """(bytes, source) of one core's L2 cache: Linux's sysfs, else sysconf, else L2_ASSUMED."""
    for index in sorted(cache_dir.glob("index*")):
        try:
            if (index / "level").read_text().strip() == "2" and (index / "type").read_text().strip() != "Instruction":
                return parse_size((index / "size").read_text()), "sysfs"
        except (OSError, ValueError):
            continue
    try:
        size = os.sysconf("SC_LEVEL2_CACHE_SIZE")
    except (ValueError, OSError, AttributeError):
        size = 0
    return (size, "sysconf") if size and size > 0 else (L2_ASSUMED, "assumed")


def parse_size(text: str) -> int:
    """sysfs's cache size: '1024K' -> 1048576, '2M', or bytes."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def _blas() -> tuple[str, str]:
    from threadpoolctl import threadpool_info

    for lib in threadpool_info():
        if lib.get("user_api") == "blas":
            return lib.get("internal_api", "unknown"), lib.get("architecture") or ""
    return "unknown", ""
