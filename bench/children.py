"""One fleet size per child process, for the benches that compare sizes.

A fresh interpreter per size keeps each size's figures its own: peak memory
(``ru_maxrss`` is the whole process's, never lowered), caches, and the garbage of the
size before. The bench script runs itself with ``--child N`` for each size and reads the
child's last output line, one JSON object of figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

SIZES = (1000, 3000, 10000)

Figures = dict[str, Any]


def per_size(doc: str, script: str, one: Callable[[int], Figures],
             *, add_arguments: Callable[[argparse.ArgumentParser], None] | None = None
             ) -> tuple[list[Figures], argparse.Namespace] | None:
    """Parse the bench's command line; in a child, measure one size, print its figures
    and return None; in the parent, run a child per ``--nodes`` (1k, 3k and 10k by
    default) and return their figures and the parsed arguments. Arguments the bench
    adds with ``add_arguments`` are passed on to its children."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--nodes", type=int, action="append",
                    help="fleet size (repeat for several; default 1000, 3000, 10000)")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    if add_arguments is not None:
        add_arguments(ap)
    args, _ = ap.parse_known_args()
    if args.child:
        print(json.dumps(one(args.child)), flush=True)
        return None
    passed = _without(sys.argv[1:], "--nodes")
    rows = []
    for n in args.nodes or SIZES:
        out = subprocess.run([sys.executable, script, *passed, "--child", str(n)],
                             check=True, stdout=subprocess.PIPE, text=True).stdout
        rows.append(json.loads(out.splitlines()[-1]))
        print(f"# {n} nodes: {out.splitlines()[-1]}", file=sys.stderr, flush=True)
    return rows, args


def _without(argv: list[str], flag: str) -> list[str]:
    """``argv`` without ``flag VALUE`` and ``flag=VALUE``."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a == flag:
            skip = True
        elif not a.startswith(flag + "="):
            out.append(a)
    return out
