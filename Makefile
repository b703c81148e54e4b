# Two entry points for a fresh clone: `make run` and `make test`.
# Both set up .venv (idempotent: redone only when pyproject.toml changes),
# install the project with its test extras, and build the bundled engine.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
ENGINE_STAMP := $(VENV)/.engine-built
OUT    ?= epbench-out
GRID   ?= default
ARMS   ?= --arm ort --arm engine --arm plugin:nxrt_ep_cpu

.PHONY: run test setup engine lint clean asan benchmarks validation report-screenshot cross-toolchain

setup: $(STAMP) $(ENGINE_STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

# The engine is C: rebuilt when any of its sources change.
$(ENGINE_STAMP): $(STAMP) $(wildcard engine/src/*.c engine/src/*.h engine/src/*.map) engine/build.py
	$(PY) -m epbench.engine.build --inplace
	touch $@

engine: $(ENGINE_STAMP)

run: setup
	$(VENV)/bin/epbench run --grid $(GRID) $(ARMS) --out $(OUT) --overwrite

# The engine's aarch64 cross-compile test needs Debian's cross gcc: on CI (CI=true, as
# GitHub Actions sets it) make test installs it; elsewhere the test skips and says so.
CROSS_CC := aarch64-linux-gnu-gcc
cross-toolchain:
	@command -v $(CROSS_CC) >/dev/null || { \
	    SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	    $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq gcc-aarch64-linux-gnu; }

# Plain lint-imports, from the checkout's root: its contract type lays the package out
# with the four folders pyproject.toml maps into it (tests/support/layers_contract.py).
LINT_IMPORTS := $(VENV)/bin/lint-imports

# Two passes. First every test but the `serial` ones, on two pytest-xdist workers, a test
# file to a worker (a module's fixtures are built once, its tests never run side by side),
# in the order tests/conftest.py collects them: the files of `slow` tests first (xdist's
# own order, the most tests first, left the valgrind and wheel files to the end).
# Then the `serial` tests, alone: they judge real timings, which the first pass's other
# worker would load, or plant a file in the package, which its builds' guard would see
# (fresh-clone CI, 2026-12-07). The second pass collects only the files that mark a test `serial`
# (collecting the whole suite again took 25 s on a loaded 2-core machine).
PYTEST_WORKERS ?= 2
SERIAL_TEST_FILES = $(shell grep -l 'pytest\.mark\.serial' tests/test_*.py)
test: setup $(if $(filter true,$(CI)),cross-toolchain)
	$(VENV)/bin/ruff check .
	$(LINT_IMPORTS)
	@# Every module's bytecode up front: a test's subprocess run without
	@# PYTHONDONTWRITEBYTECODE wrote it into the package mid-run, and the build guard in
	@# the other worker's test took that for a build's write (CI, 2026-12-07).
	$(PY) -m compileall -q epbench harness cases engine reports > /dev/null
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not serial"
	$(PY) -m pytest -q -m serial $(SERIAL_TEST_FILES)

# The engine's differential and run-time tests, and ONNX's node test cases of its ops in
# every partition mode, against an ASan+UBSan build of it, under Python: libasan must be
# preloaded into the interpreter (see engine/README.md).
asan: $(STAMP)
	$(PY) -m epbench.engine.build --sanitize --out build/asan
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libstdc++.so)" \
	ASAN_OPTIONS=detect_leaks=0 EBE_TEST_LIBRARY=$(CURDIR)/build/asan/libepbench_engine.so \
	$(PY) -m pytest -q -p no:cacheprovider tests/test_engine_differential.py tests/test_engine_runtime.py \
	    tests/test_engine_overflow.py \
	    "tests/test_conformance.py::test_engine_claims_and_passes_every_float32_case_of_its_ops" \
	    "tests/test_conformance.py::test_engine_nodes_inside_subgraphs_keep_the_model_valid"

# BENCHMARKS.md: the default grid for ORT, the engine in its three designs (fused,
# per_node, kernel) and nxrt-ep-cpu, in one interleaved run, rendered with the targets it
# is held to. The render refuses (exit 1, BENCHMARKS.md left as it was) when a target
# case had fewer than half its rounds quiet: run it on a quiet machine.
benchmarks: setup
	$(VENV)/bin/epbench run --grid default --processes 3 --rounds 30 --arm ort --arm engine \
	    --arm engine:partition=per_node,name=engine_per_node \
	    --arm engine:partition=kernel,name=engine_kernel --arm plugin:nxrt_ep_cpu \
	    --out $(OUT)/benchmarks --overwrite
	$(VENV)/bin/epbench report --benchmarks $(OUT)/benchmarks/results.json --out BENCHMARKS.md

# docs/validation: the harness's own false-positive rate, detection power per
# injected slowdown, position bias and counter exactness on this machine, on every path
# (same-process, separate runs, compare-commits' whole command) and under each background
# load validate makes itself.
# 21 repeats per load give 126 A/A comparisons per path and load on the quick grid:
# enough for a Wilson 95 % upper bound below 3 % when none is flagged. A repeat took 4-6
# minutes on VM F (none 247 s, bursty 291 s, sustained 350 s on average) and 12 on VM D
# (before the workers stopped importing onnx),
# for the two per-case paths; the compare-commits path's six commands add 7-9 minutes a
# repeat on VM F (2026-12-05), so the whole target takes 12-16 hours there and the default
# budget stops each load short of VALIDATION_REPEATS, with a note. A shorter one, elsewhere:
#   make validation VALIDATION_LOADS=none VALIDATION_BUDGET=1800 VALIDATION_OUT=build/v
VALIDATION_LOADS ?= none,bursty,sustained
VALIDATION_BUDGET ?= 60000
VALIDATION_REPEATS ?= 21
VALIDATION_OUT ?= docs/validation
validation: setup
	$(VENV)/bin/epbench validate --grid quick --load $(VALIDATION_LOADS) \
	    --budget $(VALIDATION_BUDGET) --max-repeats $(VALIDATION_REPEATS) --out $(VALIDATION_OUT)

# docs/images/report.png and history.png: the HTML report (`epbench report`) of a seeded sample run
# (docs/images/make_report_sample.py), rendered by headless Chromium. Chromium and an
# emoji font (without it the verdicts show as boxes) come from apt-get when missing.
REPORT_SAMPLE := build/report-sample
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# No sandbox for root (Chromium refuses to start otherwise); nothing fetched while rendering.
CHROMIUM_FLAGS := --headless --disable-gpu --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --hide-scrollbars \
    $(shell [ "$$(id -u)" = 0 ] && echo --no-sandbox)

report-screenshot: setup
	command -v chromium >/dev/null && [ -e /usr/share/fonts/truetype/noto/NotoColorEmoji.ttf ] \
	    || { $(SUDO) apt-get update && $(SUDO) apt-get install -y --no-install-recommends \
	         chromium fonts-noto-color-emoji; }
	rm -rf $(REPORT_SAMPLE)
	$(PY) docs/images/make_report_sample.py $(REPORT_SAMPLE)
	$(VENV)/bin/epbench compare $(REPORT_SAMPLE)/results.json --base base --pr head \
	    --profile tests/fixtures/results/profile.json --format json \
	    --out $(REPORT_SAMPLE)/compare.json --fail-on never
	$(VENV)/bin/epbench report $(REPORT_SAMPLE) --html $(REPORT_SAMPLE)/html
	chromium $(CHROMIUM_FLAGS) --user-data-dir=$(CURDIR)/$(REPORT_SAMPLE)/chromium --window-size=1200,2300 \
	    --screenshot=$(CURDIR)/docs/images/report.png \
	    file://$(CURDIR)/$(REPORT_SAMPLE)/html/index.html
	# docs/images/history.png: the history page the history workflow publishes, drawn from
	# a seeded store of 36 commits on two machine classes (docs/images/make_history_sample.py).
	$(PY) docs/images/make_history_sample.py $(REPORT_SAMPLE)/history
	for class in github-ubuntu-latest github-ubuntu-24.04-arm; do \
	    $(VENV)/bin/epbench history import $(REPORT_SAMPLE)/history/$$class --machine-class $$class \
	        --db $(REPORT_SAMPLE)/history.sqlite || exit 1; done
	$(VENV)/bin/epbench report --history $(REPORT_SAMPLE)/history.sqlite --html $(REPORT_SAMPLE)/history-html \
	    --commit-url https://github.com/OWNER/REPO/commit/
	chromium $(CHROMIUM_FLAGS) --user-data-dir=$(CURDIR)/$(REPORT_SAMPLE)/chromium --window-size=1200,1900 \
	    --screenshot=$(CURDIR)/docs/images/history.png \
	    file://$(CURDIR)/$(REPORT_SAMPLE)/history-html/index.html

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(LINT_IMPORTS)

clean:
	rm -rf $(VENV) build *.egg-info engine/*.so engine/_build
