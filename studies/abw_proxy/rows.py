"""The points a proxy-mode campaign's TAT proxy learns from, read from InfluxDB.

One query per measurement (``tat_summary``, ``abw``, ``modem``) for one campaign, plain
InfluxQL over the v1 API (docs/timeseries.md), turned into the rows of
:mod:`orchestrator.analysis.proxy_data`. The planner reads them for its decisions and
the ``abw-proxy`` page for its figures, so both see the same history.
"""

from __future__ import annotations

from typing import Any

from orchestrator.analysis.proxy_data import AbwPoint, ModemPoint, SimId, TatPoint
from orchestrator.study import MODEM, TimeSeriesQuery, literal
from studies.abw_tat.points import ABW
from studies.tat.points import TAT_SUMMARY


def _select(measurement: str, fields: tuple[str, ...], campaign: str) -> str:
    cols = ", ".join(f'"{c}"' for c in (*fields, "node", "operator", "operator_name", "run"))
    return f'SELECT {cols} FROM "{measurement}" WHERE "campaign" = {literal(campaign)}'


def _sim(row: dict[str, Any]) -> SimId:
    return SimId(str(row.get("node") or ""), str(row.get("operator") or ""),
                 str(row.get("operator_name") or ""))


def _f(row: dict[str, Any], key: str) -> float | None:
    v = row.get(key)
    return None if v is None else float(v)


def campaign_points(ts: TimeSeriesQuery, campaign: str
                    ) -> tuple[list[TatPoint], list[AbwPoint], list[ModemPoint]]:
    """Every TAT transfer, ABw estimate and modem sample of ``campaign``."""
    rows = [r for s in ts.query(_select(TAT_SUMMARY, ("mean_bps", "sender_bytes", "bytes"),
                                        campaign)) for r in s.rows()]
    tats = [TatPoint(int(r["time"]), _sim(r), str(r.get("run") or ""), float(r["mean_bps"]),
                     int(r.get("sender_bytes") or r.get("bytes") or 0))
            for r in rows if r.get("mean_bps") is not None]
    rows = [r for s in ts.query(_select(ABW, ("estimate_bps", "bytes", "rtt_s", "step"),
                                        campaign)) for r in s.rows()]
    abws = [AbwPoint(int(r["time"]), _sim(r), str(r.get("run") or ""),
                     int(r["step"]) if r.get("step") is not None else -1,
                     float(r["estimate_bps"]), int(r.get("bytes") or 0), _f(r, "rtt_s"))
            for r in rows if r.get("estimate_bps") is not None]
    rows = [r for s in ts.query(_select(MODEM, ("rsrp", "sinr", "band"), campaign))
            for r in s.rows()]
    modems = [ModemPoint(_sim(r), str(r.get("run") or ""), _f(r, "rsrp"), _f(r, "sinr"),
                         str(r["band"]) if r.get("band") is not None else None)
              for r in rows]
    return tats, abws, modems
