"""Submit the demo campaign node by node, as each node comes online (run by scripts/up
inside the orchestrator container, which has the YAML parser: ``python3 - CAMPAIGN
NODE...`` with this file on stdin and the admin token in TESTBED_TOKEN).

A campaign without nodes covers the nodes whose interfaces are registered when it is
submitted, so one campaign submitted when the first node is online would leave the
others out, and one submitted when every node is online makes the first result wait
for the slowest node. Instead each newly online group of nodes gets the campaign
restricted to it (each step's ``nodes``), at once. Prints one line per campaign,
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


def main() -> int:
    with open(sys.argv[1]) as f:
        spec = yaml.safe_load(f)
    wanted = set(sys.argv[2:])
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
        body = dict(spec, steps=[dict(step, nodes=ready) for step in spec["steps"]])
        out = call("POST", "/api/v1/campaigns", body)
        assert isinstance(out, dict)
        print(out["id"], ",".join(ready), *(r["id"] for r in out["runs"]), flush=True)
        covered.update(ready)
    missing = sorted(wanted - covered)
    if missing:
        print(f"not online within {LIMIT_S:.0f} s: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


sys.exit(main())
