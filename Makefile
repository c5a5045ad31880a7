# zklock: PGXS build.  `make && make install`, tests via test/run-all.sh.

MODULE_big = zklock
OBJS = \
	src/zklock.o \
	src/guc.o \
	src/zk_shared.o \
	src/zk_bridge.o \
	src/zk_worker.o \
	src/worker_requests.o \
	src/worker_proof.o \
	src/session_file.o \
	src/zk_session.o \
	src/zk_nodes.o \
	src/znode_path.o \
	src/lock_name.o \
	src/lock_node.o \
	src/lock_recipe.o \
	src/deadlock.o \
	src/lock_table.o \
	src/xact_hooks.o \
	src/lost_locks.o \
	src/lock_queue.o \
	src/node_info.o \
	src/stats.o \
	src/sql_functions.o \
	src/fence.o \
	src/revocation.o \
	src/barrier.o \
	src/barrier_views.o \
	src/utility_hook.o

EXTENSION = zklock
DATA = sql/zklock--1.0.sql sql/zklock--1.4.sql sql/zklock--1.0--1.1.sql \
	sql/zklock--1.1--1.2.sql sql/zklock--1.2--1.3.sql sql/zklock--1.3--1.4.sql \
	sql/zklock--1.4--1.5.sql sql/zklock--1.5--1.6.sql sql/zklock--1.6--1.7.sql
PGFILEDESC = "zklock - cluster-wide locks held in Apache ZooKeeper"

# The ZooKeeper C client's single-threaded flavour: the session worker drives
# it from its own event loop, so no PostgreSQL process runs foreign threads.
PG_CPPFLAGS = -I$(srcdir)/src
SHLIB_LINK = -lzookeeper_st
PG_CFLAGS = -Wall -Wextra -Wno-unused-parameter $(if $(WERROR),-Werror)

# pg_regress and isolation tests need a running ZooKeeper and a temporary
# instance pointed at it: test/run-all.sh provides both through
# EXTRA_REGRESS_OPTS (--temp-instance, --temp-config).
REGRESS = setup surface reentrancy names modes errors xact discard barrier privileges revocation fence batch_job cleanup upgrade
ISOLATION = fifo try_timeout xact_locks abort_undo cancel_wait modes_order downgrade
ISOLATION_OPTS = --inputdir=test/isolation --outputdir=output_iso
TAP_TESTS = 1
PROVE_TESTS = test/tap/*.pl

EXTRA_CLEAN = results output_iso tmp_check tmp_check_iso regression.* log

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# PGXS does not track header dependencies; ours are few, so depend on all.
$(OBJS): $(wildcard $(srcdir)/src/*.h)

# Our test modules (ZooKeeper harness, shared checks) next to PostgreSQL's.
PG_PROVE_FLAGS += -I $(srcdir)/test/perl

# Release archive for PGXN, as pgvector and pg_cron make theirs: `make dist`
# writes zklock-<version>.zip of the committed tree (git HEAD, so commit
# first), every file under zklock-<version>/.  The version is META.json's.
DIST_VERSION = $(shell perl -MJSON::PP -e 'local $$/; print decode_json(<>)->{version}' META.json)
.PHONY: dist
dist:
	@test -n "$(DIST_VERSION)" || { echo "no version in META.json" >&2; exit 1; }
	@git diff --quiet HEAD || echo "warning: uncommitted changes are not in the archive" >&2
	git archive --format=zip --prefix=$(EXTENSION)-$(DIST_VERSION)/ --output=$(EXTENSION)-$(DIST_VERSION).zip HEAD

# The randomized fault run at full length (an hour; CI runs it for 3
# minutes per seed): as root, builds and installs zklock for PostgreSQL 15
# first.  NEMESIS_SEED replays a run.
NEMESIS_SECONDS ?= 3600
.PHONY: nemesis
nemesis:
	bash $(srcdir)/test/nemesis.sh --seconds $(NEMESIS_SECONDS) $(if $(NEMESIS_SEED),--seed $(NEMESIS_SEED))
