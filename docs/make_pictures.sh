#!/usr/bin/env bash
# Regenerates the pictures the README and the site show: the default study's scaling figure
# (after `make run`) and the workflow's rule graph (Graphviz's dot, installed from Debian if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
make run
cp results/default/plots/iris/scaling.png docs/img/scaling.png
if ! command -v dot >/dev/null; then
	if [ "$(id -u)" = 0 ]; then
		apt-get install -y -qq graphviz >/dev/null
	else
		echo "error: Graphviz's dot is missing: sudo apt-get install graphviz" >&2
		exit 1
	fi
fi
.venv/bin/snakemake --rulegraph --cores 1 --quiet all 2>/dev/null | dot -Tpng -Gdpi=100 -o docs/img/rulegraph.png
echo "wrote docs/img/scaling.png and docs/img/rulegraph.png"
