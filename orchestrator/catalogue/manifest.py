"""Experiment manifests (``experiments/<name>/experiment.yaml``).

A manifest names the image, the parameters (a JSON Schema per parameter; unknown
parameters are refused), the result file and format, and two forecasts as expressions:
the slot length and the data volume, so the scheduler can book time and reserve quota
before a byte is sent. It also says what a run needs of its node (``resources:``: memory,
CPU, processes, the results' bound, /tmp; ``capabilities:``, from a short allowed list):
every run is confined to that, capped by the node's policy (docs/security.md, "Run
confinement").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchestrator.catalogue.expr import Expression, ExpressionError, parse_expression
from testbed_common import safeyaml
from testbed_common.platforms import DEFAULT_PLATFORMS, parse_platform
from testbed_common.wire import ALLOWED_CAPABILITIES, RunResources, allowed_capabilities

#: Variables a forecast may use besides the parameters.
FORECAST_VARIABLES = frozenset({"rate_bps"})


class ManifestError(ValueError):
    """A manifest that cannot be loaded; the message names the file and the field."""


class ResultSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    file: str
    format: str
    version: int


# --- how the orchestrator reads the experiment's runs (issue 33: studies as plug-ins) ---
# What describes the experiment itself is a field of its manifest, so that the core
# names no experiment: a study's code reads its result format, the manifest says what
# the runs are.


class IngestSpec(BaseModel):
    """How ingest treats the experiment's runs (each field's default is what a run of
    an experiment that says nothing gets)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    #: One run is a whole ABw-TAT-ABw session: its TAT and ABw steps pair among
    #: themselves, never with other runs of its campaign occurrence on the SIM.
    whole_session: bool = False
    #: The measurement server may be the sender (downlink): ingest reads the server's
    #: side of the capture (``server/capture/``) and hands its flows to the study.
    sender_capture: bool = False
    #: The run's JSON-lines tool records (ABw estimates) are points of their own; False
    #: when the result file already holds them (written once, as the study's points).
    records: bool = True


class ProxySpec(BaseModel):
    """The experiment may run in a campaign's proxy mode (docs/abw-proxy.md): its cheap
    signals every window, its expensive measurement only when the calibrated proxy
    asks for one."""

    model_config = ConfigDict(extra="forbid", strict=True)
    #: The parameter that counts the expensive measurement in a run: 0 is the cheap
    #: session, and a proxy-mode step must not set it to 0 (its measurements calibrate).
    calibration: str = Field(pattern=r"^[a-z_][a-z0-9_]{0,40}$")


def proxy_modes(catalogue: Mapping[str, Manifest]) -> dict[str, str]:
    """Each experiment that declares a proxy mode, with its calibration parameter: what
    a campaign in proxy mode is checked against (``scheduling.spec.parse_campaign``)."""
    return {name: m.proxy.calibration for name, m in sorted(catalogue.items())
            if m.proxy is not None}


# --- end of the study fields ---


class _ManifestDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,40}$")
    version: int = Field(ge=1)
    description: str = ""
    image: str = Field(min_length=1)
    result: ResultSpec
    parameters: dict[str, dict[str, Any]] = {}
    duration_s: str | float
    data_volume_bytes: str | float
    interfaces: int = Field(1, ge=1, le=8)
    ingest: IngestSpec = IngestSpec()
    resources: RunResources = RunResources()
    capabilities: list[str] = Field([], max_length=len(ALLOWED_CAPABILITIES))

    @field_validator("capabilities")
    @classmethod
    def _capabilities_allowed(cls, value: list[str]) -> list[str]:
        return allowed_capabilities(
            value, hint=' (docs/experiment-contract.md, "Confinement")')
    # -- platforms (heterogeneous nodes) --
    #: The platforms the image is built for (``linux/amd64``, ``linux/arm64``): the
    #: planner books the experiment only on nodes of those architectures.
    platforms: list[str] = Field(default_factory=lambda: list(DEFAULT_PLATFORMS),
                                 min_length=1, max_length=16)
    #: The image copies the native tools (tools/, built for amd64 only here): nodes
    #: tagged ``no-native-tools`` do not get it.
    native_tools: bool = False

    @field_validator("platforms")
    @classmethod
    def _platforms_known(cls, value: list[str]) -> list[str]:
        platforms = [parse_platform(p) for p in value]
        if len(set(platforms)) != len(platforms):
            raise ValueError(f"platforms {value} names one twice; list each once")
        return platforms
    # -- end platforms --
    proxy: ProxySpec | None = None

    @field_validator("parameters")
    @classmethod
    def _schemas_valid(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for name, schema in value.items():
            try:
                jsonschema.Draft202012Validator.check_schema(schema)
            except jsonschema.SchemaError as e:
                raise ValueError(f"parameter {name!r}: invalid schema: {e.message}") from e
        return value


@dataclass(frozen=True)
class Manifest:
    name: str
    version: int
    description: str
    image: str
    result: ResultSpec
    parameters: Mapping[str, Mapping[str, Any]]
    duration: Expression
    data_volume: Expression
    interfaces: int
    ingest: IngestSpec = field(default_factory=IngestSpec)
    #: What one run asks of its node (None fields: the node's defaults).
    resources: RunResources = field(default_factory=RunResources)
    #: Capabilities its runs keep (every other one is dropped).
    capabilities: tuple[str, ...] = ()
    #: What the image provides (see _ManifestDoc.platforms) and whether it needs the
    #: native tools.
    platforms: tuple[str, ...] = DEFAULT_PLATFORMS
    native_tools: bool = False
    proxy: ProxySpec | None = None

    @property
    def schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": dict(self.parameters),
            "additionalProperties": False,
        }

    def resolve_parameters(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Defaults filled in and the whole set validated; raises ``ValueError`` naming
        each bad or unknown parameter."""
        unknown = sorted(set(given) - set(self.parameters))
        if unknown:
            raise ValueError(
                f"unknown parameter(s) {unknown} for experiment {self.name!r}; "
                f"it takes {sorted(self.parameters)}"
            )
        resolved = {k: s["default"] for k, s in self.parameters.items() if "default" in s} | dict(
            given
        )
        validator = jsonschema.Draft202012Validator(self.schema)
        problems = [
            f"{'/'.join(map(str, e.absolute_path)) or 'parameters'}: {e.message}"
            for e in validator.iter_errors(resolved)
        ]
        missing = sorted(set(self.parameters) - set(resolved))
        problems += [f"{m}: required (no default)" for m in missing]
        if problems:
            raise ValueError(
                f"invalid parameters for experiment {self.name!r}: " + "; ".join(problems)
            )
        return resolved

    def forecast(self, parameters: Mapping[str, Any], rate_bps: float) -> tuple[float, int]:
        """(slot seconds, data bytes) for resolved ``parameters`` on a link of ``rate_bps``."""
        env = {**parameters, "rate_bps": rate_bps}
        return self.duration.evaluate(env), int(self.data_volume.evaluate(env))


def parse_manifest(text: str, *, source: str) -> Manifest:
    try:
        raw = safeyaml.load(text, what=source)
    except safeyaml.YamlRefused as e:
        raise ManifestError(str(e)) from e
    if not isinstance(raw, dict):
        raise ManifestError(f"{source}: expected a mapping at the top level")
    try:
        doc = _ManifestDoc.model_validate(raw)
    except ValidationError as e:
        fields = "; ".join(
            f"{'.'.join(map(str, err['loc'])) or '(top)'}: {err['msg']}" for err in e.errors()
        )
        raise ManifestError(f"{source}: {fields}") from e
    try:
        duration = parse_expression(doc.duration_s)
        volume = parse_expression(doc.data_volume_bytes)
    except ExpressionError as e:
        raise ManifestError(f"{source}: {e}") from e
    known = set(doc.parameters) | FORECAST_VARIABLES
    for key, expr in (("duration_s", duration), ("data_volume_bytes", volume)):
        unknown = expr.names - known
        if unknown:
            raise ManifestError(
                f"{source}: {key} uses {sorted(unknown)}, which are neither parameters "
                f"nor {sorted(FORECAST_VARIABLES)}"
            )
    if doc.proxy is not None and doc.proxy.calibration not in doc.parameters:
        raise ManifestError(
            f"{source}: proxy.calibration names {doc.proxy.calibration!r}, which is not "
            f"one of its parameters {sorted(doc.parameters)}")
    manifest = Manifest(
        name=doc.name,
        version=doc.version,
        description=doc.description,
        image=doc.image,
        result=doc.result,
        parameters=doc.parameters,
        duration=duration,
        data_volume=volume,
        interfaces=doc.interfaces,
        ingest=doc.ingest,
        resources=doc.resources,
        capabilities=tuple(doc.capabilities),
        platforms=tuple(doc.platforms),
        native_tools=doc.native_tools,
        proxy=doc.proxy,
    )
    try:  # defaults must satisfy the schema, and forecasts must evaluate on them
        defaults = {k: s["default"] for k, s in doc.parameters.items() if "default" in s}
        if set(defaults) == set(doc.parameters):
            manifest.forecast(manifest.resolve_parameters(defaults), rate_bps=1e6)
    except (ValueError, ExpressionError) as e:
        raise ManifestError(f"{source}: defaults do not work: {e}") from e
    return manifest
