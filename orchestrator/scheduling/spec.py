"""Campaign spec, version 2: what researchers write (YAML or JSON).

Version 1 (:class:`orchestrator.scheduling.campaign.CampaignSpec`) names nodes per step
and books everything as soon as possible; it stays valid and is converted by
:func:`parse_campaign`. Version 2 adds a tag-expression selection, recurrence in node
local time, sessions of balanced repetitions, priorities, a missed-slot policy and
time compression::

    version: 2
    name: abw-tat-se
    project: mbb-2026
    select: country:SE AND (operator:240-01 OR operator:Telia) AND NOT mobility:mobile
    steps:                              # one session: ABW1-TAT-ABW2, pause, ABW2-TAT-ABW1
      - {experiment: abw, parameters: {duration_s: 10}}
      - {experiment: tat, parameters: {duration_s: 20}}
      - {experiment: abw, parameters: {duration_s: 10}}
    repetitions: 2                      # even: steps in order; odd: reversed
    pause_s: 300
    recurrence: {kind: daily, window: "00:00-03:00", first_day: 2026-03-01, last_day: 2026-03-09}
    priority: 10
    missed: skip                        # or catch_up
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from orchestrator.errors import Invalid
from orchestrator.scheduling import bounds
from orchestrator.scheduling.campaign import CampaignSpec
from orchestrator.scheduling.recurrence import parse_window
from orchestrator.scheduling.selection import Selection
from testbed_common.bounds import ExperimentStr, Label128, NameStr, NodeIdStr

D = TypeVar("D", bound=date)  # a date or a datetime


def whole_seconds(value: datetime) -> datetime:
    """Sessions are named by their window's start in whole seconds (the planner's
    unit), and re-planning matches stored runs by that name: a start with microseconds
    would never match and its sessions would be booked again on every pass."""
    return value.replace(microsecond=0)


def in_horizon(value: D) -> D:
    """A campaign date inside the absolute horizon (bounds.EARLIEST .. bounds.LATEST);
    submission also holds it to a few years ahead (:func:`check_ahead`)."""
    problem = bounds.out_of_horizon(value)
    if problem:
        raise ValueError(f"{problem}; campaign dates must lie between "
                         f"{bounds.EARLIEST:%Y-%m-%d} and a few years from now")
    return value


class StepSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    experiment: ExperimentStr
    parameters: dict[str, Any] = Field({}, max_length=bounds.MAX_PARAMETERS)


class Asap(BaseModel):
    """Once per selected SIM, as soon as the node is free."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["asap"] = "asap"


class Idle(BaseModel):
    """Like ``asap`` but planned after every other campaign: it only takes time and
    quota nothing else wants, whatever its priority."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["idle"] = "idle"


class Every(BaseModel):
    """A session every ``hours`` hours (1: hourly) from ``start`` until ``end``."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["every"] = "every"
    hours: float = Field(gt=0, le=bounds.MAX_EVERY_HOURS)
    start: AwareDatetime
    end: AwareDatetime

    @field_validator("hours")
    @classmethod
    def _period(cls, value: float) -> float:
        if value < bounds.MIN_EVERY_HOURS:
            raise ValueError(
                f"every {value:g} h is shorter than the shortest period, "
                f"{bounds.MIN_EVERY_HOURS * 60:g} minutes ({bounds.MIN_EVERY_HOURS:.4f} h): "
                "a session takes minutes; use a longer period")
        return value

    @field_validator("start", "end")
    @classmethod
    def _whole_seconds(cls, value: datetime) -> datetime:
        return whole_seconds(in_horizon(value))

    @model_validator(mode="after")
    def _windows(self) -> Every:
        if self.end <= self.start:
            raise ValueError(f"end {self.end.isoformat()} is not after start "
                             f"{self.start.isoformat()}")
        count = -(-(self.end - self.start) // timedelta(hours=self.hours))
        if count > bounds.MAX_OCCURRENCES:
            raise ValueError(
                f"every {self.hours:g} h from {self.start.isoformat()} to "
                f"{self.end.isoformat()} is {count} windows; a campaign may have at most "
                f"{bounds.MAX_OCCURRENCES}: use a longer period (hours) or an earlier end")
        return self


class Daily(BaseModel):
    """A session a day inside ``window`` (HH:MM-HH:MM, node local time), on local
    dates ``first_day`` to ``last_day`` inclusive."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["daily"] = "daily"
    window: str = Field(max_length=32)
    first_day: date
    last_day: date

    @field_validator("first_day", "last_day")
    @classmethod
    def _in_horizon(cls, value: date) -> date:
        return in_horizon(value)

    @model_validator(mode="after")
    def _windows(self) -> Daily:
        days = (self.last_day - self.first_day).days + 1
        if days < 1:
            raise ValueError(f"last_day {self.last_day} is before first_day {self.first_day}")
        if days > bounds.MAX_OCCURRENCES:
            raise ValueError(
                f"{self.first_day} to {self.last_day} is {days} daily windows; a campaign "
                f"may have at most {bounds.MAX_OCCURRENCES}: use an earlier last_day")
        return self

    @field_validator("window")
    @classmethod
    def _window(cls, value: str) -> str:
        try:
            parse_window(value)
        except Invalid as e:  # pydantic reports ValueErrors with the field's location
            raise ValueError(str(e)) from e
        return value


Recurrence = Annotated[Asap | Idle | Every | Daily, Field(discriminator="kind")]

#: The validation context's key (``parse_campaign(..., proxy_modes=...)``): the
#: experiments that declare a proxy mode in their manifest (``proxy.calibration``), each
#: with the parameter that counts its calibrating measurements.
PROXY_MODES = "proxy_modes"


class Proxy(BaseModel):
    """Proxy mode (docs/abw-proxy.md): each window books the cheap session (the step
    with ``cheap_parameters`` over its own: ABw only) unless the SIM's calibrated TAT
    proxy asks for a TAT (too few TATs, the newest too old, or its 90 % interval too
    wide for its prediction); then it books the step as written, TAT included. Each
    SIM is booked one window ahead, so each decision sees the results before it."""

    model_config = ConfigDict(extra="forbid")
    #: The cheap session's parameters over the step's; by default the experiment's
    #: calibration parameter at 0 (filled in when the spec is checked).
    cheap_parameters: dict[str, Any] = Field(default_factory=dict,
                                             max_length=bounds.MAX_PARAMETERS)
    #: A TAT runs when the 90 % interval's width (high - low) exceeds this share of the
    #: predicted rate.
    max_relative_width: float = Field(1.0, gt=0, le=100)
    #: A TAT runs when the SIM's newest TAT is older than this, campaign hours.
    max_age_hours: float = Field(6.0, gt=0, le=24 * 366)
    #: TATs a SIM needs before the proxy stands in for one (9 give a bounded 90 %
    #: interval at all: orchestrator.analysis.proxy.conformal_rank).
    min_tats: int = Field(10, ge=9, le=1000)


class CampaignSpecV2(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: Literal[2] = 2
    name: Label128
    project: NameStr = "default"
    #: Tag expression (see ``selection.py``; its length and terms are bounded there);
    #: None selects every SIM of the fleet.
    select: str | None = None
    #: Explicit node ids; combined with ``select`` by AND when both are given.
    nodes: list[NodeIdStr] = Field([], max_length=bounds.MAX_NODES)
    steps: list[StepSpec] = Field(min_length=1, max_length=bounds.MAX_STEPS)
    #: Repetitions within a session; odd ones run the steps in reverse order.
    repetitions: int = Field(1, ge=1, le=1000)
    #: Pause between repetitions within a session, seconds (ABw-TAT-ABw: 300).
    pause_s: float = Field(0.0, ge=0, le=86400)
    recurrence: Recurrence = Asap()
    #: Higher wins a node both campaigns want; ties go to the earlier submission.
    priority: int = Field(0, ge=-1000, le=1000)
    #: What to do with a window that passed unbooked or unrun: skip it, or run it as
    #: soon as possible.
    missed: Literal["skip", "catch_up"] = "skip"
    #: Campaign time runs this many times faster than wall time (60: an hour a minute),
    #: from ``time_anchor`` (default: submission time). For demos and tests; never
    #: slower than wall time (that would stretch windows past any horizon).
    time_scale: float = Field(1.0, ge=1, le=1e6)
    time_anchor: AwareDatetime | None = None
    #: Proxy mode: ABw every window, a TAT only when the calibrated proxy asks for one.
    proxy: Proxy | None = None

    @field_validator("time_anchor")
    @classmethod
    def _anchor_whole_seconds(cls, value: datetime | None) -> datetime | None:
        return None if value is None else whole_seconds(in_horizon(value))

    @model_validator(mode="after")
    def _runs_per_session(self) -> CampaignSpecV2:
        runs = self.repetitions * len(self.steps)
        if runs > bounds.MAX_RUNS_PER_SESSION:
            raise ValueError(
                f"a session of {len(self.steps)} step(s) x {self.repetitions} repetitions is "
                f"{runs} runs; at most {bounds.MAX_RUNS_PER_SESSION}: fewer repetitions or "
                "steps, or a second campaign")
        return self

    @model_validator(mode="after")
    def _proxy_mode(self, info: ValidationInfo) -> CampaignSpecV2:
        if self.proxy is None:
            return self
        modes: Mapping[str, str] | None = (info.context or {}).get(PROXY_MODES)
        if modes is None:
            raise ValueError("proxy mode is checked against the experiments' manifests: "
                             "parse the campaign with the catalogue's proxy modes "
                             "(parse_campaign(raw, proxy_modes=...))")
        if len(self.steps) != 1 or self.steps[0].experiment not in modes:
            raise ValueError(
                "proxy mode runs one step, of an experiment whose manifest declares a "
                f"proxy mode (proxy.calibration): {', '.join(modes) or 'none installed'} "
                "(its cheap steps are the proxy's signals, its calibrating ones the "
                "calibration)")
        calibration = modes[self.steps[0].experiment]
        if self.steps[0].parameters.get(calibration, 1) == 0:
            raise ValueError(f"proxy mode's step must measure TAT (not {calibration}: 0): "
                             "its measurements calibrate the proxy; the cheap session is "
                             "cheap_parameters")
        if self.recurrence.kind not in ("every", "daily"):
            raise ValueError("proxy mode needs a recurring campaign (kind every or daily): "
                             "the proxy learns from the SIM's earlier sessions")
        if not self.proxy.cheap_parameters:
            self.proxy.cheap_parameters = {calibration: 0}
        return self

    def cheap_steps(self) -> list[StepSpec]:
        """Proxy mode's cheap session: the steps with ``cheap_parameters`` over theirs."""
        assert self.proxy is not None
        return [StepSpec(experiment=s.experiment,
                         parameters={**s.parameters, **self.proxy.cheap_parameters})
                for s in self.steps]

    def dates(self) -> list[tuple[str, datetime]]:
        """Every date the spec names, as UTC instants (days at their midnight), with
        its field name: what :func:`check_ahead` holds to the horizon."""
        out: list[tuple[str, datetime]] = []
        r = self.recurrence
        if isinstance(r, Every):
            out += [("recurrence.start", r.start), ("recurrence.end", r.end)]
        elif isinstance(r, Daily):
            out += [(f"recurrence.{name}", datetime(d.year, d.month, d.day, tzinfo=UTC))
                    for name, d in (("first_day", r.first_day), ("last_day", r.last_day))]
        if self.time_anchor is not None:
            out.append(("time_anchor", self.time_anchor))
        return out

    @field_validator("select")
    @classmethod
    def _select(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                Selection.parse(value)
            except Invalid as e:  # the message shows the position with a caret
                raise ValueError(str(e)) from e
        return value


def check_ahead(spec: CampaignSpecV2, *, now: datetime, max_ahead: timedelta) -> None:
    """Refuse a spec with a date more than ``max_ahead`` after ``now`` (at submission;
    settings.scheduling.campaign_max_ahead_days), naming each such field."""
    latest = min(bounds.shift(now, max_ahead), bounds.LATEST)
    late = [f"{name} {value.isoformat()}" for name, value in spec.dates() if value > latest]
    if late:
        raise Invalid(
            f"campaign spec: {', '.join(late)} is after {latest:%Y-%m-%d %H:%M} UTC; dates may "
            f"lie at most {max_ahead.days} days ahead: submit a later part of a long "
            "campaign when its time comes")


def from_v1(spec: CampaignSpec) -> CampaignSpecV2:
    """A version-1 spec as version 2 (same runs: ASAP, steps in balanced order)."""
    node_sets = {tuple(s.nodes) for s in spec.steps}
    iface_sets = {tuple(s.interfaces) for s in spec.steps}
    if len(node_sets) > 1 or len(iface_sets) > 1:
        raise Invalid(
            "this version-1 campaign names different nodes or interfaces per step; "
            "version 2 selects once per campaign: split it into one campaign per set"
        )
    ifaces = next(iter(iface_sets))
    return CampaignSpecV2(
        name=spec.name,
        project=spec.project,
        nodes=list(next(iter(node_sets))),
        select=f"interface:{','.join(ifaces)}" if ifaces else None,
        steps=[StepSpec(experiment=s.experiment, parameters=s.parameters) for s in spec.steps],
        repetitions=spec.repetitions,
    )


def parse_campaign(raw: dict[str, Any], *,
                   proxy_modes: Mapping[str, str] | None = None) -> CampaignSpecV2:
    """A campaign document of either version (no ``version`` key: version 1).
    ``proxy_modes``: the catalogue's experiments that declare a proxy mode, with their
    calibration parameter (``catalogue.manifest.proxy_modes``); a campaign in proxy
    mode is refused without them. Raises pydantic's ``ValidationError`` (a
    ValueError) or :class:`Invalid`."""
    if raw.get("version", 1) == 1:
        return from_v1(CampaignSpec.model_validate({k: v for k, v in raw.items()
                                                    if k != "version"}))
    context = None if proxy_modes is None else {PROXY_MODES: proxy_modes}
    return CampaignSpecV2.model_validate(raw, context=context)
