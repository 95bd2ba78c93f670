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

# The second run repeats the codec, record encoder, put path, SYNC_FLUSH store and broker
# round-trip tests on the pure-Python path (ROCKETSTORE_PURE_PYTHON=1: no compiled _speedups),
# ~1 minute.
PURE_TESTS := tests/remoting tests/format tests/durability/test_sync_deferred.py \
	tests/store/test_put_nowait.py tests/store/test_dispatch_feed.py tests/store/test_store_scenarios.py \
	tests/broker/test_lifecycle.py tests/broker/test_send_checks.py tests/broker/test_client_broker.py

# It runs beside the main suite (its own temp dir, no shared cache); its output follows the main
# run's, and either failing fails the target.
test: $(STAMP)
	@ROCKETSTORE_PURE_PYTHON=1 $(PY) -m pytest -q -p no:cacheprovider \
		--basetemp=$${TMPDIR:-/tmp}/rocketstore-pure-pass $(PURE_TESTS) > .pure-pass.log 2>&1 & pure=$$!; \
	$(PY) -m pytest -q; main=$$?; \
	wait $$pure; p=$$?; \
	echo "== pure-Python pass (ROCKETSTORE_PURE_PYTHON=1) of $(PURE_TESTS):"; cat .pure-pass.log; \
	test $$main -eq 0 && test $$p -eq 0

bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[spark,dev,ops,bench]'
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
	find src -name '_speedups*.so' -delete -o -name '_speedups.c' -delete
