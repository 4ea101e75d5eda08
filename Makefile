# Two entry points: `make demo` and `make test`.  Both build .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo test venv bench clean

$(BIN)/.installed: pyproject.toml
	# Reuse an installed torch where there is one (the venv sees the system's
	# site-packages); otherwise take torch 2.13.0, which on this kind of machine
	# is a CPU wheel already on disk.  Never let a bare `torch` requirement pull
	# a multi-gigabyte CUDA build.
	@if $(PYTHON) -c "import torch" 2>/dev/null; then \
	    echo "reusing the installed torch"; \
	    $(PYTHON) -m venv --system-site-packages $(VENV); \
	else \
	    $(PYTHON) -m venv $(VENV) && $(BIN)/pip install --quiet "torch==2.13.0"; \
	fi
	$(BIN)/pip install --quiet -e ".[dynamic,lsp,test]"
	touch $@

venv: $(BIN)/.installed

# The static pass over the bundled kernels, then one flag confirmed on the CPU (Triton's
# interpreter) with its witness, and the witness replayed (exit 1 while the defect is there).
DEMO_WITNESSES := .kanalyze/demo
demo: venv
	$(BIN)/kanalyze check fixtures/triton fixtures/cuda --exit-zero --statistics
	@echo; echo "--- confirming the ORD001 flag of one candidate on the CPU (about a minute) ---"
	rm -rf $(DEMO_WITNESSES)
	$(BIN)/kanalyze check fixtures/kernelbench/candidates/level1_problem1_mse_atomic.py --dynamic \
	    --kernelbench fixtures/kernelbench --device cpu --select ORD001 --witness-dir $(DEMO_WITNESSES) --exit-zero
	@echo; echo "--- replaying the witness: exit 1 while the candidate still breaks the clause ---"
	$(BIN)/kanalyze replay $(DEMO_WITNESSES)/*.json || true

test: venv
	$(BIN)/python -m pytest -q

bench: venv
	$(BIN)/python bench/bench_static.py

clean:
	rm -rf $(VENV) .kanalyze_cache
