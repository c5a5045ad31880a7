#!/bin/bash
# The zklock demo, on a fresh Debian 12 machine, as root: `bash demo/run.sh`.
#
# Installs what it needs, builds and installs zklock, then starts one
# ZooKeeper server and two PostgreSQL 15 nodes, node_a and node_b, all on
# 127.0.0.1 only.  Each node gets the batch job of demo/billing.sql, which
# three workers per node then run at the same time, three runs each:
#
#   1. serialized by zklock: no two runs overlap, on either node, and the
#      fencing tokens grow from run to run;
#   2. serialized by pg_advisory_xact_lock: runs on one node take turns, but
#      runs on the two nodes overlap, since each node sees only its own locks.
#
# Then a job in two phases (nightly_shards): each node loads its shard, and
# one aggregation runs only once every node has loaded (a double barrier).
#
# The runs of both nodes are merged into one timeline for each.  The script
# exits non-zero if the zklock runs overlap or their tokens do not grow, so
# it doubles as a smoke test.  It stops everything it started on exit; set
# KEEP_DEMO_DIR=1 to keep its directory (logs, data) for a look afterwards.
set -euo pipefail

demo=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$demo/../test/setup.sh"

nodes=(node_a node_b)
workers_per_node=3
runs_per_worker=3

work=
zkdir=
declare -A port conninfo
psql_opts=(-X -q -At -v ON_ERROR_STOP=1)

as_postgres()
{
	runuser -u postgres -- env PATH="$PATH" "$@"
}

# psql_on NODE ARGS...: a quiet psql on NODE.
psql_on()
{
	local node=$1
	shift
	psql "${psql_opts[@]}" -d "${conninfo[$node]}" "$@"
}

cleanup()
{
	local node pid
	# The workers of an interrupted job first.
	for pid in $(jobs -p); do
		kill "$pid" 2>/dev/null || true
	done
	for node in "${nodes[@]}"; do
		if [ -f "$work/$node/data/postmaster.pid" ]; then
			as_postgres pg_ctl -D "$work/$node/data" -m fast -s stop || true
		fi
	done
	if [ -n "$zkdir" ]; then
		"$ZKLOCK_SRC/test/zk/zkctl" stop "$zkdir" || true
	fi
	if [ -n "${KEEP_DEMO_DIR:-}" ]; then
		echo "== kept $work"
	else
		rm -rf "$work"
	fi
}

# N TCP ports on 127.0.0.1 that nothing listens on right now.
free_ports()
{
	/usr/bin/python3 - "$1" <<'EOF'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
EOF
}

start_node()
{
	local node=$1 hosts=$2
	local dir=$work/$node
	as_postgres mkdir "$dir"
	as_postgres initdb -D "$dir/data" -U postgres -A trust --no-sync >/dev/null
	cat >> "$dir/data/postgresql.conf" <<CONF

# zklock demo
cluster_name = '$node'
listen_addresses = '127.0.0.1'
port = ${port[$node]}
unix_socket_directories = '$dir'
shared_preload_libraries = 'zklock'
zklock.hosts = '$hosts'
zklock.session_timeout = 5000
CONF
	as_postgres pg_ctl -D "$dir/data" -l "$dir/server.log" -w -s start
	conninfo[$node]="host=$dir port=${port[$node]} user=postgres dbname=postgres"
	psql_on "$node" -f "$demo/billing.sql"
	echo "   $node: 127.0.0.1:${port[$node]}"
}

# wait_all WHAT PID...: wait for every pid; fails, naming WHAT, if one failed.
wait_all()
{
	local what=$1 pid failed=0
	shift
	for pid in "$@"; do
		wait "$pid" || failed=1
	done
	if [ "$failed" -ne 0 ]; then
		echo "a $what failed: the job is not complete" >&2
		return 1
	fi
}

# run_job METHOD: every worker of every node calls nightly_billing() at the
# same time; fails if any of them failed.
run_job()
{
	local method=$1
	local node w i
	local pids=() calls
	for node in "${nodes[@]}"; do
		for w in $(seq "$workers_per_node"); do
			calls=()
			for i in $(seq "$runs_per_worker"); do
				calls+=(-c "CALL nightly_billing('w$w', '$method')")
			done
			# psql itself in the background, not a subshell: its pid is
			# the one to wait for, or to kill.
			psql "${psql_opts[@]}" -d "${conninfo[$node]}" "${calls[@]}" &
			pids+=($!)
		done
	done
	wait_all worker "${pids[@]}"
}

# phases: both nodes run nightly_shards() at once; the loads and the one
# aggregation, merged.
phases()
{
	local node pids=()
	for node in "${nodes[@]}"; do
		psql_on "$node" -c "CALL nightly_shards('demo', ${#nodes[@]})" &
		pids+=($!)
	done
	wait_all node "${pids[@]}"
	for node in "${nodes[@]}"; do
		psql_on "$node" -F $'\t' -c "SELECT node, phase, extract(epoch FROM started_at),
		                                     extract(epoch FROM finished_at), '' FROM shard_runs"
	done | /usr/bin/python3 "$demo/timeline.py" --after-all load
}

# timeline METHOD [--exclusive]: the runs of both nodes, merged.
timeline()
{
	local method=$1
	shift
	local node
	for node in "${nodes[@]}"; do
		psql_on "$node" -F $'\t' -v method="$method" <<'SQL'
SELECT node, worker, extract(epoch FROM started_at),
       extract(epoch FROM finished_at), token
  FROM billing_runs
 WHERE method = :'method'
SQL
	done | /usr/bin/python3 "$demo/timeline.py" "$@"
}

# polite_stop: the first node runs long_billing(); the second asks it to let
# go and waits for the lock (its psql session ends with it held: that frees
# it).
polite_stop()
{
	local a=${nodes[0]} b=${nodes[1]} pid asked t0 t1 holder
	psql_on "$a" -c "CALL long_billing(600)" &
	pid=$!
	until holder=$(psql_on "$b" -c "SELECT cluster_name || ', pid ' || pid FROM zk_lock_holders('long-billing') WHERE holding") &&
		[ -n "$holder" ]; do
		sleep 0.1
	done
	sleep 1
	echo "   holder: $holder"
	t0=$(date +%s.%N)
	asked=$(psql_on "$b" -c "SELECT zk_lock_request_release('long-billing')")
	psql_on "$b" -c "SELECT zk_lock_acquire('long-billing', 30000)" >/dev/null
	t1=$(date +%s.%N)
	echo "   $b asked $asked holder to let go, and got the lock $(/usr/bin/python3 -c "print('%.2f' % ($t1 - $t0))") s later"
	wait "$pid"
	echo "   $a stopped after its batch $(psql_on "$a" -c "SELECT max(batch) FROM billing_batches") and released"
}

main()
{
	zklock_setup

	work=$(mktemp -d /tmp/zklock-demo.XXXXXX)
	trap cleanup EXIT
	chown postgres: "$work"
	# initdb and pg_ctl run as postgres, in the current directory.
	cd "$work"

	echo "== starting ZooKeeper"
	zkdir=$work/zk
	local hosts
	hosts=$("$ZKLOCK_SRC/test/zk/zkctl" start "$zkdir")
	echo "   $hosts"

	echo "== starting PostgreSQL nodes"
	local ports i
	read -ra ports <<< "$(free_ports "${#nodes[@]}")"
	for i in "${!nodes[@]}"; do
		port[${nodes[$i]}]=${ports[$i]}
		start_node "${nodes[$i]}" "$hosts"
	done

	local workers=$((${#nodes[@]} * workers_per_node))
	echo
	echo "== nightly_billing under zklock: $workers workers on ${#nodes[@]} nodes, $runs_per_worker runs each"
	run_job zklock
	timeline zklock --exclusive

	echo
	echo "== the same under pg_advisory_xact_lock, which each node keeps to itself"
	run_job advisory
	timeline advisory

	echo
	echo "== a polite stop: ${nodes[0]} runs a long job batch by batch; ${nodes[1]} asks it to let go"
	polite_stop

	echo
	echo "== two phases: each node loads its shard; one aggregation once all have (a double barrier)"
	phases
	echo
}

main
