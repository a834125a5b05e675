"""Submit the demo campaign node by node, as each node comes online (run by scripts/up
inside the orchestrator container, which has the YAML parser: ``python3 - CAMPAIGN
NODE[:IFACE,IFACE...]...`` with this file on stdin and the admin token in TESTBED_TOKEN;
a node given with interfaces gets the campaign on those SIMs only).

A campaign without nodes covers the nodes whose interfaces are registered when it is
submitted, so one campaign submitted when the first node is online would leave the
others out, and one submitted when every node is online makes the first result wait
for the slowest node. Instead each newly online group of nodes gets the campaign
restricted to it (each step's ``nodes``), at once; a node given with interfaces
gets a campaign of its own (each step's ``interfaces`` too: a campaign selects its
SIMs once, for all its nodes). Prints one line per campaign,
``ID NODE,NODE RUN RUN...``; exits 1 if some node was not online within 90 s (the
campaigns submitted so far go on)."""

import json
import os
import sys
import time
import urllib.request

import yaml

URL = "http://127.0.0.1:8080"
LIMIT_S = 90.0


def call(method: str, path: str, body: object = None) -> object:
    req = urllib.request.Request(
        URL + path, method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + os.environ["TESTBED_TOKEN"],
                 "Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=30))


def bodies(spec: dict[str, object], ready: list[str],
           only: dict[str, list[str]]) -> list[tuple[list[str], dict[str, object]]]:
    """The campaigns for newly ``ready`` nodes: one for those on every SIM, one for each
    node named in ``only`` on its SIMs alone; each with the nodes it covers."""
    steps = spec["steps"]
    assert isinstance(steps, list)
    free = [n for n in ready if n not in only]
    out = [(free, dict(spec, steps=[dict(step, nodes=free) for step in steps]))] if free else []
    return out + [([n], dict(spec, steps=[dict(step, nodes=[n], interfaces=only[n])
                                          for step in steps]))
                  for n in ready if n in only]


def main() -> int:
    with open(sys.argv[1]) as f:
        spec = yaml.safe_load(f)
    only = {node: ifaces.split(",") for node, _, ifaces in
            (arg.partition(":") for arg in sys.argv[2:]) if ifaces}
    wanted = {arg.partition(":")[0] for arg in sys.argv[2:]}
    covered: set[str] = set()
    end = time.monotonic() + LIMIT_S
    while covered != wanted and time.monotonic() < end:
        nodes = call("GET", "/api/v1/nodes")
        assert isinstance(nodes, list)
        ready = sorted({n["id"] for n in nodes if n["health"] == "online" and n["interfaces"]}
                       & wanted - covered)
        if not ready:
            time.sleep(0.5)
            continue
        for nodes, body in bodies(spec, ready, only):
            out = call("POST", "/api/v1/campaigns", body)
            assert isinstance(out, dict)
            print(out["id"], ",".join(nodes), *(r["id"] for r in out["runs"]), flush=True)
        covered.update(ready)
    missing = sorted(wanted - covered)
    if missing:
        print(f"not online within {LIMIT_S:.0f} s: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
