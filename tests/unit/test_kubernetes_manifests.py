"""deploy/kubernetes, checked without a cluster.

No cluster and no kustomize binary exist where this runs, so the test renders the
kustomization itself, for the subset of kustomize the manifests use (``resources``
files and folders, ``configMapGenerator`` files, ``secretGenerator`` env files,
``namespace``, ``labels``, ``images``; any other key fails the test rather than being
skipped silently). Then every object is loaded into the official ``kubernetes`` Python
client's model for its kind, strictly: the client's own deserializer drops unknown fields
without a word (kubernetes-client/python#977), so the fields are first walked against
each model's ``attribute_map``, with their types; the client then builds the model, which
refuses a missing required field.

On top, what a reviewer of the manifests would check by hand: probes and resource
requests on every container, the orchestrator's probes on /healthz, several replicas on a
ReadWriteMany volume, every Secret, ConfigMap, PersistentVolumeClaim and Service named
where it is used, Service ports landing on container ports, and the orchestrator's
``TESTBED_*`` variables known to ``orchestrator.settings.Settings``.

Not validated here: what only a cluster knows (admission, storage classes, image pulls,
that the pods start and talk), kustomize's own name hashes (references are checked by
the generator's name, which kustomize rewrites everywhere alike), and kustomize features
the manifests do not use.
"""

from __future__ import annotations

import base64
import copy
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from kubernetes import client as k8s
from pydantic import BaseModel

from orchestrator.settings import Settings

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "deploy" / "kubernetes"
#: secrets.env is never committed; its example stands in for it here.
STAND_INS = {"secrets.env": "secrets.env.example"}
SUPPORTED = {"apiVersion", "kind", "namespace", "labels", "resources", "configMapGenerator",
             "secretGenerator", "generatorOptions", "images"}
CLUSTER_SCOPED = {"Namespace", "PersistentVolume", "StorageClass", "ClusterRole",
                  "ClusterRoleBinding"}
WORKLOADS = {"Deployment", "StatefulSet"}

Obj = dict[str, Any]


# --- rendering: the subset of kustomize the manifests use ------------------------------

def _inside(folder: Path, name: str) -> Path:
    """A generator's file, refused outside its kustomization's folder as kustomize's
    default load restrictor does (hence the small kustomizations beside the files)."""
    path = (folder / name).resolve()
    if not path.is_relative_to(folder.resolve()):
        raise AssertionError(f"{folder}: {name} is outside the kustomization's folder; "
                             "kustomize refuses it (add a kustomization.yaml there)")
    if not path.is_file() and name in STAND_INS:
        path = folder / STAND_INS[name]
    return path


def _generated(kind: str, spec: Obj, folder: Path) -> Obj:
    data: dict[str, str] = {}
    for entry in spec.get("files", []):
        key, _, name = entry.rpartition("=")
        path = _inside(folder, name)
        data[key or path.name] = path.read_text()
    for name in spec.get("envs", []):
        for line in _inside(folder, name).read_text().splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                key, sep, value = line.partition("=")
                assert sep, f"{folder / name}: {line!r} is not KEY=VALUE"
                data[key.strip()] = value
    obj: Obj = {"apiVersion": "v1", "kind": kind, "metadata": {"name": spec["name"]}}
    if kind == "Secret":
        obj["type"] = "Opaque"
        obj["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    else:
        obj["data"] = data
    return obj


def _containers(obj: Obj) -> list[Obj]:
    if obj["kind"] not in WORKLOADS:
        return []
    pod = obj["spec"]["template"]["spec"]
    return [*pod.get("initContainers", []), *pod["containers"]]


def render(folder: Path) -> list[Obj]:
    """The objects ``kustomize build folder`` would print (names without hashes)."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    unknown = set(kustomization) - SUPPORTED
    assert not unknown, (f"{folder}/kustomization.yaml uses {sorted(unknown)}, which this "
                         "test does not render: extend render() before relying on it")
    objects: list[Obj] = []
    for entry in kustomization.get("resources", []):
        path = folder / entry
        if path.is_dir():
            objects += render(path)
        else:
            objects += [o for o in yaml.safe_load_all(path.read_text()) if o is not None]
    for spec in kustomization.get("configMapGenerator", []):
        objects.append(_generated("ConfigMap", spec, folder))
    for spec in kustomization.get("secretGenerator", []):
        objects.append(_generated("Secret", spec, folder))
    for obj in objects:
        meta = obj.setdefault("metadata", {})
        if "namespace" in kustomization and obj["kind"] not in CLUSTER_SCOPED:
            meta["namespace"] = kustomization["namespace"]
        for group in kustomization.get("labels", []):
            meta.setdefault("labels", {}).update(group["pairs"])
        for container in _containers(obj):
            for image in kustomization.get("images", []):
                if container["image"].split(":")[0] == image["name"]:
                    container["image"] = (f"{image.get('newName', image['name'])}:"
                                          f"{image['newTag']}")
    return objects


# --- strict loading into the client's models -------------------------------------------

PRIMITIVES: dict[str, tuple[type, ...]] = {
    "str": (str,), "bytes": (str,), "int": (int,), "float": (int, float), "bool": (bool,),
    "datetime": (str,), "date": (str,), "object": (str, int, dict, list, bool, float)}


def _model_class(obj: Obj) -> str:
    """V1Deployment for apps/v1 Deployment, V1Service for v1 Service (the client's
    naming; kubernetes.utils.create_from_yaml derives its API classes the same way)."""
    version = obj["apiVersion"].rsplit("/", 1)[-1]
    return f"{version.capitalize()}{obj['kind']}"


def strict(data: Any, klass: str, where: str) -> Iterator[str]:
    """Every field of ``data`` known to the model ``klass``, with the right type."""
    for wrapper in ("Optional[", "optional["):
        if klass.startswith(wrapper):
            klass = klass[len(wrapper):-1]
    if m := re.fullmatch(r"[Ll]ist\[(.*)\]", klass):
        if not isinstance(data, list):
            yield f"{where}: a list expected, got {data!r}"
            return
        for i, item in enumerate(data):
            yield from strict(item, m.group(1), f"{where}[{i}]")
        return
    if m := (re.fullmatch(r"[Dd]ict\[[^,]*, (.*)\]", klass)
             or re.fullmatch(r"dict\([^,]*, (.*)\)", klass)):
        if not isinstance(data, dict):
            yield f"{where}: a mapping expected, got {data!r}"
            return
        for key, value in data.items():
            yield from strict(value, m.group(1), f"{where}.{key}")
        return
    if klass in PRIMITIVES:
        ok = isinstance(data, PRIMITIVES[klass]) and not (
            isinstance(data, bool) and bool not in PRIMITIVES[klass])
        if not ok:
            yield f"{where}: {klass} expected, got {data!r}"
        elif klass == "bytes":
            try:
                base64.b64decode(data, validate=True)
            except ValueError:
                yield f"{where}: base64 expected, got {data!r}"
        return
    model = getattr(k8s, klass, None)
    if model is None:
        yield f"{where}: the client has no model {klass}"
        return
    if not isinstance(data, dict):
        yield f"{where}: a {klass} mapping expected, got {data!r}"
        return
    fields = {json_name: attr for attr, json_name in model.attribute_map.items()}
    for key, value in data.items():
        if key not in fields:
            yield f"{where}.{key}: not a field of {klass}"
        elif value is not None:
            yield from strict(value, model.openapi_types[fields[key]], f"{where}.{key}")


def load(obj: Obj) -> Any:
    """The client's model of ``obj``, read as the client reads an API server's JSON
    answer (``ApiClient.deserialize``, public since client 37; before, it took a response
    object: kubernetes-client/python#523). ValueError when a required field is missing."""
    return k8s.ApiClient().deserialize(json.dumps(obj), _model_class(obj), "application/json")


# --- what a reviewer checks -------------------------------------------------------------

def _by_kind(objects: list[Obj], kind: str) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def _settings_field(name: str) -> bool:
    """Whether TESTBED_A__B names a field of Settings (nested with "__")."""
    model: type[BaseModel] = Settings
    parts = name.removeprefix("TESTBED_").lower().split("__")
    for i, part in enumerate(parts):
        field = model.model_fields.get(part)
        if field is None:
            return False
        nested = field.annotation
        if i < len(parts) - 1:
            if not (isinstance(nested, type) and issubclass(nested, BaseModel)):
                return False
            model = nested
    return True


def _secret_value(objects: list[Obj], ref: Obj) -> str:
    secret = _by_kind(objects, "Secret")[ref["name"]]
    return base64.b64decode(secret["data"][ref["key"]]).decode()


def problems(objects: list[Obj]) -> list[str]:
    """Everything wrong with the rendered objects, one line each; [] when sound."""
    found: list[str] = []
    names: set[tuple[str, str]] = set()
    for obj in objects:
        where = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        if (obj["kind"], obj["metadata"]["name"]) in names:
            found.append(f"{where}: defined twice")
        names.add((obj["kind"], obj["metadata"]["name"]))
        bad = list(strict(obj, _model_class(obj), where))
        found += bad
        if not bad:
            try:
                load(obj)
            except (ValueError, TypeError) as e:
                found.append(f"{where}: the client's model refuses it: {e}")

    secrets = _by_kind(objects, "Secret")
    configmaps = _by_kind(objects, "ConfigMap")
    claims = set(_by_kind(objects, "PersistentVolumeClaim"))
    workloads = [o for o in objects if o["kind"] in WORKLOADS]
    for obj in workloads:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        pod = obj["spec"]["template"]["spec"]
        templates = {t["metadata"]["name"] for t in obj["spec"].get("volumeClaimTemplates", [])}
        labels = obj["spec"]["template"]["metadata"].get("labels", {})
        if any(labels.get(k) != v for k, v in obj["spec"]["selector"]["matchLabels"].items()):
            found.append(f"{where}: the selector does not match the pod template's labels")
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for volume in pod.get("volumes", []):
            claim = volume.get("persistentVolumeClaim", {}).get("claimName")
            if claim is not None and claim not in claims:
                found.append(f"{where}: no PersistentVolumeClaim {claim}")
            if "configMap" in volume and volume["configMap"]["name"] not in configmaps:
                found.append(f"{where}: no ConfigMap {volume['configMap']['name']}")
            if "secret" in volume and volume["secret"]["secretName"] not in secrets:
                found.append(f"{where}: no Secret {volume['secret']['secretName']}")
        for c in _containers(obj):
            cw = f"{where} container {c['name']}"
            ports = {p.get("name") for p in c.get("ports", [])} | {
                p["containerPort"] for p in c.get("ports", [])}
            for probe in ("readinessProbe", "livenessProbe"):
                if probe not in c:
                    found.append(f"{cw}: no {probe}")
                    continue
                for action in ("httpGet", "tcpSocket"):
                    if action in c[probe] and c[probe][action]["port"] not in ports:
                        found.append(f"{cw}: {probe} on port {c[probe][action]['port']}, "
                                     "which the container does not declare")
            requests = c.get("resources", {}).get("requests", {})
            if not {"cpu", "memory"} <= set(requests):
                found.append(f"{cw}: no cpu and memory requests")
            if ":" not in c["image"].rsplit("/", 1)[-1]:
                found.append(f"{cw}: image {c['image']} has no tag (add it to images:)")
            for mount in c.get("volumeMounts", []):
                if mount["name"] not in volumes and mount["name"] not in templates:
                    found.append(f"{cw}: mounts {mount['name']}, which is no volume")
                elif "subPath" in mount and "configMap" in volumes.get(mount["name"], {}):
                    cm = configmaps.get(volumes[mount["name"]]["configMap"]["name"], {})
                    if mount["subPath"] not in cm.get("data", {}):
                        found.append(f"{cw}: {mount['subPath']} is no key of its ConfigMap")
            for env in c.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref and ref["key"] not in secrets.get(ref["name"], {}).get("data", {}):
                    found.append(f"{cw}: {env['name']} refers to {ref['name']}/{ref['key']}, "
                                 "which no Secret holds")
                if env["name"].startswith("TESTBED_") and c["name"] == "orchestrator" \
                        and not _settings_field(env["name"]):
                    found.append(f"{cw}: {env['name']} is no setting of "
                                 "orchestrator/settings.py")

    for svc in _by_kind(objects, "Service").values():
        where = f"Service/{svc['metadata']['name']}"
        selector = svc["spec"].get("selector", {})
        backends = [o for o in workloads if all(
            o["spec"]["template"]["metadata"].get("labels", {}).get(k) == v
            for k, v in selector.items())]
        if not backends:
            found.append(f"{where}: its selector {selector} matches no workload")
            continue
        declared = {(p.get("name"), p["containerPort"], p.get("protocol", "TCP"))
                    for o in backends for c in _containers(o) for p in c.get("ports", [])}
        for port in svc["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            protocol = port.get("protocol", "TCP")
            if not any(target in (name, number) and protocol == proto
                       for name, number, proto in declared):
                found.append(f"{where}: port {port['port']}/{protocol} targets {target}, "
                             "which no container of its workload declares")
    return found


@pytest.fixture(scope="module")
def objects() -> list[Obj]:
    return render(BASE)


def test_every_object_loads_into_the_clients_models_and_holds_together(
        objects: list[Obj]) -> None:
    kinds = {o["kind"] for o in objects}
    assert {"Namespace", "Deployment", "StatefulSet", "Service", "ConfigMap", "Secret",
            "PersistentVolumeClaim"} <= kinds
    assert problems(objects) == []
    assert all(o["metadata"].get("namespace") == "testbed"
               for o in objects if o["kind"] != "Namespace")


def test_the_control_plane_is_all_there(objects: list[Obj]) -> None:
    workloads = {o["metadata"]["name"]: o["kind"] for o in objects if o["kind"] in WORKLOADS}
    assert workloads == {"orchestrator": "Deployment", "postgres": "StatefulSet",
                         "influxdb": "StatefulSet", "server": "Deployment",
                         "prometheus": "Deployment", "alertmanager": "Deployment"}
    assert set(_by_kind(objects, "Service")) == set(workloads)


def test_the_orchestrator_runs_replicas_on_shared_state(objects: list[Obj]) -> None:
    deployment = _by_kind(objects, "Deployment")["orchestrator"]
    # Several: the loops run under a lease and uploads under advisory locks
    # (deploy/kubernetes/orchestrator.yaml, docs/scale.md); below, what they share.
    assert deployment["spec"]["replicas"] >= 2
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/healthz"
    # The archive and the uploads are on a volume every replica mounts, on any node.
    (volume,) = deployment["spec"]["template"]["spec"]["volumes"]
    claim = _by_kind(objects, "PersistentVolumeClaim")[volume["persistentVolumeClaim"]["claimName"]]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    env = {e["name"]: e for e in container["env"]}
    (mount,) = container["volumeMounts"]
    for name in ("TESTBED_ARCHIVE_DIR", "TESTBED_UPLOAD_DIR"):
        assert Path(env[name]["value"]).is_relative_to(mount["mountPath"])
    # Tokens and the database URL come from the Secret, never from the manifest.
    for name in ("TESTBED_ADMIN_TOKEN", "TESTBED_METRICS_TOKEN", "TESTBED_DATABASE_URL"):
        assert "secretKeyRef" in env[name]["valueFrom"], name
    # ... and the URL reaches the PostgreSQL Service, as its user and database.
    url = urlsplit(_secret_value(objects, env["TESTBED_DATABASE_URL"]["valueFrom"]["secretKeyRef"]))
    assert url.scheme == "postgresql+psycopg"
    postgres = _by_kind(objects, "Service")["postgres"]["spec"]["ports"][0]["port"]
    assert (url.hostname, url.port, url.username, url.path) == ("postgres", postgres,
                                                               "testbed", "/testbed")
    influx = urlsplit(env["TESTBED_INFLUX__URL"]["value"])
    assert influx.port in {p["port"] for p in _by_kind(objects, "Service")[influx.hostname]
                           ["spec"]["ports"]}


def test_prometheus_scrapes_services_that_exist_with_the_compose_rules(
        objects: list[Obj]) -> None:
    configmaps = _by_kind(objects, "ConfigMap")
    config = yaml.safe_load(configmaps["prometheus-config"]["data"]["prometheus.yml"])
    services = _by_kind(objects, "Service")
    targets = [t for job in config["scrape_configs"] for s in job["static_configs"]
               for t in s["targets"]]
    targets += [t for a in config["alerting"]["alertmanagers"] for s in a["static_configs"]
                for t in s["targets"]]
    for target in targets:
        host, _, port = target.partition(":")
        assert int(port) in {p["port"] for p in services[host]["spec"]["ports"]}, target
    # Every rule file of the compose stack, unchanged: one copy of the rules.
    rules = REPO / "deploy" / "prometheus" / "rules"
    assert configmaps["prometheus-rules"]["data"] == {
        p.name: p.read_text() for p in sorted(rules.glob("*.yml"))}
    assert config["rule_files"] == ["/etc/prometheus/rules/*.yml"]


def test_no_real_secret_is_committed() -> None:
    ignored = (REPO / ".gitignore").read_text().splitlines()
    assert "deploy/kubernetes/secrets.env" in ignored
    example = (BASE / "secrets.env.example").read_text()
    values = [line.partition("=")[2] for line in example.splitlines()
              if line and not line.startswith("#")]
    assert values and all("replace-me" in v for v in values)
    # The orchestrator refuses the placeholder in production, so a forgotten one stops it.
    with pytest.raises(ValueError, match="TESTBED_ADMIN_TOKEN"):
        Settings(environment="production", admin_token="replace-me")


def test_every_image_override_is_used(objects: list[Obj]) -> None:
    images = yaml.safe_load((BASE / "kustomization.yaml").read_text())["images"]
    used = {c["image"].split(":")[0] for o in objects for c in _containers(o)}
    assert {i.get("newName", i["name"]) for i in images} == used


# --- the stores admit the orchestrator alone ---------------------------------------------

#: Each store's workload and the one workload whose pods may connect to it.
STORES = {"postgres": "orchestrator", "influxdb": "orchestrator"}


def _selects(selector: Obj, labels: dict[str, str]) -> bool:
    """Whether a label selector with ``matchLabels`` only (the manifests use no
    ``matchExpressions``; one is a problem below, not guessed at) selects ``labels``. An
    empty selector selects every pod, as Kubernetes reads it."""
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def _pod_labels(workload: Obj) -> dict[str, str]:
    labels: dict[str, str] = workload["spec"]["template"]["metadata"].get("labels", {})
    return labels


def store_policy_problems(objects: list[Obj]) -> list[str]:
    """Why a store could be reached by more than its one client, one line each: each
    store's pods selected by an Ingress NetworkPolicy; every rule of every policy that
    selects them admits only pods of the same namespace that are the client's pods (no
    rule without ``from``, no namespace or address peer), on the store's own ports."""
    found: list[str] = []
    workloads = {o["metadata"]["name"]: o for o in objects if o["kind"] in WORKLOADS}
    policies = _by_kind(objects, "NetworkPolicy")
    for store, client in STORES.items():
        pods = _pod_labels(workloads[store])
        ports = {v for c in _containers(workloads[store]) for p in c.get("ports", [])
                 for v in (p.get("name"), p["containerPort"]) if v is not None}
        mine = {name: p for name, p in policies.items()
                if p["metadata"].get("namespace") == workloads[store]["metadata"].get(
                    "namespace") and _selects(p["spec"]["podSelector"], pods)}
        if not any("Ingress" in p["spec"].get("policyTypes", ["Ingress"])
                   for p in mine.values()):
            found.append(f"{store}: no Ingress NetworkPolicy selects its pods: any pod "
                         "may connect")
        for name, policy in mine.items():
            where = f"NetworkPolicy/{name}"
            if "matchExpressions" in policy["spec"]["podSelector"]:
                found.append(f"{where}: matchExpressions, which this check does not read")
            others = [w for w, o in workloads.items() if w != store
                      and _selects(policy["spec"]["podSelector"], _pod_labels(o))]
            if others:
                found.append(f"{where}: also selects the pods of {sorted(others)}")
            for i, rule in enumerate(policy["spec"].get("ingress", [])):
                if not rule.get("from"):
                    found.append(f"{where}: ingress rule {i} has no `from`: every "
                                 "source may connect")
                for peer in rule.get("from", []):
                    if set(peer) != {"podSelector"}:
                        found.append(f"{where}: ingress rule {i} admits "
                                     f"{sorted(set(peer) - {'podSelector'})}, not only "
                                     f"{client}'s pods")
                        continue
                    if "matchExpressions" in peer["podSelector"]:
                        found.append(f"{where}: matchExpressions, which this check "
                                     "does not read")
                    admitted = sorted(w for w, o in workloads.items()
                                      if _selects(peer["podSelector"], _pod_labels(o)))
                    if admitted != [client]:
                        found.append(f"{where}: ingress rule {i} admits the pods of "
                                     f"{admitted}, not {client}'s alone")
                if not rule.get("ports"):
                    found.append(f"{where}: ingress rule {i} opens every port")
                for port in rule.get("ports", []):
                    if port.get("port") not in ports:
                        found.append(f"{where}: ingress rule {i} opens port "
                                     f"{port.get('port')}, which {store} does not declare")
    return found


def test_the_stores_admit_only_the_orchestrators_pods(objects: list[Obj]) -> None:
    assert set(_by_kind(objects, "NetworkPolicy")) == {"postgres-from-orchestrator",
                                                       "influxdb-from-orchestrator"}
    assert store_policy_problems(objects) == []


def _policy(objects: list[Obj], name: str) -> Obj:
    return _by_kind(objects, "NetworkPolicy")[name]["spec"]  # type: ignore[no-any-return]


POLICY_BREAKAGES: list[tuple[str, Callable[[list[Obj]], None], str]] = [
    ("no policy for InfluxDB",
     lambda o: o.remove(next(x for x in o if x["metadata"]["name"]
                             == "influxdb-from-orchestrator")),
     "influxdb: no Ingress NetworkPolicy selects its pods"),
    ("the server's pods admitted",
     lambda o: _policy(o, "postgres-from-orchestrator")["ingress"][0]["from"][0][
         "podSelector"]["matchLabels"].update({"app.kubernetes.io/name": "server"}),
     "admits the pods of ['server'], not orchestrator's alone"),
    ("every pod of the namespace admitted",
     lambda o: _policy(o, "influxdb-from-orchestrator")["ingress"][0]["from"][0].update(
         {"podSelector": {}}),
     "not orchestrator's alone"),
    ("another namespace admitted",
     lambda o: _policy(o, "influxdb-from-orchestrator")["ingress"][0]["from"][0].update(
         {"namespaceSelector": {}}),
     "admits ['namespaceSelector']"),
    ("an address block admitted",
     lambda o: _policy(o, "postgres-from-orchestrator")["ingress"][0]["from"].append(
         {"ipBlock": {"cidr": "0.0.0.0/0"}}),
     "admits ['ipBlock']"),
    ("a rule from anywhere",
     lambda o: _policy(o, "postgres-from-orchestrator")["ingress"].append({}),
     "has no `from`"),
    ("the policy on the wrong pods",
     lambda o: _policy(o, "influxdb-from-orchestrator")["podSelector"][
         "matchLabels"].update({"app.kubernetes.io/name": "prometheus"}),
     "influxdb: no Ingress NetworkPolicy selects its pods"),
    ("a port the store does not have",
     lambda o: _policy(o, "postgres-from-orchestrator")["ingress"][0]["ports"][0].update(
         {"port": 8086}),
     "opens port 8086"),
]


@pytest.mark.parametrize(("what", "mutate", "expected"), POLICY_BREAKAGES,
                         ids=[b[0] for b in POLICY_BREAKAGES])
def test_a_store_policy_that_admits_more_is_caught(
        objects: list[Obj], what: str, mutate: Callable[[list[Obj]], None],
        expected: str) -> None:
    broken = copy.deepcopy(objects)
    mutate(broken)
    found = store_policy_problems(broken)
    assert any(expected in p for p in found), (what, found)


def test_the_store_users_passwords_come_from_the_one_secret(objects: list[Obj]) -> None:
    """InfluxDB's pod makes its users with the passwords the orchestrator signs in with:
    the same Secret keys, never a value in a manifest."""
    env = {c["name"]: {e["name"]: e for e in c.get("env", [])}
           for o in objects for c in _containers(o)}
    pairs = {"TESTBED_INFLUX__WRITER__PASSWORD": "INFLUXDB_WRITE_USER_PASSWORD",
             "TESTBED_INFLUX__READER__PASSWORD": "INFLUXDB_READ_USER_PASSWORD"}
    for mine, theirs in pairs.items():
        assert (env["orchestrator"][mine]["valueFrom"]["secretKeyRef"]
                == env["influxdb"][theirs]["valueFrom"]["secretKeyRef"])
    assert "secretKeyRef" in env["influxdb"]["INFLUXDB_ADMIN_PASSWORD"]["valueFrom"]
    assert not any("INFLUXDB_ADMIN" in name for name in env["orchestrator"])
    for role, user in (("WRITER", "WRITE_USER"), ("READER", "READ_USER")):
        assert (env["orchestrator"][f"TESTBED_INFLUX__{role}__USERNAME"]["value"]
                == env["influxdb"][f"INFLUXDB_{user}"]["value"])


# --- the checks catch what they claim to ------------------------------------------------

def _container(objects: list[Obj], name: str) -> Obj:
    return next(c for o in objects for c in _containers(o) if c["name"] == name)


def _set(path: str, value: Any) -> Callable[[list[Obj]], None]:
    def mutate(objects: list[Obj]) -> None:
        name, *keys, last = path.split(".")
        target: Any = _container(objects, name)
        for key in keys:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if value is KeyError:
            del target[last]
        else:
            target[last] = value
    return mutate


BREAKAGES = [
    ("a misspelt field", _set("orchestrator.readinessProbe.periodSecond", 5),
     "periodSecond: not a field of V1Probe"),
    ("a wrong type", _set("server.ports.0.containerPort", "5201"),
     "containerPort: int expected"),
    ("a missing required field", _set("postgres.name", None),
     "the client's model refuses it"),
    ("no liveness probe", _set("influxdb.livenessProbe", KeyError), "no livenessProbe"),
    ("no requests", _set("alertmanager.resources", KeyError), "no cpu and memory requests"),
    ("a Secret that is not there", _set("orchestrator.env.1.valueFrom",
                                        {"secretKeyRef": {"name": "other", "key": "k"}}),
     "which no Secret holds"),
    ("a setting that does not exist", _set("orchestrator.env.0.name", "TESTBED_ENVIRONMNT"),
     "TESTBED_ENVIRONMNT is no setting"),
    ("a nested setting that does not exist",
     _set("orchestrator.env.7.name", "TESTBED_INFLUX__URI"), "TESTBED_INFLUX__URI is no"),
    ("a renamed container port", _set("prometheus.ports.0.name", "web"),
     "Service/prometheus: port 9090/TCP targets http"),
    ("a ConfigMap key that is not there",
     _set("prometheus.volumeMounts.0.subPath", "prom.yml"), "prom.yml is no key"),
]


@pytest.mark.parametrize(("what", "mutate", "expected"), BREAKAGES,
                         ids=[b[0] for b in BREAKAGES])
def test_a_broken_manifest_is_caught(objects: list[Obj], what: str,
                                     mutate: Callable[[list[Obj]], None],
                                     expected: str) -> None:
    broken = copy.deepcopy(objects)
    mutate(broken)
    found = problems(broken)
    assert any(expected in p for p in found), (what, found)


def test_a_claim_or_configmap_that_is_not_there_is_caught(objects: list[Obj]) -> None:
    broken = [o for o in copy.deepcopy(objects)
              if o["metadata"]["name"] not in {"orchestrator-data", "prometheus-rules"}]
    found = problems(broken)
    assert "Deployment/orchestrator: no PersistentVolumeClaim orchestrator-data" in found
    assert "Deployment/prometheus: no ConfigMap prometheus-rules" in found


def test_a_generator_file_outside_its_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "k").mkdir()
    (tmp_path / "rules.yml").write_text("groups: []\n")
    (tmp_path / "k" / "kustomization.yaml").write_text(
        "configMapGenerator:\n  - name: x\n    files: [../rules.yml]\n")
    with pytest.raises(AssertionError, match="outside the kustomization's folder"):
        render(tmp_path / "k")
