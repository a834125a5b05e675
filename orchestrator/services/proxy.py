"""Proxy mode's decisions against the stores: per SIM of a proxy-mode campaign, does
its next window need a TAT (:func:`orchestrator.analysis.proxy.tat_needed`)?

The planner is pure and reads the answers from its snapshot (``Snapshot.proxy``); they
are made here at each planning pass, from the campaign's own points in InfluxDB (the
same ones the ``abw-proxy`` page reads). Without a time-series store, or while it does
not answer, there is no answer: every window books its TAT. That costs bytes, never
calibration. The planner's lock is held meanwhile, so each query is tried once (a store
that hangs costs the pass one request timeout, 10 s by default), and the first failure
ends the pass's reading.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from orchestrator.analysis.proxy import Policy, Verdict, fit, tat_needed
from orchestrator.analysis.proxy_data import SimHistory, histories
from orchestrator.model.ids import CampaignId, NodeId
from orchestrator.quotas.ledger import SimKey
from orchestrator.scheduling.recurrence import TimeScale
from orchestrator.scheduling.selection import NodeFacts
from orchestrator.scheduling.snapshot import Campaign
from orchestrator.scheduling.spec import CampaignSpecV2
from orchestrator.timeseries.influx import InfluxClient, TimeSeriesError
from orchestrator.timeseries.proxyrows import Queryable, campaign_points

log = logging.getLogger(__name__)


def policy(spec: CampaignSpecV2) -> Policy:
    assert spec.proxy is not None
    p = spec.proxy
    return Policy(max_relative_width=p.max_relative_width, max_age_s=p.max_age_hours * 3600,
                  min_tats=p.min_tats)


def campaign_now_s(spec: CampaignSpecV2, submitted_at: datetime, now: datetime) -> float:
    """``now`` in the campaign's time (its points are written at campaign time)."""
    scale = TimeScale(spec.time_scale, spec.time_anchor or submitted_at)
    return scale.to_campaign(now).timestamp()


def verdict(h: SimHistory, *, policy: Policy, now_s: float) -> Verdict:
    """The SIM's answer: its model on every TAT so far, asked with its newest signals."""
    latest = max([*((o.time_s, o.signals) for o in h.observations),
                  *((c.time_s, c.signals) for c in h.cheap)],
                 key=lambda ts: ts[0], default=None)
    return tat_needed(fit(h.observations), latest[1] if latest else None, now_s=now_s,
                      policy=policy)


def verdicts(ts: object, campaigns: Sequence[Campaign], nodes: Sequence[NodeFacts],
             now: datetime) -> dict[tuple[CampaignId, SimKey], Verdict]:
    """Per proxy-mode campaign and SIM with a history, whether a TAT is needed now."""
    out: dict[tuple[CampaignId, SimKey], Verdict] = {}
    proxied = [c for c in campaigns if c.spec.proxy is not None]
    if not proxied:
        return out
    if not isinstance(ts, Queryable):
        log.warning("proxy mode: no time-series store to read; every window books a TAT")
        return out
    if isinstance(ts, InfluxClient):  # the planner's lock is held: one try per query
        ts = ts.without_retries()
    keys = {(n.id, s.mcc_mnc): SimKey(n.id, s.interface, s.mcc_mnc)
            for n in nodes for s in n.sims}
    for c in proxied:
        try:
            sims = histories(*campaign_points(ts, c.id))
        except TimeSeriesError as e:
            # The store is down or refuses: the other campaigns' queries would wait on
            # it too. Every proxy-mode window of this pass books its TAT.
            log.warning("proxy mode: campaign %s's points unreadable (%s); this pass's "
                        "proxy-mode windows book a TAT", c.id, e)
            break
        now_s = campaign_now_s(c.spec, c.submitted_at, now)
        for sim, h in sims.items():
            key = keys.get((NodeId(sim.node), sim.operator))
            if key is not None:
                out[(c.id, key)] = verdict(h, policy=policy(c.spec), now_s=now_s)
    return out
