"""Modem metadata: one :class:`ModemSample` per interface, from a :class:`ModemReader`.

Two readers: :class:`LinkemModemReader` reads the emulated modem's link state that
tools/linkem publishes (``/run/linkem/<interface>.json``), so the metadata follows the
emulated link (a handover is a change of ``cell_id``); :class:`MmcliModemReader` asks
ModemManager through ``mmcli -J``. Parsing is pure (``parse_*``); I/O is at the edges.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from node_agent.skew import emulated_shift

DEFAULT_LINKEM_PATH = "/run/linkem/{interface}.json"


class MetadataError(Exception):
    """A metadata source could not be read or understood (the message says which)."""


@dataclass(frozen=True)
class ModemSample:
    time: datetime
    interface: str
    mcc_mnc: str | None = None  # "240-01"
    operator: str | None = None
    rat: str | None = None  # "LTE", "NR", "UMTS", ...
    rssi: float | None = None  # dBm
    rsrp: float | None = None  # dBm
    rsrq: float | None = None  # dB
    sinr: float | None = None  # dB
    cell_id: int | None = None
    band: str | None = None
    iccid: str | None = None
    lac: str | None = None  # LAC or TAC as the modem reports it (hex)
    in_outage: bool | None = None
    handovers: int | None = None
    #: The modem hardware ("Quectel EM12-G"), when the source tells.
    manufacturer: str | None = None
    model: str | None = None
    #: ModemManager's 0-100 signal quality (the only figure every modem gives).
    signal_pct: float | None = None
    #: A digest of the IMEI: follows one modem across SIM swaps and reboots without
    #: publishing its IMEI (an identifier of the device and so of whoever carries it).
    modem_id: str | None = None
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["time"] = self.time.isoformat()
        return doc


class ModemReader(Protocol):
    def read(self, interface: str) -> ModemSample | None:
        """The modem's state behind ``interface`` now; None when there is no modem.

        Raises :class:`MetadataError` when the source exists but cannot be read."""
        ...


def _float(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None  # "--", "" and other "unknown" markers


# -- linkem ------------------------------------------------------------------------------


def parse_linkem_state(doc: Mapping[str, Any], interface: str) -> ModemSample:
    """linkem's state document (format_version 1) as a sample (pure)."""
    if doc.get("format_version") != 1:
        raise MetadataError(f"linkem state for {interface}: unsupported format_version "
                            f"{doc.get('format_version')!r}")
    ms = doc.get("time_unix_ms")
    if not isinstance(ms, int | float):
        raise MetadataError(f"linkem state for {interface}: no time_unix_ms")
    operator = doc.get("operator") or {}
    signal = doc.get("signal") or {}
    cell = doc.get("cell_id")
    return ModemSample(
        time=datetime.fromtimestamp(ms / 1000, UTC),
        interface=interface,
        mcc_mnc=operator.get("mcc_mnc"),
        operator=operator.get("name"),
        rat=doc.get("rat"),
        rssi=_float(signal.get("rssi_dbm")),
        rsrp=_float(signal.get("rsrp_dbm")),
        rsrq=_float(signal.get("rsrq_db")),
        sinr=_float(signal.get("sinr_db")),
        cell_id=int(cell) if isinstance(cell, int) else None,
        band=str(doc["band"]) if doc.get("band") is not None else None,
        in_outage=bool(doc["in_outage"]) if "in_outage" in doc else None,
        handovers=int(doc["handovers"]) if isinstance(doc.get("handovers"), int) else None,
        source="linkem",
    )


class LinkemModemReader:
    """The emulated modem: linkem's state file for the interface (replaced atomically)."""

    def __init__(self, path_pattern: str = DEFAULT_LINKEM_PATH) -> None:
        self.path_pattern = path_pattern
        #: linkem runs on the true clock: its times onto an emulated wrong one.
        self._skew = emulated_shift(os.environ)

    def path(self, interface: str) -> Path:
        return Path(self.path_pattern.format(interface=interface))

    def read(self, interface: str) -> ModemSample | None:
        path = self.path(interface)
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise MetadataError(f"cannot read linkem state {path}: {e}") from e
        if not isinstance(doc, dict):
            raise MetadataError(f"linkem state {path} is not a JSON object")
        sample = parse_linkem_state(doc, interface)
        return replace(sample, time=sample.time + self._skew) if self._skew else sample


# -- ModemManager (mmcli -J) ---------------------------------------------------------------

#: ModemManager's access technologies, best first, and the RAT name we report.
_RATS: tuple[tuple[str, str], ...] = (
    ("5gnr", "NR"), ("lte", "LTE"), ("hspa-plus", "HSPA+"), ("hspa", "HSPA"),
    ("hsupa", "HSPA"), ("hsdpa", "HSPA"), ("umts", "UMTS"), ("edge", "EDGE"),
    ("gprs", "GPRS"), ("gsm", "GSM"),
)


def modem_paths(modem_list: Mapping[str, Any]) -> list[str]:
    """``mmcli -L -J``: the modems' D-Bus paths (pure)."""
    paths = modem_list.get("modem-list")
    if not isinstance(paths, list):
        raise MetadataError("mmcli -L -J: no modem-list")
    return [str(p) for p in paths]


def net_ports(modem: Mapping[str, Any]) -> list[str]:
    """``mmcli -m N -J``: the modem's network interfaces ("wwan0 (net)" -> "wwan0")."""
    ports = (modem.get("modem") or {}).get("generic", {}).get("ports") or []
    out = []
    for p in ports:
        name, _, kind = str(p).partition(" ")
        if kind.strip("()") == "net":
            out.append(name)
    return out


def _text(value: Any) -> str | None:
    text = str(value).strip() if value is not None else ""
    return text if text and text != "--" else None


def _mcc_mnc(code: Any) -> str | None:
    code = str(code or "").strip()
    if len(code) not in (5, 6) or not code.isdigit() or code.startswith("000"):
        return None  # MCC 000 is no country: a placeholder (a scrubbed capture)
    return f"{code[:3]}-{code[3:]}"


def _rat(techs: Any) -> str | None:
    if isinstance(techs, str):
        techs = [t.strip() for t in techs.split(",")]
    found = {str(t).lower() for t in techs or []}
    return next((name for key, name in _RATS if key in found), None)


def _hex_int(value: Any) -> int | None:
    text = str(value or "").strip()
    if not text or text == "--":
        return None
    try:
        return int(text, 16)
    except ValueError:
        return None


def modem_id(*imeis: Any) -> str | None:
    """The IMEI's published form: the first 16 hex digits of its SHA-256 (pure), from
    the first of ``imeis`` that is one (``3gpp.imei``, else the equipment identifier;
    unknown values and placeholders of zeros are skipped). An IMEI has only ~10^14
    values, so this hides it from a reader of the data, not from a determined search;
    the raw IMEI is never kept or sent."""
    for imei in imeis:
        text = _text(imei)
        if text is not None and text.isdigit() and set(text) != {"0"}:
            return hashlib.sha256(f"testbed-imei:{text}".encode()).hexdigest()[:16]
    return None


def parse_mmcli(
    interface: str,
    *,
    modem: Mapping[str, Any],
    signal: Mapping[str, Any] | None = None,
    location: Mapping[str, Any] | None = None,
    sim: Mapping[str, Any] | None = None,
    time: datetime,
) -> ModemSample:
    """A sample from ``mmcli -m N -J``, ``--signal-get -J``, ``--location-get -J`` and
    ``mmcli -i N -J`` documents (pure; missing or "--" values become None).

    The band stays None: ``mmcli -J`` gives the bands the modem may use
    (``current-bands``), not the one it is on. The IMEI becomes :func:`modem_id`."""
    m = modem.get("modem") or {}
    gpp = m.get("3gpp") or {}
    generic = m.get("generic") or {}
    rat = _rat(generic.get("access-technologies"))
    sig = (signal or {}).get("modem", {}).get("signal") or {}
    rssi = rsrp = rsrq = sinr = None
    if rat == "NR" and isinstance(sig.get("5g"), dict):
        nr = sig["5g"]
        rsrp, rsrq, sinr = _float(nr.get("rsrp")), _float(nr.get("rsrq")), _float(nr.get("snr"))
    lte = sig.get("lte") or {}
    if rsrp is None and lte:
        rssi, rsrp = _float(lte.get("rssi")), _float(lte.get("rsrp"))
        rsrq, sinr = _float(lte.get("rsrq")), _float(lte.get("snr"))
    if rssi is None:
        for tech in ("umts", "gsm"):
            rssi = _float((sig.get(tech) or {}).get("rssi"))
            if rssi is not None:
                break
    loc = ((location or {}).get("modem", {}).get("location") or {}).get("3gpp") or {}
    lac = next((str(loc[k]) for k in ("tac", "lac") if _hex_int(loc.get(k))), None)
    sim_props = ((sim or {}).get("sim") or {}).get("properties") or {}
    return ModemSample(
        time=time,
        interface=interface,
        mcc_mnc=_mcc_mnc(gpp.get("operator-code")),
        operator=_text(gpp.get("operator-name")),
        rat=rat,
        rssi=rssi, rsrp=rsrp, rsrq=rsrq, sinr=sinr,
        cell_id=_hex_int(loc.get("cid")),
        iccid=_text(sim_props.get("iccid")),
        lac=lac,
        manufacturer=_text(generic.get("manufacturer")),
        model=_text(generic.get("model")),
        signal_pct=_float((generic.get("signal-quality") or {}).get("value")),
        modem_id=modem_id(gpp.get("imei"), generic.get("equipment-identifier")),
        source="mmcli",
    )


Mmcli = Callable[[Sequence[str]], Mapping[str, Any]]


def run_mmcli(args: Sequence[str], *, timeout_s: float = 10.0) -> Mapping[str, Any]:
    """Run ``mmcli ARGS -J`` and parse its JSON."""
    cmd = ["mmcli", *args, "-J"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except FileNotFoundError as e:
        raise MetadataError("mmcli is not installed (ModemManager's client)") from e
    except subprocess.TimeoutExpired as e:
        raise MetadataError(f"{' '.join(cmd)} did not answer in {timeout_s:.0f} s") from e
    if done.returncode != 0:
        raise MetadataError(f"{' '.join(cmd)} failed: {done.stderr.strip()[:300]}")
    try:
        doc = json.loads(done.stdout)
    except ValueError as e:
        raise MetadataError(f"{' '.join(cmd)} did not print JSON: {e}") from e
    if not isinstance(doc, dict):
        raise MetadataError(f"{' '.join(cmd)} did not print a JSON object")
    return doc


class MmcliModemReader:
    """A real modem through ModemManager; the modem is the one whose net port is the
    interface, or the configured modem index/path."""

    def __init__(self, *, modem: str | None = None, mmcli: Mmcli = run_mmcli,
                 clock: Callable[[], datetime] | None = None,
                 signal_refresh_s: int = 5) -> None:
        self.modem = modem
        self.mmcli = mmcli
        self.clock = clock or (lambda: datetime.now(UTC))
        self.signal_refresh_s = signal_refresh_s
        self._signal_setup: set[str] = set()

    def _find(self, interface: str) -> tuple[str, Mapping[str, Any]] | None:
        if self.modem is not None:
            return self.modem, self.mmcli(["-m", self.modem])
        for path in modem_paths(self.mmcli(["-L"])):
            doc = self.mmcli(["-m", path])
            if interface in net_ports(doc):
                return path, doc
        return None

    def read(self, interface: str) -> ModemSample | None:
        found = self._find(interface)
        if found is None:
            return None
        ref, modem = found
        if ref not in self._signal_setup:  # --signal-get is empty until a refresh rate is set
            # Older ModemManager or no support: the signal stays unknown.
            with contextlib.suppress(MetadataError):
                self.mmcli(["-m", ref, f"--signal-setup={self.signal_refresh_s}"])
            self._signal_setup.add(ref)
        signal = self._optional(["-m", ref, "--signal-get"])
        location = self._optional(["-m", ref, "--location-get"])
        sim_path = (modem.get("modem") or {}).get("generic", {}).get("sim")
        sim = self._optional(["-i", str(sim_path)]) if sim_path and sim_path != "--" else None
        return parse_mmcli(interface, modem=modem, signal=signal, location=location, sim=sim,
                           time=self.clock())

    def _optional(self, args: Sequence[str]) -> Mapping[str, Any] | None:
        try:
            return self.mmcli(args)
        except MetadataError:
            return None
