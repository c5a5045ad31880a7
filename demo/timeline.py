#!/usr/bin/python3
"""Print the merged timeline of the demo's batch job runs.

Reads one run a line on stdin, tab-separated, from any number of nodes:
    node  worker  started_at  finished_at  token
(times in seconds since the epoch, token empty for none), and prints the runs
in start order with a bar chart, then the number of overlapping pairs.

With --exclusive, also checks what a cluster-wide lock promises: no two runs
overlap and the fencing tokens strictly increase in start order; the exit
status is 1 if either does not hold.  With --after-all LOAD, what a double
barrier promises: exactly one run that is not called LOAD, and it starts
only after every LOAD run has finished.
"""

import argparse
import sys
from collections import namedtuple

Run = namedtuple("Run", "who start finish token")

CHART_WIDTH = 60            # columns, at most
STEPS = (0.05, 0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 5.0)   # seconds a column


def read_runs(lines):
    runs = []
    for line in lines:
        node, worker, start, finish, token = line.rstrip("\n").split("\t")
        runs.append(Run(f"{node}/{worker}", float(start), float(finish),
                        int(token) if token else None))
    return sorted(runs, key=lambda r: r.start)


def overlapping_pairs(runs):
    """Pairs of runs of which one started before the other finished."""
    return [(a, b) for i, a in enumerate(runs) for b in runs[i + 1:]
            if a.start < b.finish and b.start < a.finish]


def print_timeline(runs):
    t0 = runs[0].start
    end = max(r.finish for r in runs) - t0
    step = next((s for s in STEPS if end / s <= CHART_WIDTH), STEPS[-1])
    columns = int(end / step) + 1

    def active(run, col):
        # A column shows a run if the run covers the column's middle: two
        # runs share a column only if they really ran at the same time.
        mid = t0 + (col + 0.5) * step
        return run.start <= mid < run.finish

    def row(start, finish, who, token, chart):
        print(f"{start:>8} {finish:>8}  {who:<10} {token:<11} {chart}".rstrip())

    row("start", "finish", "run", "token",
        "".join(f"{col * step:<10.1f}"[:10] for col in range(0, columns, 10))
        + f"  seconds, one column = {step * 1000:.0f} ms")
    row("", "", "", "",
        "".join("|" if col % 10 == 0 else " " for col in range(columns)))
    for r in runs:
        row(f"{r.start - t0:+.3f}s", f"{r.finish - t0:+.3f}s", r.who,
            "" if r.token is None else str(r.token),
            "".join("#" if active(r, col) else " " for col in range(columns)))
    row("", "", "", "running:",
        "".join(".123456789"[min(sum(active(r, col) for r in runs), 9)]
                for col in range(columns)))


def node_of(run):
    return run.who.split("/")[0]


def check_after_all(runs, load):
    loads = [r for r in runs if r.who.endswith("/" + load)]
    others = [r for r in runs if not r.who.endswith("/" + load)]
    if not loads or len(others) != 1:
        sys.exit(f"FAILED: {len(loads)} {load} runs and {len(others)} others, not one")
    last = max(r.finish for r in loads)
    print(f"{others[0].who} started {others[0].start - last:.3f} s after the "
          f"last {load} finished")
    if others[0].start < last:
        sys.exit(f"FAILED: {others[0].who} started before every {load} was done")
    print(f"OK: it ran only after every node's {load}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exclusive", action="store_true",
                        help="fail unless runs never overlap and tokens grow")
    parser.add_argument("--after-all", metavar="LOAD",
                        help="fail unless one other run starts after all LOAD runs")
    args = parser.parse_args()

    runs = read_runs(sys.stdin)
    if not runs:
        sys.exit("no runs recorded")
    print_timeline(runs)

    pairs = overlapping_pairs(runs)
    across = sum(node_of(a) != node_of(b) for a, b in pairs)
    print(f"\n{len(runs)} runs, {len(pairs)} overlapping pairs "
          f"({len(pairs) - across} on the same node, {across} across nodes)")
    if args.after_all:
        check_after_all(runs, args.after_all)
    if not args.exclusive:
        return

    tokens = [r.token for r in runs]
    increasing = (None not in tokens
                  and all(a < b for a, b in zip(tokens, tokens[1:])))
    print("fencing tokens strictly increase in start order: "
          + ("yes" if increasing else "NO"))
    if pairs or not increasing:
        sys.exit("FAILED: zklock let runs overlap or tokens go backwards")
    print("OK: no two runs overlapped")


if __name__ == "__main__":
    main()
