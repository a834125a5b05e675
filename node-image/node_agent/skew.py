"""An emulated wrong clock for the fault matrix (a node 5 min fast, another 5 min slow),
armed per node by a file and applied with libfaketime.

Containers share the host's kernel clock, and Linux time namespaces do not cover
CLOCK_REALTIME, so an emulated node cannot have a wrong clock of its own. libfaketime
(Debian's ``libfaketime``), preloaded into a process, shifts what the C library's time
calls return: ``clock_gettime(CLOCK_REALTIME)``, ``gettimeofday``, ``time``. So:

``<state_dir>/faults/clock-skew`` holds seconds (``300``, ``-300``). At start the agent
reads it and, when armed, starts itself again with libfaketime preloaded
(``FAKETIME=+300``), so everything the agent stamps (heartbeats, state reports,
meta/run.json's times, modem/GPS/system samples) is on the skewed clock. It passes the
same variables to every experiment container it starts (:func:`experiment_env`; the
experiment images carry libfaketime), so results (iperf3's start time, the abw tool's
estimates, D-ITG's logs) are skewed as well, as on a real node whose containers share
its clock. The monotonic clock is left alone (``FAKETIME_DONT_FAKE_MONOTONIC=1``): a
wrong wall clock does not change how time passes, and timeouts keep working.

Not covered: the kernel's own timestamps. The node's tcpdump capture stamps packets
with the kernel's time (the host's, true), and file times are the kernel's; the link
emulator and the node's shell run unskewed. The fault stays armed until the file is
removed and the node restarted (it is read at start only). Creating it needs root on
the node, as every fault file.
"""

from __future__ import annotations

import glob
import logging
import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger(__name__)

CLOCK_SKEW = "clock-skew"
#: libfaketime's variables: the offset, and the clocks it leaves alone.
FAKETIME = "FAKETIME"
DONT_FAKE_MONOTONIC = "FAKETIME_DONT_FAKE_MONOTONIC"
PRELOAD = "LD_PRELOAD"
#: Where Debian's libfaketime installs the library (multiarch), in every testbed image.
LIBRARY_GLOB = "/usr/lib/*/faketime/libfaketime.so.1"
#: Largest skew accepted, seconds: a day is far past any fault the matrix emulates.
MAX_SKEW_S = 86_400.0


class SkewError(ValueError):
    """The fault file does not say a skew the agent can apply."""


def parse_skew(text: str) -> float:
    """Seconds of skew in the fault file (positive: the node's clock is fast)."""
    try:
        skew = float(text.strip())
    except ValueError as e:
        raise SkewError(f"{CLOCK_SKEW}: {text.strip()[:40]!r} is not a number of seconds "
                        "(write e.g. 300 or -300)") from e
    if not math.isfinite(skew) or abs(skew) > MAX_SKEW_S:
        raise SkewError(f"{CLOCK_SKEW}: {skew} s is outside +-{MAX_SKEW_S:.0f} s")
    return skew


def faketime_env(skew_s: float, library: str) -> dict[str, str]:
    """The variables that put a process on a clock ``skew_s`` seconds off."""
    return {FAKETIME: f"{skew_s:+g}", DONT_FAKE_MONOTONIC: "1", PRELOAD: library}


def experiment_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The emulated skew an agent runs under (empty when it runs on the real clock), for
    the experiment containers it starts: they share the node's clock."""
    if FAKETIME not in environ or PRELOAD not in environ:
        return {}
    return {k: environ[k] for k in (FAKETIME, DONT_FAKE_MONOTONIC, PRELOAD) if k in environ}


def skewed_environment(faults_dir: Path, environ: Mapping[str, str],
                       libraries: list[str]) -> dict[str, str] | None:
    """The environment to start the agent again in, when the fault is armed and the
    agent does not run under it yet; None otherwise. Raises :class:`SkewError` when it
    is armed but cannot be applied."""
    try:
        text = (faults_dir / CLOCK_SKEW).read_text()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise SkewError(f"cannot read {faults_dir / CLOCK_SKEW}: {e}") from e
    if FAKETIME in environ:
        return None  # already started under it
    skew = parse_skew(text)
    if not libraries:
        raise SkewError(f"{CLOCK_SKEW} is armed but libfaketime is not installed "
                        f"({LIBRARY_GLOB}; Debian package libfaketime)")
    return {**environ, **faketime_env(skew, sorted(libraries)[0])}


def restart_skewed_if_armed(state_dir: Path) -> None:
    """Start the agent again on the emulated clock when the fault is armed (does not
    return then); a fault that cannot be applied is logged and the agent runs on."""
    try:
        env = skewed_environment(state_dir / "faults", os.environ, glob.glob(LIBRARY_GLOB))
    except SkewError as e:
        log.error("clock skew fault not applied: %s", e)
        return
    if env is None:
        return
    log.warning("fault armed: clock skew of %s s (libfaketime); restarting on it",
                env[FAKETIME])
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "node_agent.main", *sys.argv[1:]], env)
