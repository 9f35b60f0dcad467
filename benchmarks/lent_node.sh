#!/usr/bin/env bash
# benchmarks/node.py on a lent machine that has Python, numpy and pandas but no MPI, no pip index and
# no unzip (docs/performance.md, "A whole node"). From a bare checkout whose WHEELS folder (.wheels/ by
# default; `make lent-wheels LENT_PYTHON=3.12` fills it for that machine's Python) holds the MPICH, mpi4py and
# threadpoolctl wheels: unpacks them with Python's zipfile, puts MPICH's bin first on PATH and its lib
# on LD_LIBRARY_PATH, and runs node.py with this script's arguments (--out $OUT, --budget, ...).
#   WHEELS=.wheels bash benchmarks/lent_node.sh --out "$OUT" --budget 420
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
WHEELS=${WHEELS:-.wheels}
here=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
if ! compgen -G "$WHEELS/mpich-*.whl" >/dev/null || ! compgen -G "$WHEELS/mpi4py-*.whl" >/dev/null; then
	echo "error: $WHEELS: expected the mpich and mpi4py wheels for this Python (make lent-wheels LENT_PYTHON=$here)" >&2
	exit 1
fi
# mpi4py is compiled for one Python: a wheel for another imports without its MPI module
for wheel in "$WHEELS"/mpi4py-*.whl; do
	if [[ $(basename "$wheel") != *"-cp${here/./}-"* ]]; then
		echo "error: $wheel is not for this Python $here (make lent-wheels LENT_PYTHON=$here)" >&2
		exit 1
	fi
done
unpacked=$(mktemp -d)
trap 'rm -rf "$unpacked"' EXIT
"$PYTHON" - "$WHEELS" "$unpacked" <<'PY'
import os
import pathlib
import sys
import zipfile

wheels, dest = map(pathlib.Path, sys.argv[1:])
for wheel in sorted(wheels.glob("*.whl")):
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            path = z.extract(info, dest)
            if mode := (info.external_attr >> 16) & 0o777:  # zipfile drops the programs' execute bits
                os.chmod(path, mode)
PY
mpich=$(echo "$unpacked"/mpich-*.data/data)
export PATH="$mpich/bin:$PATH" LD_LIBRARY_PATH="$mpich/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$PWD/src:$unpacked${PYTHONPATH:+:$PYTHONPATH}"
mpi=$(mpiexec --version | awk '/Version:/ && !seen { print "MPICH", $2; seen = 1 }')
echo "lent_node: $mpi, $("$PYTHON" -c 'import mpi4py; print("mpi4py", mpi4py.__version__)')"
"$PYTHON" benchmarks/node.py "$@"
