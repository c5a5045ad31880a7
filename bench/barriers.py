#!/usr/bin/python3
"""zklock's double barrier against Curator's (issue 49, item 7): the time
from the last member's arrival to every member's return from enter.

    bash bench/barriers.sh      (as root: builds and installs zklock first)

For 2, 8 and 64 members: zklock's members are backends spread over two
PostgreSQL nodes, which share each node's one ZooKeeper session; Curator's
(bench/BarrierBench.java) are threads of one JVM, each with a client of its
own, as separate processes would have.  In each round all members but the
last enter and wait (for zklock: until both nodes count them waiting in
zk_barrier_stats), then the last one enters; the figures are the time from
its call to the last member's return ("all") and to the median member's,
over the rounds.  zklock's times are the server's clock_timestamp() before
and after zk_barrier_enter, in each member's own statement.  Every name is
new (one per run, as the reference recommends).  Both on the same
standalone ZooKeeper (forceSync=no: round trips, not the disk, are the
cost), on this machine.  Prints a table and writes bench/BARRIERS.md.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (its ZooKeeper and Node)

BENCH = bench.BENCH
# Another installation's binaries (a private prefix for a trial run).
if os.environ.get('BENCH_PGBIN'):
    bench.PGBIN = Path(os.environ['BENCH_PGBIN'])
SIZES = (2, 8, 64)
ROUNDS = 3 if bench.QUICK else 7
CURATOR_CP = ':'.join('/usr/share/java/%s.jar' % j for j in ('curator-recipes', 'slf4j-nop'))


def waiting(nodes):
    return sum(int(n.value("SELECT waiting FROM zk_barrier_stats WHERE kind = 'enter'"))
               for n in nodes)


def zklock_round(nodes, size, name):
    """(all, median) ms from the last member's call to the returns."""
    query = ("SELECT extract(epoch FROM clock_timestamp()), "
             "zk_barrier_enter(%s, %d, 60000), extract(epoch FROM clock_timestamp())"
             % (bench.quote(name), size))
    procs = []
    for i in range(size - 1):
        node = nodes[i % 2]
        procs.append(bench.spawn(node.psql_cmd('member') + ['-c', query],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    deadline = time.time() + 60
    while waiting(nodes) < size - 1:
        if time.time() > deadline:
            raise RuntimeError('the first %d members did not all wait' % (size - 1))
        time.sleep(0.01)
    last = nodes[(size - 1) % 2]
    procs.append(bench.spawn(last.psql_cmd('member') + ['-c', query],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    rows = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        if p.returncode != 0:
            raise RuntimeError('a member failed: %s' % err)
        bench.children.remove(p)
        start, entered, end = out.strip().split('\t')
        if entered != 't':
            raise RuntimeError('a member timed out')
        rows.append((float(start), float(end)))
    arrival = rows[-1][0]
    after = sorted((end - arrival) * 1000 for _, end in rows)
    # The members went without leaving: ready stays; the name is not used again.
    nodes[0].value('SELECT zk_barrier_reset(%s)' % bench.quote(name))
    return after[-1], after[len(after) // 2]


def curator_rounds(zk, size):
    out = bench.run(['java', '-Xmx512m', '-XX:+UseSerialGC', '-cp', CURATOR_CP,
                     BENCH / 'BarrierBench.java', zk.hosts, '/curator_bench/m%d' % size,
                     size, ROUNDS], timeout=900)
    rounds = [line.split() for line in out.splitlines() if line.startswith('round ')]
    return [(float(r[2]), float(r[3])) for r in rounds]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--work', required=True, type=Path)
    ap.add_argument('--results', default=BENCH / 'BARRIERS.md', type=Path)
    args = ap.parse_args()

    started = datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    zk = bench.ZooKeeper(args.work, 1, durable=False)
    nodes = [bench.Node(args.work, name) for name in bench.NODES]
    results = {}
    try:
        zk.start()
        for n in nodes:
            n.start()
            n.use_zk(zk)
        for size in SIZES:
            bench.log('== %d members' % size)
            z = [zklock_round(nodes, size, 'bench-%d-%d-%d' % (size, r, os.getpid()))
                 for r in range(ROUNDS)]
            c = curator_rounds(zk, size)
            results[size] = (z, c)
    finally:
        bench.stop_children()
        for n in nodes:
            n.stop()
        zk.stop()

    def med(xs, k):
        return statistics.median(x[k] for x in xs)

    lines = ['| members | zklock: all returned | zklock: median | Curator: all returned | Curator: median |',
             '|---|---|---|---|---|']
    for size, (z, c) in results.items():
        lines.append('| %d | %.1f ms | %.1f ms | %.1f ms | %.1f ms |'
                     % (size, med(z, 0), med(z, 1), med(c, 0), med(c, 1)))
    table = '\n'.join(lines)
    print(table)
    args.results.write_text(
        '# Double barrier: from the last arrival to every return\n\n'
        'Written by `bench/barriers.sh` (%s, %d rounds each, medians; %s, '
        'ZooKeeper %s standalone with forceSync=no, PostgreSQL 15, Curator %s).\n'
        'See `bench/barriers.py` for what is measured.\n\n%s\n'
        % (started, ROUNDS, os.uname().machine, zk.version, '5.4.0', table))
    bench.log('== wrote %s' % args.results)


if __name__ == '__main__':
    main()
