"""The agent's records in a raw release, made fit to publish field by field.

A raw release carries each run's ``meta/`` records as text with every address
anonymised (:meth:`.anonymise.Anonymiser.text`). Two of them hold more than addresses,
and an address rewrite does not see it:

- ``meta/modem.jsonl``: the SIM's serial (``iccid``), which names one subscription and
  so its holder, and ``modem_id``, the agent's unkeyed digest of the modem's IMEI (a
  few million candidates per modem model: undone by trying them). Both become keyed
  digests (:meth:`.anonymise.Anonymiser.identifier`), so a SIM or modem swap still
  shows within a release.
- ``meta/gps.jsonl``: positions, snapped to the release's grid as the ``positions``
  table is (:func:`.anonymise.coarsen`).

The agent records no IMSI or MSISDN (node_agent/metadata/modem.py); if a record carries
one under those names it is digested too. A line that is not a JSON object is left out:
what it holds cannot be checked. Pure: text in, text and notes out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from orchestrator.dataset.anonymise import Anonymiser, coarsen

MODEM_RECORDS = "meta/modem.jsonl"
GPS_RECORDS = "meta/gps.jsonl"

#: Fields of a modem record that identify a subscription or a device -> the digest's
#: kind. ``modem_id`` is already a digest, but an unkeyed one.
IDENTIFIERS = {"iccid": "iccid", "imsi": "imsi", "msisdn": "msisdn", "imei": "modem",
               "modem_id": "modem"}


@dataclass
class Published:
    text: str
    notes: list[str] = field(default_factory=list)


def _modem(record: dict[str, Any], anon: Anonymiser, _grid: float) -> dict[str, Any]:
    for name, kind in IDENTIFIERS.items():
        value = record.get(name)
        if value is not None and value != "":
            record[name] = anon.identifier(kind, str(value))
    return record


def _gps(record: dict[str, Any], _anon: Anonymiser, grid_deg: float) -> dict[str, Any]:
    lat, lon = record.get("lat"), record.get("lon")
    if isinstance(lat, int | float) and isinstance(lon, int | float):
        record["lat"], record["lon"] = coarsen(float(lat), float(lon), grid_deg)
    elif lat is not None or lon is not None:  # a position that cannot be coarsened
        record["lat"] = record["lon"] = None
    return record


_REWRITE = {MODEM_RECORDS: _modem, GPS_RECORDS: _gps}


def publish_records(name: str, text: str, anon: Anonymiser, grid_deg: float) -> Published:
    """``name``'s text with identifiers digested and positions coarsened; other files
    as they are."""
    rewrite = _REWRITE.get(name)
    if rewrite is None:
        return Published(text)
    lines, dropped = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            dropped += 1
            continue
        lines.append(json.dumps(rewrite(record, anon, grid_deg), separators=(", ", ": ")))
    notes = [f"{name}: {dropped} line(s) not a JSON object; left out"] if dropped else []
    return Published("".join(line + "\n" for line in lines), notes)
