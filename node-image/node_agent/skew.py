"""An emulated wrong clock for the fault matrix (a node 5 min fast, another 5 min slow),
armed per node by a file and applied with a preload library.

Containers share the host's kernel clock, and Linux time namespaces do not cover
CLOCK_REALTIME, so an emulated node cannot have a wrong clock of its own. A library
preloaded into a process can shift what the C library's wall-clock calls return:
``tools/skewclock`` (``libskewclock.so``, in the node and experiment images) shifts
``clock_gettime(CLOCK_REALTIME)``, ``gettimeofday``, ``time`` and ``timespec_get`` by
``TESTBED_CLOCK_SKEW_S`` and leaves the monotonic clock, sleeps and timeouts alone.
(libfaketime, the usual tool, breaks Python 3.11's ``time.sleep`` or its threads in
Debian bookworm's 0.9.10: see tools/skewclock/skewclock.c.) So:

``<state_dir>/faults/clock-skew`` holds seconds (``300``, ``-300``). At start the agent
reads it and, when armed, starts itself again with the library preloaded, so
everything the agent stamps (heartbeats, state reports, meta/run.json's times,
modem/GPS/system samples) is on the skewed clock. It passes the same variables to
every experiment container it starts (:func:`experiment_env`), so results (iperf3's
start time, the abw tool's estimates, D-ITG's logs) are skewed as well, as on a real
node whose containers share its clock.

The kernel's own clock cannot be skewed: the node's tcpdump capture is stamped by the
kernel (the host's time, true). A skewed node's kernel would stamp it on its wrong
clock, and ingest moves the capture by the node's offset like everything the node
stamps; so the agent moves its capture's packet times by the skew when the capture ends
(:func:`skew_capture`, meta/capture.json says ``emulated_clock_skew_s``). The link
emulator stays on the true clock (the network's load does not follow the node's clock);
the emulated modem and GPS readers move its state's times onto the node's clock, as a
real modem reader stamps samples with the agent's clock. Not covered: file times, the
node's shell, statically linked programs, and experiment images without the library
(they run on the true clock; the dynamic loader says it cannot preload it, on the
experiment's stderr). The fault stays armed until the file is removed and the node
restarted (it is read at start only). Creating it needs root on the node, as every
fault file.
"""

from __future__ import annotations

import logging
import math
import os
import struct
import sys
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path

log = logging.getLogger(__name__)

CLOCK_SKEW = "clock-skew"
#: The library's variable: seconds the wall clock is off (positive: fast).
SKEW_ENV = "TESTBED_CLOCK_SKEW_S"
PRELOAD = "LD_PRELOAD"
#: Where the node and experiment images carry tools/skewclock.
LIBRARY = "/usr/local/lib/libskewclock.so"
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


def skew_env(skew_s: float, library: str = LIBRARY) -> dict[str, str]:
    """The variables that put a process on a clock ``skew_s`` seconds off."""
    return {SKEW_ENV: f"{skew_s:+g}", PRELOAD: library}


def emulated_skew_s(environ: Mapping[str, str]) -> float | None:
    """The skew a process runs under (as :func:`skew_env` sets it), or None on the
    real clock."""
    if SKEW_ENV not in environ or LIBRARY not in environ.get(PRELOAD, ""):
        return None
    try:
        return parse_skew(environ[SKEW_ENV])
    except SkewError:
        return None


def experiment_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The emulated skew an agent runs under (empty when it runs on the real clock), for
    the experiment containers it starts: they share the node's clock."""
    skew = emulated_skew_s(environ)
    return {} if skew is None else skew_env(skew)


def emulated_shift(environ: Mapping[str, str]) -> timedelta:
    """How far to move a time taken from a process on the true clock (the link
    emulator's state: the emulated modem and GPS) onto the node's emulated one."""
    return timedelta(seconds=emulated_skew_s(environ) or 0.0)


#: Classic pcap magic numbers (as read little-endian) and ticks per second of each.
_PCAP_MAGIC = {0xA1B2C3D4: 1_000_000, 0xA1B23C4D: 1_000_000_000}


def skew_capture(path: Path, skew_s: float) -> int:
    """Move every packet time of the classic pcap file at ``path`` by ``skew_s``, in
    place (8 bytes a packet written; a file of any size in constant memory); returns
    how many packets moved. A record cut short at the end (tcpdump killed) is left as
    it is. Raises ValueError for a file that is not classic pcap."""
    moved = 0
    with path.open("r+b") as f:
        header = f.read(24)
        if len(header) < 24:
            raise ValueError(f"{path.name}: shorter than a pcap header")
        for order in ("<", ">"):
            (magic,) = struct.unpack(order + "I", header[:4])
            if magic in _PCAP_MAGIC:
                ticks = _PCAP_MAGIC[magic]
                break
        else:
            raise ValueError(f"{path.name}: not a classic pcap file")
        record = struct.Struct(order + "IIII")
        shift = round(skew_s * ticks)
        while len(head := f.read(16)) == 16:
            sec, frac, incl, orig = record.unpack(head)
            sec, frac = divmod(sec * ticks + frac + shift, ticks)
            f.seek(-16, os.SEEK_CUR)
            f.write(record.pack(sec, frac, incl, orig))
            f.seek(incl, os.SEEK_CUR)
            moved += 1
    return moved


def skewed_environment(faults_dir: Path, environ: Mapping[str, str], *,
                       library_present: bool) -> dict[str, str] | None:
    """The environment to start the agent again in, when the fault is armed and the
    agent does not run under it yet; None otherwise. Raises :class:`SkewError` when it
    is armed but cannot be applied."""
    try:
        text = (faults_dir / CLOCK_SKEW).read_text()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise SkewError(f"cannot read {faults_dir / CLOCK_SKEW}: {e}") from e
    if SKEW_ENV in environ:
        return None  # already started under it
    skew = parse_skew(text)
    if not library_present:
        raise SkewError(f"{CLOCK_SKEW} is armed but {LIBRARY} is not in the image "
                        "(scripts/build-images.sh node builds it from tools/skewclock)")
    return {**environ, **skew_env(skew)}


def restart_skewed_if_armed(state_dir: Path) -> None:
    """Start the agent again on the emulated clock when the fault is armed (does not
    return then); a fault that cannot be applied is logged and the agent runs on."""
    try:
        env = skewed_environment(state_dir / "faults", os.environ,
                                 library_present=Path(LIBRARY).is_file())
    except SkewError as e:
        log.error("clock skew fault not applied: %s", e)
        return
    if env is None:
        return
    log.warning("fault armed: clock skew of %s s (%s); restarting on it",
                env[SKEW_ENV], LIBRARY)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "node_agent.main", *sys.argv[1:]], env)
