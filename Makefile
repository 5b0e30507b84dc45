# Every target creates or reuses .venv and installs the pinned dependencies first.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint binaries bench bench-lifecycle bench-disruption bench-chaos bench-upgrade bench-soak clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/nodewright demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy core
	$(BIN)/lint-imports

# The local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
# kwok, and helm for the chart tests), built once from the Go module proxy into ~/.cache/nodewright (about 5 to 10 minutes on 2 cores).
binaries: $(STAMP)
	$(BIN)/python -m workers.controlplane.build

test: lint binaries
	$(BIN)/pytest -n 2

bench: $(STAMP)
	$(BIN)/python benchmarks/scheduling.py

# RUNS=200,1000,3000 adds the run of 3,000 pods (see docs/benchmarks.md, Lifecycle, for how long it takes).
RUNS ?= 200,1000
# PEER=karpenter also runs Karpenter's kwok controller (built once, on first use, not by `make binaries`) and the
# floor (Nodes made by the benchmark) on the same pods, and prints the three rows and the ratios.
PEER ?=
# WORKERS=2 runs nodewright with two worker processes; SPLIT=1 with one for workflows and one for activities.
WORKERS ?= 1
SPLIT ?=
bench-lifecycle: $(STAMP)
	$(BIN)/python benchmarks/lifecycle.py --runs $(RUNS) $(if $(PEER),--peer $(PEER)) $(if $(SPLIT),--split,--workers $(WORKERS)) $(if $(TIMEOUT),--timeout $(TIMEOUT)) $(if $(VM_SECONDS),--vm-create-seconds $(VM_SECONDS)) $(if $(BOOT_SECONDS),--boot-seconds $(BOOT_SECONDS))

bench-disruption: $(STAMP)
	$(BIN)/python benchmarks/disruption.py

# N NodeClaims through worker, controller, Temporal, API server, etcd and node-agent crashes and Azure errors,
# then a scale to zero; fails on anything leaked, made twice or stuck (N=200 for a quick run).
N ?= 1000
bench-chaos: $(STAMP)
	$(BIN)/python benchmarks/chaos.py --pods $(N)

# The previous release (the last in RELEASES.toml, or RELEASE=0.1.0) with 200 NodeClaims launching, draining and in a
# disruption decision, its workers and controllers rolled to this tree's; fails on a non-determinism error, anything
# stuck or leaked (N=40 for a quick run).
bench-upgrade: $(STAMP) binaries
	$(BIN)/python benchmarks/upgrade.py $(if $(filter command line environment,$(origin N)),--nodeclaims $(N)) $(if $(RELEASE),--release $(RELEASE))

# HOURS of seeded churn at about 200 nodes (scale-ups and downs, Spot evictions, drift, a restart of each process),
# with every process's memory and the long-lived workflows' histories sampled; fails when memory grew after the
# warm-up, a long-lived history was unbounded or anything leaked (HOURS=0.25 for a quick run).
HOURS ?= 2
bench-soak: $(STAMP) binaries
	$(BIN)/python benchmarks/soak.py --hours $(HOURS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
