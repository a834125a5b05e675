"""The study SDK: everything a study package imports from the orchestrator.

A study is one object (:class:`Study`) that a package names under the
``testbed.studies`` entry points; the core finds it there and speaks to it through the
contributions it fills in: a reader of its result formats (:class:`ResultReader`),
the schema of its measurements (:class:`Measurement`), its release tables
(:func:`point_table`), its pages (:class:`StudyPage`). A study imports this package and
the shared pure libraries (``orchestrator.analysis``, ``testbed_kit``), never the core's
other modules: what it needs of them is re-exported here, so that the core can change
behind it (docs/writing-a-study.md).
"""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from orchestrator.analysis.units import rate_text
from orchestrator.dataset.tables import (
    DIRECTION,
    METHOD,
    Column,
    DerivedTable,
    PointTable,
    Row,
    TableSpec,
    point_table,
)
from orchestrator.model.ids import CampaignId, NodeId
from orchestrator.pages import svg
from orchestrator.pages.contrib import ChoiceSource, PageBuilder, StudyPage
from orchestrator.pages.data import Filters, Where
from orchestrator.pages.queries import (
    TimeSeriesQuery,
    result_rows,
    select_points,
    text,
    where_of,
)
from orchestrator.pages.views import (
    HOURS,
    MBPS,
    MIN_CYCLE_SHARE,
    Page,
    Section,
    Table,
    Zones,
    cycle_verdict,
    fmt,
    no_data,
    slug,
)
from orchestrator.quotas.ledger import SimKey
from orchestrator.scheduling.recurrence import TimeScale
from orchestrator.scheduling.selection import NodeFacts
from orchestrator.scheduling.snapshot import Campaign
from orchestrator.scheduling.spec import CampaignSpecV2
from orchestrator.services.access import Readable
from orchestrator.services.planhooks import ProxyVerdicts
from orchestrator.study.model import ResultColumn, Study
from orchestrator.study.registry import (
    Studies,
    StudyLoadError,
    forget,
    installed_studies_of,
    load,
)
from orchestrator.timeseries.influx import TimeSeriesError, literal
from orchestrator.timeseries.lineprotocol import FieldValue, Point
from orchestrator.timeseries.readers import (
    FieldSpec,
    Measurement,
    RecordsReader,
    ResultReader,
    RunInputs,
    field_specs,
)
from orchestrator.timeseries.schema import (
    MODEM,
    BundlePoints,
    RunContext,
    bundle_points,
    point,
    to_ns,
)

__all__ = [
    "DIRECTION",
    "HOURS",
    "MBPS",
    "METHOD",
    "MIN_CYCLE_SHARE",
    "MODEM",
    "BundlePoints",
    "Campaign",
    "CampaignId",
    "CampaignSpecV2",
    "ChoiceSource",
    "Collector",
    "Column",
    "CounterMetricFamily",
    "DerivedTable",
    "FieldSpec",
    "FieldValue",
    "Filters",
    "GaugeMetricFamily",
    "Measurement",
    "Metric",
    "NodeFacts",
    "NodeId",
    "Page",
    "PageBuilder",
    "Point",
    "PointTable",
    "ProxyVerdicts",
    "Readable",
    "RecordsReader",
    "ResultColumn",
    "ResultReader",
    "Row",
    "RunContext",
    "RunInputs",
    "Section",
    "SimKey",
    "Studies",
    "Study",
    "StudyLoadError",
    "StudyPage",
    "Table",
    "TableSpec",
    "TimeScale",
    "TimeSeriesError",
    "TimeSeriesQuery",
    "Where",
    "Zones",
    "bundle_points",
    "cycle_verdict",
    "field_specs",
    "fmt",
    "forget",
    "installed_studies_of",
    "literal",
    "load",
    "no_data",
    "point",
    "point_table",
    "rate_text",
    "result_rows",
    "select_points",
    "slug",
    "svg",
    "text",
    "to_ns",
    "where_of",
]
