# Quick start: `make run` (every study at CPU size, then REPORT.md) and `make test`.
# Each target creates .venv and installs the pinned dependencies when missing (--no-compile: Python
# compiles the bytecode of the modules it imports on first use, not all of every package; the install
# time is in docs/performance.md). It writes that bytecode (`__pycache__`, ignored by git) even where the
# environment sets PYTHONDONTWRITEBYTECODE: every study of `make run` and many tests are a new Python
# process, which would otherwise compile about a thousand modules from source each time (about 3 s each).
PYTHON ?= python3
export PYTHONDONTWRITEBYTECODE :=
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
OUT ?= results

.PHONY: run test bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile -c constraints.txt -e ".[test]"
	touch $(STAMP)

# The report is written even when a check fails; the exit status is the run's.  Two studies run side
# by side (--jobs 2): much of a quick study is single-threaded compilation, so two use the two cores better.
JOBS ?= 2
run: $(STAMP)
	$(PY) -m experiments run all --quick --jobs $(JOBS) --out $(OUT); status=$$?; \
	$(PY) -m experiments report --out $(OUT) && exit $$status

# Lint first (rules in pyproject.toml), then every test on 2 workers (worksteal: an idle worker takes
# queued tests from the busy one, so the long tests do not end the run on one worker; 3 workers were
# no faster: 14 min 35 s against 14 min 27 s).
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -n 2 --dist worksteal --durations=25 tests

clean:
	rm -rf $(VENV) $(OUT)
