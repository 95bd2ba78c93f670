PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: interop-clients bench-s3a setup demo test bench clean referee s3server etcd

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[spark,dev,ops]'
	touch $(STAMP)

setup: $(STAMP)

# RocketMQ's own releases (4.9.7, 5.3.3, the newest 5.x), the referee of the Java-backed tests and
# benchmarks: resolved from Maven Central once into ~/.cache/rocketstore/referee (outside the repo;
# ROCKETSTORE_REFEREE_CACHE moves it), launchers written beside the jars. Seconds when cached. When
# Maven Central cannot be reached the reason is recorded and those tests skip with it.
referee:
	@$(PYTHON) scripts/referee/resolve.py

# The S3-compatible server of the S3 tier tests (versitygw, built with go install into
# ~/.cache/rocketstore/s3server, outside the repo): minutes once, then seconds. When it cannot be
# built the reason is recorded and those tests skip with it. `make test` builds it in the
# background (niced) while the suite runs; the S3 tests wait for it (tests/s3server.py).
s3server:
	@$(PYTHON) scripts/s3server/install.py

# The etcd server under the replicated controller group's tests (controllerType=etcd): Debian's
# etcd-server unpacked into ~/.cache/rocketstore/etcd (outside the repo, no root needed); seconds
# when cached. When it cannot be fetched the reason is recorded and those tests skip with it.
etcd:
	@$(PYTHON) scripts/etcd/install.py

# Spark's own S3 connector for the tier benchmark's Parquet-on-S3 baseline (bench_tier.py
# --parquet): hadoop-aws 3.5.0 (PySpark's hadoop-client version) and the AWS SDK bundle it names,
# resolved with Maven into ~/.m2 (about 650 MB once). Benchmarks only; no test needs it.
bench-s3a:
	for a in org.apache.hadoop:hadoop-aws:3.5.0 software.amazon.awssdk:bundle:2.35.4 \
	         software.amazon.s3.analyticsaccelerator:analyticsaccelerator-s3:1.3.1; do \
		mvn -q -B dependency:get -Dartifact=$$a -Dtransitive=false || exit 1; done

# The outside clients of the interop tests (Node: rocketmq-client-nodejs, ali-ons; Python venvs:
# rocketmq-python-client, the C++ client's rocketmq 0.4.4), pinned, into .cache/ (ignored by
# git): seconds when installed. Tests never install them; when one cannot be installed the
# reason is recorded and its tests skip with it.
interop-clients:
	@$(PYTHON) scripts/interop/install.py

demo: $(STAMP)
	$(VENV)/bin/rocketstore demo

# The second run repeats the codec, record encoder, batch decoder, put path, SYNC_FLUSH store,
# worker link and broker round-trip tests on the pure-Python path (ROCKETSTORE_PURE_PYTHON=1: no
# compiled _speedups), ~1-2 minutes.
PURE_TESTS := tests/remoting tests/format tests/durability/test_sync_deferred.py \
	tests/store/test_put_nowait.py tests/store/test_put_encoded_many.py tests/store/test_dispatch_feed.py tests/store/test_store_scenarios.py \
	tests/broker/test_lifecycle.py tests/broker/test_send_checks.py tests/broker/test_client_broker.py tests/broker/test_local_sends.py \
	tests/broker/test_worker_link.py tests/broker/test_put_batch.py \
	tests/broker/test_workers.py::test_sends_and_pulls_through_two_workers \
	tests/broker/test_workers.py::test_worker_records_equal_one_process_records

# The main suite runs as four pytest processes side by side (MAIN_D below), because most tests wait on servers,
# sockets, timers, JVMs and Spark rather than use a core: MAIN_A (every test that uses the one
# SparkSession of a run, tests/spark, kept in one process; the longest Spark-backed subprocess
# tests; the gRPC client tests), MAIN_C (the longest suites against RocketMQ's own Java releases,
# the referee: run after the pure-Python pass, in the same slot) and MAIN_B (everything else: the
# whole tree minus MAIN_A and MAIN_C, so a new test file lands there by itself). Each process has
# its own temp dir (one fresh parent per run); only MAIN_A writes .pytest_cache. MAIN_A reports
# live, then the others' reports follow; `-rs` lists every skip with its reason; any part failing
# fails the target.
MAIN_A := tests/spark tests/cluster tests/test_readme.py tests/proxy
MAIN_C := tests/controller tests/broker/test_mqadmin.py tests/broker/test_acl_java.py \
	tests/broker/test_pop5_probe.py tests/ha/test_ha_java.py
# MAIN_D: the controller-mode groups (our brokers, mixed groups, the etcd controller group, the
# fault loop) and the 5.x mqadmin survey, a fourth process beside the others: their time is heartbeats, elections and JVM
# starts, not cores. MAIN_C and MAIN_B skip these files.
MAIN_D := tests/controller/test_our_brokers.py tests/controller/test_mixed_groups.py \
	tests/controller/test_etcd_group.py tests/controller/test_fault_loop.py \
	tests/controller/test_epoch_java.py tests/broker/test_mqadmin5.py \
	tests/controller/test_java_brokers.py tests/controller/test_mqadmin_java_control.py
# single tests of MAIN_A's files that run in MAIN_C instead (MAIN_A deselects them), and files of
# MAIN_A's directories that run in MAIN_B: the three slots kept near the same length
MAIN_C_NODES := tests/spark/test_sink_exactly_once.py::test_java_broker_exactly_once_batch_and_killed_stream[5.3.3]
MAIN_B_FROM_A := tests/proxy/test_java_proxy_cluster.py

test: $(STAMP) referee etcd interop-clients
	@tmp=$$(mktemp -d $${TMPDIR:-/tmp}/rocketstore-test.XXXXXX); \
	nice -n 10 $(PYTHON) scripts/s3server/install.py > .s3server.log 2>&1 & s3=$$!; \
	( ROCKETSTORE_PURE_PYTHON=1 $(PY) -m pytest -q -rs -p no:cacheprovider \
		--basetemp=$$tmp/pure $(PURE_TESTS) > .pure-pass.log 2>&1; echo $$? > $$tmp/pure.rc; \
	  $(PY) -m pytest -q -rs --durations=10 -p no:cacheprovider --basetemp=$$tmp/main-c \
		$(addprefix --ignore=,$(MAIN_D)) $(MAIN_C) '$(MAIN_C_NODES)' > .main-c.log 2>&1; \
	  echo $$? > $$tmp/main-c.rc ) & pc=$$!; \
	$(PY) -m pytest -q -rs --durations=10 -p no:cacheprovider --basetemp=$$tmp/main-d \
		$(MAIN_D) > .main-d.log 2>&1 & d=$$!; \
	$(PY) -m pytest -q -rs --durations=10 -p no:cacheprovider --basetemp=$$tmp/main-b \
		$(addprefix --ignore=,$(MAIN_A) $(MAIN_C) $(MAIN_D)) tests $(MAIN_B_FROM_A) > .main-b.log 2>&1 & b=$$!; \
	$(PY) -m pytest -q -rs --durations=10 --basetemp=$$tmp/main-a $(addprefix --ignore=,$(MAIN_B_FROM_A)) \
		--deselect '$(MAIN_C_NODES)' $(MAIN_A); a=$$?; \
	wait $$b; rb=$$?; wait $$d; rd=$$?; wait $$pc; p=$$(cat $$tmp/pure.rc); c=$$(cat $$tmp/main-c.rc); wait $$s3; \
	echo "== S3 server set-up (scripts/s3server/install.py):"; cat .s3server.log; \
	echo "== main suite, second process (all but $(MAIN_A) $(MAIN_C), plus $(MAIN_B_FROM_A)):"; cat .main-b.log; \
	echo "== main suite, the referee's longest suites ($(MAIN_C)):"; cat .main-c.log; \
	echo "== main suite, the controller-mode groups ($(MAIN_D)):"; cat .main-d.log; \
	echo "== pure-Python pass (ROCKETSTORE_PURE_PYTHON=1) of $(PURE_TESTS):"; cat .pure-pass.log; \
	if test $$a -eq 0 && test $$rb -eq 0 && test $$c -eq 0 && test $$rd -eq 0 && test $$p -eq 0; then \
		rm -rf $$tmp; echo "== make test: all passed (temp dirs removed)"; \
	else \
		echo "== make test: main A exit $$a, main B exit $$rb, main C exit $$c, main D exit $$rd, pure pass exit $$p (temp dirs kept: $$tmp)"; \
		exit 1; \
	fi

bench: $(STAMP) referee
	$(PY) -m pip install --quiet -e '.[spark,dev,ops,bench]'
	eval "$$($(PYTHON) scripts/referee/resolve.py --env)"; $(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
	find src -name '_speedups*.so' -delete -o -name '_speedups*.c' -delete
