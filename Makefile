PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[spark,dev,ops]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/rocketstore demo

# The second run repeats the codec, SYNC_FLUSH store and broker round-trip tests on the
# pure-Python path (ROCKETSTORE_PURE_PYTHON=1: no compiled _speedups), ~1 minute.
PURE_TESTS := tests/remoting tests/durability/test_sync_deferred.py tests/store/test_put_nowait.py \
	tests/broker/test_lifecycle.py tests/broker/test_send_checks.py tests/broker/test_client_broker.py

test: $(STAMP)
	$(PY) -m pytest -q
	ROCKETSTORE_PURE_PYTHON=1 $(PY) -m pytest -q $(PURE_TESTS)

bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[spark,dev,ops,bench]'
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
	find src -name '_speedups*.so' -delete -o -name '_speedups.c' -delete
