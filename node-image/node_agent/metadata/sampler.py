"""The metadata sampler: reads every modem (and the GPS, and the node's own health)
every ``interval_s`` in its own thread, keeps the latest sample of each, and while a
run is recording appends every sample to the run's ``meta/modem.jsonl`` (and
``meta/gps.jsonl`` when a GPS source is configured, ``meta/system.jsonl``). A run's
recording starts and ends with a sample, so the files cover its span even when it is
shorter than the interval. The latest samples also ride on every heartbeat, so the
time-series store follows a node between runs too.
"""

from __future__ import annotations

import functools
import json
import logging
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from node_agent.config import AgentConfig
from node_agent.metadata.gps import GpsdReader, GpsReader, GpsSample, LinkemGpsReader
from node_agent.metadata.modem import (
    LinkemModemReader,
    MetadataError,
    MmcliModemReader,
    ModemReader,
    ModemSample,
)
from node_agent.metadata.system import SystemReader, SystemSample
from testbed_common.wire import LiveMetadata

log = logging.getLogger(__name__)

MODEM_FILE = "modem.jsonl"
GPS_FILE = "gps.jsonl"
SYSTEM_FILE = "system.jsonl"


class _RequiredLinkem(LinkemModemReader):
    """linkem chosen explicitly: a missing state file is an error worth a log line."""

    def read(self, interface: str) -> ModemSample | None:
        sample = super().read(interface)
        if sample is None:
            raise MetadataError(f"linkem state {self.path(interface)} does not exist")
        return sample


class AutoModemReader:
    """linkem's state when the file exists (the emulated fleet), else ModemManager; a
    node with neither says so (the error becomes the heartbeat's ``unavailable``)."""

    def __init__(self, linkem_state: str, mmcli_modem: str | None,
                 which: Callable[[str], str | None] = shutil.which) -> None:
        self.linkem = LinkemModemReader(linkem_state)
        self.mmcli = MmcliModemReader(modem=mmcli_modem)
        self.which = which

    def read(self, interface: str) -> ModemSample | None:
        sample = self.linkem.read(interface)
        if sample is not None:
            return sample
        if self.which("mmcli") is None:
            raise MetadataError(
                f"no modem metadata: no linkem state at {self.linkem.path(interface)} and "
                "ModemManager is not installed (no mmcli; the Ansible role modemmanager "
                "installs it)")
        sample = self.mmcli.read(interface)
        if sample is None:
            raise MetadataError(f"ModemManager lists no modem with net port {interface}")
        return sample


def readers_from_config(config: AgentConfig) -> dict[str, ModemReader]:
    """Each interface's modem reader: ``auto`` reads linkem's state when the file
    exists and asks ModemManager otherwise, ``linkem`` requires linkem's state,
    ``mmcli`` asks ModemManager, ``none`` reads nothing."""
    readers: dict[str, ModemReader] = {}
    for iface in config.interfaces:
        m = iface.metadata
        if m.source == "auto":
            readers[iface.name] = AutoModemReader(m.linkem_state, m.mmcli_modem)
        elif m.source == "linkem":
            readers[iface.name] = _RequiredLinkem(m.linkem_state)
        elif m.source == "mmcli":
            readers[iface.name] = MmcliModemReader(modem=m.mmcli_modem)
    return readers


def gps_from_config(config: AgentConfig) -> GpsReader | None:
    g = config.gps
    if g is None:
        return None
    if g.source == "linkem":
        return LinkemGpsReader(g.linkem_state)
    return GpsdReader(g.host, g.port, timeout_s=g.timeout_s)


class MetadataSampler:
    def __init__(self, modems: Mapping[str, ModemReader], gps: GpsReader | None = None, *,
                 system: SystemReader | None = None, interval_s: float = 5.0) -> None:
        self.modems = dict(modems)
        self.gps = gps
        self.system = system
        self._latest_system: SystemSample | None = None
        self.interval_s = interval_s
        self._lock = threading.Lock()  # latest values and the recording directory
        self._latest_modem: dict[str, ModemSample] = {}
        self._latest_gps: GpsSample | None = None
        self._record_dir: Path | None = None
        self._errors: dict[str, str] = {}  # last error per source, logged once
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- latest values -----------------------------------------------------------------------

    def latest_modems(self) -> dict[str, ModemSample]:
        with self._lock:
            return dict(self._latest_modem)

    def latest_gps(self) -> GpsSample | None:
        with self._lock:
            return self._latest_gps

    def latest_system(self) -> SystemSample | None:
        with self._lock:
            return self._latest_system

    def unavailable(self) -> dict[str, str]:
        """Each source whose last read failed, and why."""
        with self._lock:
            return dict(self._errors)

    def detected_models(self) -> dict[str, str]:
        """Each interface's modem as its source names it ("Quectel EM12-G")."""
        return {name: " ".join(p for p in (s.manufacturer, s.model) if p)[:64]
                for name, s in self.latest_modems().items() if s.model}

    def undelivered(self, sent: Mapping[str, str]) -> tuple[LiveMetadata | None, dict[str, str]]:
        """The latest samples not yet delivered by a heartbeat (heartbeats come more
        often than samples: the same sample is sent once), for the time-series store
        between runs, with the sources that cannot be read (sent every time, so the
        orchestrator shows what holds now); and the marks (source -> sample time) to
        add to ``sent`` once delivered. ``sent``: the marks of what heartbeats
        delivered."""
        latest: dict[str, dict[str, Any]] = {
            f"modem {name}": s.to_json() for name, s in sorted(self.latest_modems().items())}
        for key, sample in (("gps", self.latest_gps()), ("system", self.latest_system())):
            if sample is not None:
                latest[key] = sample.to_json()
        new = {k: doc for k, doc in latest.items() if sent.get(k) != doc["time"]}
        unavailable = {k[:32]: v[:2000] for k, v in self.unavailable().items()}
        if not new and not unavailable:
            return None, {}
        meta = LiveMetadata(modems=[doc for k, doc in new.items() if k.startswith("modem ")],
                            gps=new.get("gps"), system=new.get("system"),
                            unavailable=unavailable)
        return meta, {k: str(doc["time"]) for k, doc in new.items()}

    # -- sampling ----------------------------------------------------------------------------

    def sample_once(self) -> None:
        """Read every source once; errors are logged (once until they change)."""
        for name, reader in self.modems.items():
            self._sample(f"modem {name}", functools.partial(reader.read, name), MODEM_FILE,
                         functools.partial(self._latest_modem.__setitem__, name))
        if self.gps is not None:
            self._sample("gps", self.gps.read, GPS_FILE,
                         functools.partial(setattr, self, "_latest_gps"))
        if self.system is not None:
            self._sample("system", self.system.read, SYSTEM_FILE,
                         functools.partial(setattr, self, "_latest_system"))

    def _sample(self, what: str, read: Callable[[], Any], file: str,
                keep: Callable[[Any], None]) -> None:
        """One source read once: the sample becomes the latest and, while a run
        records, a line of its file."""
        value = self._read(what, read)
        if value is not None:
            with self._lock:
                keep(value)
                self._append(file, value.to_json())

    def _read(self, what: str, read: Callable[[], Any]) -> Any:
        try:
            value = read()
        except MetadataError as e:
            with self._lock:
                changed = self._errors.get(what) != str(e)
                self._errors[what] = str(e)
            if changed:
                log.warning("%s: %s", what, e)
            return None
        except Exception as e:  # a bug in a reader must not stop the sampler
            log.exception("%s: unexpected error while reading", what)
            with self._lock:
                self._errors[what] = f"unexpected error in the reader: {e!r}"
            return None
        with self._lock:
            cleared = self._errors.pop(what, None) is not None
        if cleared:
            log.info("%s: readable again", what)
        return value

    def _append(self, name: str, doc: dict[str, Any]) -> None:
        if self._record_dir is None:
            return
        try:
            self._record_dir.mkdir(parents=True, exist_ok=True)
            with (self._record_dir / name).open("a") as f:
                f.write(json.dumps(doc, separators=(",", ":")) + "\n")
        except OSError as e:
            log.warning("cannot record metadata into %s: %s", self._record_dir, e)

    # -- runs --------------------------------------------------------------------------------

    @contextmanager
    def recording(self, run_dir: Path) -> Iterator[None]:
        """Record every sample into ``run_dir/meta/`` while the block runs."""
        with self._lock:
            self._record_dir = run_dir / "meta"
        self.sample_once()
        try:
            yield
        finally:
            self.sample_once()
            with self._lock:
                self._record_dir = None

    # -- thread ------------------------------------------------------------------------------

    def run_forever(self, wait: Callable[[float], bool] | None = None) -> None:
        """Sample now and then every interval until ``wait`` returns True (stop)."""
        wait = wait or self._stop.wait
        while True:
            self.sample_once()
            if wait(self.interval_s):
                return

    def start(self) -> None:
        if not self.modems and self.gps is None and self.system is None:
            return
        self._thread = threading.Thread(target=self.run_forever, name="metadata", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
