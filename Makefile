# dlscale: the two commands that matter are `make demo` and `make test`.
# Both set up everything they need on a fresh machine (Debian 12, Python >= 3.11).

PYTHON ?= python3
VENV := .venvs/workflow
PY := $(VENV)/bin/python
SNAKEMAKE := $(VENV)/bin/snakemake
PROFILE ?= profiles/local

.PHONY: demo test test-faults lint unit format system clean-results

# The workflow's own venv, from its lock (hash-checked, exactly the lock, dlscale editable).
$(VENV)/.installed: envs/workflow.lock pyproject.toml
	bash scripts/ensure-system.sh
	$(PYTHON) -m dlscale.envs build $(VENV) workflow
	touch $@

system:
	bash scripts/ensure-system.sh

## check-site: one 2-node SLURM job verifies what the study's frameworks need across nodes
## (shared file system, venvs, TCP by node name, MPI with PMIx, Java) before the study runs.
## make check-site [SITE_PROFILE=profiles/slurm] [SITE_CONFIG=my-study.yaml]
SITE_PROFILE ?= profiles/slurm
SITE_CONFIG ?= config.yaml
.PHONY: check-site
check-site: $(VENV)/.installed
	$(SNAKEMAKE) results/site/check.json --profile $(SITE_PROFILE) --configfile $(SITE_CONFIG) --forcerun check_site

## profiles: `snakemake --profile tianhe` / `--profile slurm` as typed (links into ~/.config/snakemake).
.PHONY: profiles
profiles:
	bash scripts/install-profiles.sh

## demo: the default study (config.yaml) on the local profile, then the report.
demo: $(VENV)/.installed
	$(SNAKEMAKE) --profile $(PROFILE)
	@# Never a report over results this invocation left out of date: the plan must now be
	@# empty (mtime and input triggers: a failed run's new attempt count is not "out of date").
	@$(SNAKEMAKE) --profile $(PROFILE) --dry-run --rerun-triggers mtime input 2>&1 | grep -q "Nothing to be done" \
	  || { echo "make demo: the study is not up to date after the run (see: $(SNAKEMAKE) --profile $(PROFILE) -n);" \
	       "no report written" >&2; exit 1; }
	$(SNAKEMAKE) --profile $(PROFILE) --report results/report.html
	@echo "report: results/report.html  tables: results/runs.csv  figures: results/figures/"

## test: lint, then the whole pytest suite: tests/unit on every core (pytest-xdist; pure
## functions, no daemon, nothing timed), then the rest one test at a time (their runs are
## timed and contention-checked: a second test beside one would be the contention).
test: $(VENV)/.installed lint
	$(PY) -m pytest -n auto tests/unit
	$(PY) -m pytest tests --ignore=tests/unit

## unit: the pure tests alone (tests/unit: no framework run, daemon or workflow), on every core.
unit: $(VENV)/.installed
	$(PY) -m pytest -n auto tests/unit

## test-faults: the fault and bad-input suite alone, ending with its table (also part of `test`).
test-faults: $(VENV)/.installed
	$(PY) -m pytest tests -m faults

## bench: performance benchmarks of all four frameworks -> results/bench/*.csv, summary.md, figures
## (AlexNet/ResNet-50 at most 3 repeats, BigDL 2 training / 1 comm; its run time and why:
## benchmarks/README.md). Builds what it needs (framework venvs; the
## communication arms are dlscale.commbench's, Open MPI's in the caffe venv). BENCH_REPEATS=5 by default.
BENCH_REPEATS ?= 5
.PHONY: bench
bench: $(VENV)/.installed
	nice -n 10 $(PY) -m benchmarks --repeats $(BENCH_REPEATS)

## bench-budgets: the default study (make demo's) run warm into a fresh folder and held to its
## budgets (dlscale/thresholds.py: demo_warm_wall, demo_timed_share) -> results/bench/budgets.md,
## with where its time went (Snakemake's log and the runs' events). About 10 minutes on 2 cores
## per demo; BUDGET_REPEATS=N runs N demos as samples (the median and its interval decide).
BUDGET_REPEATS ?= 1
.PHONY: bench-budgets
bench-budgets: $(VENV)/.installed
	$(PY) -m benchmarks.budgets --repeats $(BUDGET_REPEATS)

## fresh-check: a fresh start as far as this machine allows: a clean clone of HEAD, every cache
## empty (DLSCALE_CACHE, pip, uv, the venvs), then `make demo` there, timed; says what it could
## not check (system packages already here, pip's configuration, the user). Not part of `test`:
## a whole demo, 15-50 minutes. make fresh-check [DRY=1: the plan only] [KEEP=1]
## [UNPRIVILEGED=1: as root, run the demo as nobody, a user without root]
.PHONY: fresh-check
fresh-check:
	bash scripts/fresh-check.sh $(if $(DRY),--dry) $(if $(KEEP),--keep) $(if $(UNPRIVILEGED),--unprivileged)

## compare-check: does python -m dlscale.compare find one changed setting, and only it, on this
## machine? Three small studies (BASE, an independent SAME, CHANGED) run interleaved, then
## compared -> results/compare-check/summary.md (about 8 minutes on 2 cores).
## make compare-check [CHANGE=torch.mkldnn=false] [COMPARE_REPEATS=6]
CHANGE ?= torch.mkldnn=false
COMPARE_REPEATS ?= 6
.PHONY: compare-check
compare-check: $(VENV)/.installed
	$(PY) -m benchmarks.compare_check --change $(CHANGE) --repeats $(COMPARE_REPEATS)

lint: $(VENV)/.installed
	$(SNAKEMAKE) --lint
	$(VENV)/bin/snakefmt --check Snakefile rules
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(VENV)/.installed
	$(VENV)/bin/snakefmt Snakefile rules
	$(VENV)/bin/ruff format .

clean-results:
	rm -rf results .snakemake

## lock: envs/<env>.lock from envs/<env>.txt for every environment (uv pip compile: exact
## versions, sha256 of every file; the existing pins are kept). ENVS="torch caffe" for some,
## UPGRADE=1 to move every pin to the newest version the .txt allows. Commit the locks.
LOCK_VENV := .venvs/lock-tool
ENVS ?=
.PHONY: lock artifact
$(LOCK_VENV)/.installed: envs/lock-tool.lock
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install --disable-pip-version-check -q --require-hashes -r envs/lock-tool.lock
	touch $@

lock: $(LOCK_VENV)/.installed
	$(PYTHON) -m dlscale.envs lock --uv $(LOCK_VENV)/bin/uv $(if $(UPGRADE),--upgrade) $(ENVS)
	$(PYTHON) -m dlscale.envs check $(ENVS)

## artifact: the study (CONFIG, default config.yaml) in one file, $(ARTIFACT): config, locks,
## every run's events and logs, tables, figures, report, MANIFEST.json with checksums and
## provenance; then `python -m dlscale.archive.verify` checks it. Run after `make demo`.
CONFIG ?= config.yaml
ARTIFACT ?= results/artifact.tar.gz
artifact: $(VENV)/.installed
	@test -f results/runs.csv || { echo "make artifact: no results/runs.csv: run the study first (make demo)" >&2; exit 1; }
	@# The report must describe these results: made again when missing or older than the tables.
	@if [ ! -f results/report.html ] || [ results/report.html -ot results/runs.csv ]; then \
	  echo "$(SNAKEMAKE) --profile $(PROFILE) --configfile $(CONFIG) --report results/report.html"; \
	  $(SNAKEMAKE) --profile $(PROFILE) --configfile $(CONFIG) --report results/report.html; fi
	$(PY) -m dlscale.archive.artifact --config $(CONFIG) --out $(ARTIFACT)
	$(PY) -m dlscale.archive.verify $(ARTIFACT)
