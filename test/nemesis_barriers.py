"""The nemesis's checker of double barriers (issue 49): the members' calls
against what ZooKeeper committed, read from the servers' transaction logs
(test/zk/zktxnlog.py).  Pure functions; test/nemesis.py runs the members
and calls check(), whose self-test first shows that it finds each kind of
violation in a made-up history.

A call is a dict: member, name (the round's barrier), kind ("enter",
"leave" or "giveup"), t0, t1 (clock_timestamp() just before and after, in
s), result ("t", "f" or an error's SQLSTATE).  The txns are zktxnlog's
(zxid, time_ms, session, type, ops), their time the leader's wall clock
when it made the txn, before it committed it: on the same machine's clock
as t1, so a reply that depends on a txn comes after the txn's time.

Checked, with parties P:
* every ready was created after its creator counted at least P members
  (children other than ready; zklock's counted by backend, see members()):
  P of them existed together at some zxid between the creator's member
  node's and ready's (a member counted may go before ready is created: its
  enter timed out, or its session ended), so that
* no member returned from enter before P members existed with a czxid
  below that of the ready it passed on (the latest ready created at its
  path before it returned);
* no member returned from leave while a member that existed when that
  ready was created had not gone (deleted, or its session closed);
* once every node was up again after the heal (alive_at), no call waited
  longer than T plus SLACK_S, except in a round where a member's call
  failed or a member gave up (the others then wait out their time-outs, as
  they must); the final round, after the heal, must pass whole within it.
"""

SLACK_S = 1.0          # a round trip or two, and the members' scheduling
BACKEND_KEY = 13       # a zklock member's name begins with its backend's key


def members(names):
    """How many members the children (other than ready) are: zklock's by
    backend, whichever session created them (a backend that entered again
    while its lost session's node lingered is one member, not two)."""
    return len({n[:BACKEND_KEY] if len(n) == 36 else n for n in names})


def replay(txns, place):
    """Per barrier path under place: ready creations (zxid, time_ms,
    members alive, the most members alive at once since the creator's
    member node was created) and each member node's deletion time (ms, or
    None)."""
    bars = {}
    owned = {}                                   # session -> ephemeral paths
    gone = {}                                    # member path -> time_ms

    def split(path):
        if not path or not path.startswith(place):
            return None, None
        rest = path[len(place):].split("/")
        if len(rest) != 2:
            return None, None
        return place + rest[0], rest[1]

    for zxid, time_ms, session, kind, ops in txns:
        if kind == -11:                          # closeSession: its ephemerals go
            for path in owned.pop(session, ()):
                bar, child = split(path)
                if bar in bars and child in bars[bar]["alive"]:
                    del bars[bar]["alive"][child]
                    bars[bar]["counts"].append((zxid, members(bars[bar]["alive"])))
                    gone[path] = time_ms
            continue
        for op, path, ephemeral in ops:
            bar, child = split(path)
            if bar is None:
                continue
            b = bars.setdefault(bar, {"alive": {}, "readys": [], "counts": [], "entered": {}})
            if op == "create":
                if child == "ready":
                    since = b["entered"].get(session, zxid)
                    most = max([n for z, n in b["counts"] if z >= since]
                               + [members(b["alive"])])
                    b["readys"].append((zxid, time_ms, sorted(b["alive"]), most))
                else:
                    b["alive"][child] = zxid
                    b["counts"].append((zxid, members(b["alive"])))
                    b["entered"][session] = zxid
                    gone.setdefault(bar + "/" + child, None)
                    if ephemeral:
                        owned.setdefault(session, set()).add(path)
            elif op == "delete" and child != "ready" and child in b["alive"]:
                del b["alive"][child]
                b["counts"].append((zxid, members(b["alive"])))
                gone[path] = time_ms
                for paths in owned.values():
                    paths.discard(path)
    return bars, gone


def check(txns, calls, place, parties, T, alive_at, final_name):
    """(violations, facts): lists of strings."""
    violations, facts = [], []
    bars, gone = replay(txns, place)
    for bar, b in sorted(bars.items()):
        for zxid, time_ms, members, most in b["readys"]:
            if most < parties:
                violations.append("barrier %s: ready (zxid %#x) created with %d members "
                                  "(parties %d)" % (bar, zxid, most, parties))
    passed = {}                                  # (member, name) -> the ready it passed on
    for c in sorted(calls, key=lambda c: c["t1"]):
        bar = place + c["name"]
        readys = bars.get(bar, {"readys": []})["readys"]
        if c["kind"] == "enter" and c["result"] == "t":
            before = [r for r in readys if r[1] <= c["t1"] * 1000]
            if not before:
                violations.append("barrier %s: %s returned from enter at %.3f, before any "
                                  "ready was created" % (bar, c["member"], c["t1"]))
                continue
            passed[(c["member"], c["name"])] = before[-1]
            if before[-1][3] < parties:
                violations.append("barrier %s: %s returned from enter on a ready (zxid %#x) "
                                  "of %d members" % (bar, c["member"], before[-1][0],
                                                     before[-1][3]))
        elif c["kind"] == "leave" and c["result"] == "t":
            ready = passed.get((c["member"], c["name"]))
            if ready is None:
                continue                          # its enter found no ready: said above
            left = [m for m in ready[2]
                    if gone.get(bar + "/" + m) is None or gone[bar + "/" + m] > c["t1"] * 1000]
            if left:
                violations.append("barrier %s: %s returned from leave at %.3f while %d "
                                  "member(s) of its round had not left (%s)"
                                  % (bar, c["member"], c["t1"], len(left), ", ".join(left[:3])))
    troubled = {c["name"] for c in calls if c["result"] != "t"}
    checked = excused = 0
    for c in calls:
        if c["kind"] == "giveup" or c["t1"] <= alive_at:
            continue
        if c["name"] in troubled and c["name"] != final_name:
            excused += 1
            continue
        checked += 1
        waited = c["t1"] - max(c["t0"], alive_at)
        if waited > T + SLACK_S:
            violations.append("barrier %s: %s's %s waited %.1f s after every node was up "
                              "(more than T + %.0f s)" % (place + c["name"], c["member"],
                                                          c["kind"], waited, SLACK_S))
    final = [c for c in calls if c["name"] == final_name]
    if not final or any(c["result"] != "t" for c in final):
        violations.append("barrier %s: the final round after the heal did not pass: %s"
                          % (place + final_name, ", ".join("%s %s %s" % (c["member"], c["kind"],
                                                                         c["result"])
                                                           for c in final) or "no call"))
    facts.append("%d readys created; %d calls after every node was up checked against "
                 "T + %.0f s, %d excused (their round had a failed call)"
                 % (sum(len(b["readys"]) for b in bars.values()), checked, SLACK_S, excused))
    return violations, facts


def self_test():
    """The checker finds each violation in a made-up history, and none in
    a good one; raises AssertionError otherwise."""
    place, P, T = "/r/%barriers/", 2, 4.0

    def txn(z, ms, *ops, session=1, kind=1):
        return (z, ms, session, kind, [(op, place + p, eph) for op, p, eph in ops])

    def call(member, name, kind, t0, t1, result="t"):
        return dict(member=member, name=name, kind=kind, t0=t0, t1=t1, result=result)

    good_txns = [txn(1, 1000, ("create", "g/a", True)), txn(2, 1010, ("create", "g/b", True)),
                 txn(3, 1020, ("create", "g/ready", False)), txn(4, 1100, ("delete", "g/a", False)),
                 txn(5, 1110, ("delete", "g/b", False), session=2)]
    good_calls = [call("a", "g", "enter", 0.9, 1.03), call("b", "g", "enter", 1.0, 1.03),
                  call("a", "g", "leave", 1.05, 1.12), call("b", "g", "leave", 1.05, 1.12)]
    v, _ = check(good_txns, good_calls, place, P, T, 0.5, "g")
    assert not v, v
    cases = {
        "created with 1 members": (good_txns[:1] + good_txns[2:], good_calls),
        "before any ready": (good_txns, [call("a", "g", "enter", 0.9, 1.01)] + good_calls[1:]),
        "had not left": (good_txns, good_calls[:2] + [call("a", "g", "leave", 1.05, 1.105)]
                         + good_calls[3:]),
        "waited 5.2 s": (good_txns, good_calls[:3] + [call("b", "g", "leave", 1.05, 6.25)]),
        "did not pass": (good_txns, good_calls[:3] + [call("b", "g", "leave", 1.05, 1.12, "08006")]),
    }
    for want, (txns, calls) in cases.items():
        v, _ = check(txns, calls, place, P, T, 0.5, "g")
        assert any(want in s for s in v), "the checker missed '%s': %s" % (want, v)
    # A member counted, then gone before ready (its enter timed out).
    counted = [txn(1, 1000, ("create", "g/a", True)),
               txn(2, 1010, ("create", "g/b", True), session=2),
               txn(3, 1015, ("delete", "g/a", False)),
               txn(4, 1020, ("create", "g/ready", False), session=2)]
    v, _ = check(counted, [call("b", "g", "enter", 1.0, 1.03)], place, P, T, 0.5, "x")
    assert not any("ready" in s for s in v), v
    # ... but not when it went before the creator entered.
    early = [txn(1, 1000, ("create", "g/a", True)),
             txn(2, 1005, ("delete", "g/a", False)),
             txn(3, 1010, ("create", "g/b", True), session=2),
             txn(4, 1020, ("create", "g/ready", False), session=2)]
    v, _ = check(early, [call("b", "g", "enter", 1.0, 1.03)], place, P, T, 0.5, "x")
    assert any("created with 1 members" in s for s in v), v
    # One backend's nodes of two sessions are one member.
    key = "8f9a256e-a330-"
    twice = [txn(1, 1000, ("create", "g/" + key + "000a-0000-0000000000ce", True)),
             txn(2, 1010, ("create", "g/" + key + "000b-0000-0000000000cf", True), session=2),
             txn(3, 1020, ("create", "g/ready", False), session=2)]
    v, _ = check(twice, [], place, P, T, 0.5, "x")
    assert any("created with 1 members" in s for s in v), v
    # A session's close takes its members with it.
    late_leave = good_calls[:3] + [call("b", "g", "leave", 1.05, 1.105)]
    v, _ = check(good_txns[:3] + [(4, 1100, 1, -11, [])], late_leave, place, P, T, 0.5, "g")
    assert not any("had not left" in s for s in v), v
    v, _ = check(good_txns[:3], late_leave, place, P, T, 0.5, "g")
    assert any("had not left" in s for s in v), v
