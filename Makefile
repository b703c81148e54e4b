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

.PHONY: run test setup engine lint clean asan

setup: $(STAMP) $(ENGINE_STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

# The engine is C: rebuilt when any of its sources change.
$(ENGINE_STAMP): $(STAMP) $(wildcard engine/src/*.c engine/src/*.h engine/src/*.map) engine/build.py
	$(PY) -m engine.build --inplace
	touch $@

engine: $(ENGINE_STAMP)

run: setup
	$(VENV)/bin/epbench run --grid $(GRID) $(ARMS) --out $(OUT)

test: setup
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) build *.egg-info engine/*.so engine/_build
