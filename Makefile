# obleth — build, test and run.  `make help` lists the targets.
PREFIX   ?= /usr/local
DESTDIR  ?=
CC       ?= cc
PKGS      = lua5.4 libevent libcurl yaml-0.1 libsystemd sqlite3 libcrypto libssl libpq ldap
CFLAGS   ?= -O2 -g
WARN      = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-unused-parameter
CPPFLAGS += -std=c11 -D_DEFAULT_SOURCE -DOBLETH_HAVE_SYSTEMD $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDLIBS   += $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lreadline -lm

SRCS  = $(wildcard host/*.c)
HDRS  = $(wildcard host/*.h)
OBJS  = $(SRCS:host/%.c=build/obj/%.o)
AOBJS = $(SRCS:host/%.c=build/asan/obj/%.o)
SAN   = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

.PHONY: engine-check web-test all deps asan check test lint install uninstall clean cluster-up cluster-down demo bench help fresh-check check-load \
	fuzz fuzz-build deploy-check helm-check soak chaos chaos-ha

all: build/obleth build/obleth-provisioner build/web/index.html

# The dashboard (web/): npm packages pinned by web/package-lock.json (installed again when
# node_modules is missing or older than the lock file), bundled by esbuild into build/web/.
WEB_SRCS = $(shell find web/src -type f 2>/dev/null) web/build.mjs
web/node_modules/.installed: web/package-lock.json
	PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --prefix web --no-audit --no-fund
	@touch $@

build/web/index.html: $(WEB_SRCS) web/node_modules/.installed
	node web/build.mjs build/web

help:
	@echo "make            build build/obleth (runs 'make deps' first if headers are missing)"
	@echo "make deps       install build and test dependencies from Debian's packages"
	@echo "make check      every test tier, again under ASan+UBSan, luacheck; ends with 'N passed, N failed'"
	@echo "make engine-check   the engine tier alone: llama.cpp serving a tiny model as a Slurm job (26.05 harness), through the router"
	@echo "make demo [SLURM=22.05|24.11|26.05]   the main job: local Slurm cluster, obleth serve + provisioner, smoke-test model"
	@echo "make cluster-up / cluster-down [SLURM=22.05|24.11|26.05]   the harness Slurm cluster (spec/cluster/)"
	@echo "make bench      benchmarks under spec/bench/"
	@echo "make fresh-check   'make demo' on a fresh minimal Debian 12 root (debootstrap + chroot), as a new user"
	@echo "make check-load    'make check' three times in a row with every CPU held by a busy loop"
	@echo "make fuzz       libFuzzer + ASan/UBSan on every parser (FUZZ_RUNS=1000000 per target; needs clang)"
	@echo "make deploy-check  deploy/docker end to end: dockerd, image without a registry, Compose on the cluster"
	@echo "make helm-check    deploy/helm/obleth: helm lint --strict, helm template, the rendered manifests"
	@echo "make soak       the lease, outage and JWT renewal specs for ten minutes each (OBLETH_SOAK_SECONDS);"
	@echo "                the connection specs with 10,000 slowloris connections (SOAK_SLOWLORIS)"
	@echo "make chaos-ha   3 obleth serve on PostgreSQL behind HAProxy: SIGKILL them in turn, restart PostgreSQL; lost/duplicate table (CHAOS_HA_SECONDS)"
	@echo "make chaos      SIGKILL the provisioner at >= 100 points (CHAOS_KILLS) and obleth serve during writes; prints the table"
	@echo "make install PREFIX=/usr/local"
	@echo "make web-test   the dashboard's browser tests (headless Chromium, harness cluster) and node --test specs"

build/.deps-ok:
	@mkdir -p build
	@scripts/deps.sh build
	@touch $@

build/.deps-all-ok:
	@mkdir -p build
	@scripts/deps.sh all
	@touch $@

deps: build/.deps-all-ok

build/obj/%.o: host/%.c $(HDRS) | build/.deps-ok
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(WARN) -c -o $@ $<

build/obleth: $(OBJS)
	$(CC) $(CFLAGS) -o $@ $(OBJS) $(LDFLAGS) $(LDLIBS)

build/obleth-provisioner: build/obleth
	ln -sf obleth $@

build/asan/obj/%.o: host/%.c $(HDRS) | build/.deps-ok
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -O1 -g $(SAN) $(WARN) -c -o $@ $<

build/asan/obleth: $(AOBJS)
	$(CC) -O1 -g $(SAN) -o $@ $(AOBJS) $(LDFLAGS) $(LDLIBS)
	ln -sf obleth build/asan/obleth-provisioner

asan: build/asan/obleth

# Fuzzing (spec/fuzz/): clang's libFuzzer with ASan + UBSan, every host object but main.o.
FUZZ_CC   ?= clang
FUZZ_SAN   = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
FUZZ_OBJS  = $(filter-out build/fuzz/obj/main.o,$(SRCS:host/%.c=build/fuzz/obj/%.o))
FUZZ_RUNS ?= 1000000

build/fuzz/obj/%.o: host/%.c $(HDRS) | build/.deps-ok
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) -O1 -g -fsanitize=fuzzer-no-link $(FUZZ_SAN) $(WARN) -c -o $@ $<

build/fuzz/obleth-fuzz: spec/fuzz/fuzz.c $(FUZZ_OBJS)
	$(FUZZ_CC) $(CPPFLAGS) -DOBLETH_ROOT='"$(CURDIR)"' -O1 -g -fsanitize=fuzzer $(FUZZ_SAN) $(WARN) \
		-o $@ spec/fuzz/fuzz.c $(FUZZ_OBJS) $(LDFLAGS) $(LDLIBS)

fuzz-build: build/fuzz/obleth-fuzz

fuzz: build/fuzz/obleth-fuzz
	@spec/fuzz/run.sh $(FUZZ_RUNS)

lint:
	luacheck --codes lua spec scripts

check test: build/.deps-all-ok all asan
	@spec/run.sh

# the engine tier alone: the real llama-server as a Slurm job of the 26.05 harness, through obleth
engine-check: build/.deps-all-ok all
	@spec/engine/run.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/obleth
	install -m 0755 build/obleth $(DESTDIR)$(PREFIX)/bin/obleth
	ln -sf obleth $(DESTDIR)$(PREFIX)/bin/obleth-provisioner
	cp -R lua $(DESTDIR)$(PREFIX)/share/obleth/
	if [ -d recipes ]; then cp -R recipes $(DESTDIR)$(PREFIX)/share/obleth/; fi
	rm -rf $(DESTDIR)$(PREFIX)/share/obleth/web
	cp -R build/web $(DESTDIR)$(PREFIX)/share/obleth/web
	rm -rf $(DESTDIR)$(PREFIX)/share/obleth/docs
	cp -R docs $(DESTDIR)$(PREFIX)/share/obleth/docs
	install -d $(DESTDIR)$(PREFIX)/share/doc/obleth
	install -m 0644 README.md $(DESTDIR)$(PREFIX)/share/doc/obleth/

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/obleth $(DESTDIR)$(PREFIX)/bin/obleth-provisioner
	rm -rf $(DESTDIR)$(PREFIX)/share/obleth $(DESTDIR)$(PREFIX)/share/doc/obleth

web-test: all
	@spec/web/run.sh

# the harness Slurm release: 22.05 (Debian 12's packages, build/cluster), 24.11 (trixie) or 26.05
# (sid), each in a debootstrap root under build/cluster-<release>/
SLURM ?= 22.05
cluster-up:
	@OBLETH_CLUSTER_RELEASE=$(SLURM) spec/cluster/up.sh

cluster-down:
	@OBLETH_CLUSTER_RELEASE=$(SLURM) spec/cluster/down.sh

demo: build/.deps-all-ok all
	@OBLETH_CLUSTER_RELEASE=$(SLURM) scripts/demo.sh

bench: all
	@spec/bench/run.sh

fresh-check:
	@scripts/fresh-check.sh

check-load: build/.deps-all-ok all asan
	@spec/load.sh 3

deploy-check: all
	@scripts/deploy-check.sh

helm-check: all
	@scripts/helm-check.sh

# the in-suite lease, outage and renewal specs at soak length (10 minutes each; the
# outages spec stops slurmrestd, slurmctld and obleth serve that long, one after the other)
SOAK_SECONDS ?= 600
# and the connection specs (spec/host/http_connections_spec.lua) with 10,000 slowloris connections, five rounds
SOAK_SLOWLORIS ?= 10000
SOAK_SLOWLORIS_ROUNDS ?= 5
soak: all
	@spec/cluster/up.sh >build/cluster-up.log 2>&1 || { tail -20 build/cluster-up.log; exit 1; }
	@set -a; . build/cluster/env; set +a; OBLETH_SOAK_SECONDS=$(SOAK_SECONDS) build/obleth lua /usr/bin/busted \
	  -o spec/support/obleth_output.lua --lpath='./?.lua' spec/integration/provisioner_lease_spec.lua \
	  spec/integration/provisioner_daemon_spec.lua spec/integration/provisioner_outages_spec.lua \
	  spec/integration/slurm_token_renewal_spec.lua
	@OBLETH_SLOWLORIS_CONNECTIONS=$(SOAK_SLOWLORIS) OBLETH_SLOWLORIS_ROUNDS=$(SOAK_SLOWLORIS_ROUNDS) build/obleth lua \
	  /usr/bin/busted -o spec/support/obleth_output.lua --lpath='./?.lua' spec/host/http_connections_spec.lua

# crash at any point (spec/chaos/run.lua; a 10-kill run is part of make check)
CHAOS_KILLS ?= 100
chaos: build/obleth build/obleth-provisioner
	@OBLETH_CLUSTER_RELEASE=$(SLURM) spec/chaos/run.sh $(CHAOS_KILLS)

# several obleth serve on PostgreSQL behind HAProxy (spec/chaos/ha.lua; not part of make check)
chaos-ha: build/obleth build/obleth-provisioner
	@OBLETH_CLUSTER_RELEASE=$(SLURM) spec/chaos/ha.sh

clean:
	rm -rf build/web build/web-screens build/obj build/asan build/fuzz build/obleth build/obleth-provisioner build/.deps-ok build/.deps-all-ok
