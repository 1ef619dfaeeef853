# Two commands do the whole set-up on a fresh machine: `make demo` and `make test`.
# Everything (the venv, the JVM jars, the local Kafka and S3) is installed on first use.

PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
STACK  := $(VPY) -m workbench.localstack
PYTEST_ARGS ?=
BENCH_ARGS ?=
FLEET_ARGS ?=

export PYSPARK_PYTHON := $(abspath $(VPY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(VPY))

.PHONY: help venv jars cds up down status lint test test-unit test-integration test-slow fuzz bench bench-fleet bench-core bench-check demo smoke wheel clean

help:
	@echo "make demo              install what is missing, start Kafka + S3, run the demo pipeline"
	@echo "make test              install what is missing, start Kafka + S3, run the tests, stop them"
	@echo "                       (on TEST_WORKERS=2 pytest workers; TEST_WORKERS=1 for one process)"
	@echo "make lint              ruff on the package, the workbench and the tests, mypy on the package; make test runs it first"
	@echo "make test-unit         the pure-Python tests only (no Spark, no servers)"
	@echo "make test-slow         the slow suites (crash trials), with the stack"
	@echo "make test WITH_SLOW=1  both in one run (what CI runs)"
	@echo "make fuzz              the fuzz suite, the engines' differential test and verify's property test on a new seed (FUZZ_EXAMPLES=40)"
	@echo "make bench             end-to-end benchmarks (reconstructor vs stateless limit vs peer, state scaling)"
	@echo "                       -> bench-results.json; BENCH_ARGS='throughput --updates 500' to narrow"
	@echo "make bench-fleet       fleet capacity: a live fleet of N sessions, 1 update/s each, read under a"
	@echo "                       '30 seconds' trigger; the largest N each engine keeps up with"
	@echo "                       -> fleet-results.json; FLEET_ARGS='--sessions 250,500 --minutes 2' to narrow"
	@echo "make bench-core        micro-benchmarks of the core and of the per-group path (no JVM)"
	@echo "make bench-check       reconstructor check against the single-process peer (no JVM)"
	@echo "make up | down | status  the local Kafka broker (127.0.0.1:9092) and S3 endpoint (:9000)"
	@echo "make smoke             the stack smoke pipeline (Kafka -> Spark -> Delta on S3A) alone"
	@echo "make jars              resolve the JVM jars from Maven Central into .jars/ and build the JVM engine"
	@echo "make cds               with the stack, the driver JVM's class archive in .jars/cds/ (test and bench make it)"
	@echo "make wheel             build the wheel (with the engine jar: JDK 17 and mvn) into dist/, and"
	@echo "                       dist/reconstructor-engine.jar out of it for the deployments"

$(VENV)/.installed: pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found: install Python 3.11+"; exit 2; }
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV) || { echo "error: could not create $(VENV) (apt-get install python3-venv)"; exit 2; }
	@$(VPY) -m pip install -q --upgrade pip
	@$(VPY) -m pip install -q -e '.[dev]' || { echo "error: pip could not install the project's dependencies (see above)"; exit 2; }
	@touch $@

venv: $(VENV)/.installed

ENGINE_JAR := .jars/spark/reconstructor-engine.jar
ENGINE_SRC := jvm/pom.xml $(shell find jvm/src -name '*.java' 2>/dev/null)

jars: venv
	@$(STACK) jars
	@$(MAKE) --no-print-directory $(ENGINE_JAR)

# The JVM engine (--engine jvm), built against the Spark it runs in; Spark itself is not bundled.
$(ENGINE_JAR): $(ENGINE_SRC)
	@command -v mvn >/dev/null || { echo "error: Maven (mvn) is not installed: apt-get install maven"; exit 2; }
	@mkdir -p .stack/logs
	@echo "building the JVM engine into $(ENGINE_JAR) (log: .stack/logs/mvn-engine.log)"
	@mvn -q -B -s infra/maven/settings.xml -f jvm/pom.xml -Djars.dir=$(abspath .jars) package > .stack/logs/mvn-engine.log 2>&1 \
	  || { tail -30 .stack/logs/mvn-engine.log; echo "error: the JVM engine did not build (see .stack/logs/mvn-engine.log)"; exit 2; }
	@touch $@

up: jars
	@$(STACK) up

down:
	@if [ -x $(VPY) ]; then $(STACK) down; fi

status: venv
	@$(STACK) status

# `make test` and `make test-slow` run their files on TEST_WORKERS pytest workers (pytest-xdist),
# each with a SparkSession of its own, one file to a worker: the integration tests wait on the
# broker, S3, triggers and timeouts about a third of their time, which the other worker uses.  The
# files go out longest first (tests/conftest.py orders them; --no-loadscope-reorder keeps that
# order), so that the run ends on short ones.  TEST_WORKERS=1: one process.
TEST_WORKERS ?= 2
PARALLEL = $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder,)
# Which tests `make test` runs; CI sets WITH_SLOW=1 to run the slow suites in the same run, on the
# same workers, so that the crash trials start first, beside the other files, not after them.
TEST_MARK = $(if $(WITH_SLOW),slow or not slow,not slow)

# The driver JVM's class-data-sharing archive (workbench/class_archive.py): made once per set of
# jars, with the stack up; a local driver then starts with it.  Without one the JVMs start as before.
CDS = $(VPY) -m workbench.class_archive || echo "warning: no class archive was made: the JVMs start without one"

cds: jars
	@$(STACK) up
	@$(CDS)

lint: venv
	@$(VPY) -m ruff check --quiet . || { echo "error: ruff's findings above (make lint)"; exit 1; }
	@$(VPY) -m mypy || { echo "error: mypy's findings above (make lint)"; exit 1; }

test: lint jars
	@$(STACK) up
	@$(CDS)
	@rc=0; $(VPY) -m pytest -m "$(TEST_MARK)" $(PARALLEL) $(PYTEST_ARGS) || rc=$$?; $(STACK) down; exit $$rc

test-unit: venv
	@$(VPY) -m pytest tests/unit $(PYTEST_ARGS)

test-integration: jars
	@$(STACK) up
	@$(CDS)
	@rc=0; $(VPY) -m pytest -m "integration and not slow" $(PARALLEL) $(PYTEST_ARGS) || rc=$$?; $(STACK) down; exit $$rc

test-slow: jars
	@$(STACK) up
	@$(CDS)
	@rc=0; $(VPY) -m pytest -m slow $(PARALLEL) $(PYTEST_ARGS) || rc=$$?; $(STACK) down; exit $$rc


FUZZ_EXAMPLES ?= 40

fuzz: jars
	@$(STACK) up
	@rc=0; RECON_FUZZ_SEED=random RECON_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(VPY) -m pytest tests/integration/test_fuzz.py tests/integration/test_engine_differential.py tests/integration/test_verify_property.py $(PYTEST_ARGS) || rc=$$?; $(STACK) down; exit $$rc

bench: jars
	@$(STACK) up
	@$(CDS)
	@rc=0; $(VPY) -m tests.benchmarks.pipeline_bench $(BENCH_ARGS) || rc=$$?; $(STACK) down; exit $$rc

bench-fleet: jars
	@$(STACK) up
	@$(CDS)
	@rc=0; $(VPY) -m tests.benchmarks.fleet_bench $(FLEET_ARGS) || rc=$$?; $(STACK) down; exit $$rc

bench-core: venv
	@$(VPY) -m tests.benchmarks.core_bench

bench-check: venv
	@$(STACK) up
	@rc=0; $(VPY) -m tests.benchmarks.check_bench $(CHECK_ARGS) || rc=$$?; $(STACK) down; exit $$rc

demo: up
	@$(VPY) -m workbench demo

smoke: up
	@$(VPY) -m workbench.smoke

# The wheel carries reconstructor-engine.jar (build_hooks.py builds it with Maven: JDK 17 and mvn);
# the deployments ship the jar on its own too, taken out of this very wheel, never from .jars/.
WHEEL_VERSION = $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
WHEEL_FILE := dist/sensor_reconstructor-$(WHEEL_VERSION)-py3-none-any.whl

wheel: venv
	@$(VPY) -m pip wheel -q --no-deps -w dist . || { echo "error: the wheel did not build (see above)"; exit 2; }
	@$(VPY) -c 'import sys, zipfile; open("dist/reconstructor-engine.jar", "wb").write(zipfile.ZipFile(sys.argv[1]).read("reconstructor/jars/reconstructor-engine.jar"))' $(WHEEL_FILE)
	@echo "built $(WHEEL_FILE) and dist/reconstructor-engine.jar (taken out of the wheel)"

clean: down
	rm -rf .stack dist build *.egg-info
