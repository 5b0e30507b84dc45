# Every target creates or reuses .venv and installs the pinned dependencies first.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint binaries bench bench-lifecycle bench-disruption bench-repack bench-chaos bench-fuzz bench-upgrade bench-soak clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# REGION=westeurope plays another Azure region (its sizes, zones and prices).
demo: $(STAMP)
	$(BIN)/nodewright demo $(if $(REGION),--region $(REGION))

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
# TEMPORAL_DB=1 keeps the dev server's state in a SQLite file, as the chart's embedded Temporal does.
bench-lifecycle: $(STAMP)
	$(BIN)/python benchmarks/lifecycle.py --runs $(RUNS) $(if $(PEER),--peer $(PEER)) $(if $(SPLIT),--split,--workers $(WORKERS)) $(if $(TIMEOUT),--timeout $(TIMEOUT)) $(if $(VM_SECONDS),--vm-create-seconds $(VM_SECONDS)) $(if $(BOOT_SECONDS),--boot-seconds $(BOOT_SECONDS)) $(if $(TEMPORAL_DB),--temporal-db)

bench-disruption: $(STAMP)
	$(BIN)/python benchmarks/disruption.py

# A seeded fragmented workload scaled up, then down, and what consolidation makes of it: $/h, nodes, pods evicted
# and nodes launched every minute for MINUTES after the last step (MINUTES=3 for a quick run); PEER=karpenter runs
# Karpenter's kwok controller on the same workload first and prints both rows, the ratios and the lower bound.
.PHONY: bench-consolidation
SEED ?= 1
MINUTES ?= 15
bench-consolidation: $(STAMP)
	$(BIN)/python benchmarks/consolidation.py $(if $(PEER),--peer $(PEER)) --seed $(SEED) --minutes $(MINUTES)

# Small fragmented clusters planned round after round, against their cheapest home (SEEDS=0:200 is the tuning set).
SEEDS ?= 1000:1200
bench-repack: $(STAMP)
	$(BIN)/python benchmarks/repack.py --seeds $(SEEDS)

# N NodeClaims through worker, controller, Temporal, API server, etcd and node-agent crashes and Azure errors,
# then a scale to zero; fails on anything leaked, made twice or stuck (N=200 for a quick run).
N ?= 1000
bench-chaos: $(STAMP)
	$(BIN)/python benchmarks/chaos.py --pods $(N)

# OBJECTS seeded objects of every kind (valid and invalid) through the API server, the models, the what-if
# commands, and SAMPLE of them into the running controller and worker; fails on a crash, a stopped loop or
# workflow, or an accepted object nodewright cannot honour that it does not report (OBJECTS=300 for a quick run).
OBJECTS ?= 10000
SAMPLE ?= 300
bench-fuzz: $(STAMP)
	$(BIN)/python benchmarks/fuzz.py --objects $(OBJECTS) --sample $(SAMPLE)

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
