"""deploy/k8s's namespaces, checked without a cluster: each enforces the Pod Security
Standard it should (restricted for the services, privileged only for the runner's and
the seccomp installer's, each holding that one workload), every pod passes the level of
the namespace it lands in (tests/pod_security.py, proved able to fail below), and the
names that cross namespaces (NetworkPolicy namespace selectors, `<svc>.<ns>.svc` in
settings) point where the traffic must go and are allowed there."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from kustomize_render import CLUSTER_SCOPED, Doc, build, env_file
from pod_security import LATEST, WORKLOADS, Level, Pod, enforced, pod_of, violations

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
TREES = ("base", "overlays/dev", "overlays/prod")

SERVICES_NS, RUNNER_NS, INSTALLER_NS = "tether", "tether-runner", "tether-seccomp"
LEVELS: dict[str, Level] = {
    SERVICES_NS: "restricted",
    RUNNER_NS: "privileged",
    INSTALLER_NS: "privileged",
}
# The one workload each privileged namespace exists for.
ALONE = {
    RUNNER_NS: {("Deployment", "tether-tools-runner")},
    INSTALLER_NS: {("DaemonSet", "tether-seccomp-installer")},
}
# Why each is privileged, exactly: the baseline checks its pod fails at today's policy.
# The runner: AppArmor Unconfined (bubblewrap mounts; the runtime's profile denies it).
# Its procMount: Unmasked is admitted by baseline from v1.35 (hostUsers: false).
NEEDS_PRIVILEGED = {
    "tether-tools-runner": {"appArmorProfile"},
    "tether-seccomp-installer": {"hostPathVolumes"},
}
# Namespaces named by selectors that are not ours: cluster DNS and the ingress controller.
EXTERNAL_NAMESPACES = {"kube-system", "ingress-nginx"}
# Chart releases and services the manifests name but do not make, and their namespace.
RELEASES = {("nats", SERVICES_NS), ("otel-collector", SERVICES_NS), ("postgres", SERVICES_NS)}
# The pods behind each: the label the charts give them (what the policies select).
RELEASE_PODS = {
    "nats": "nats",
    "otel-collector": "opentelemetry-collector",
    "postgres": "postgresql",
}
SVC_NAME = re.compile(r"\b([a-z0-9-]+)\.([a-z0-9-]+)\.svc\b")


@pytest.fixture(scope="module", params=TREES)
def tree(request: pytest.FixtureRequest) -> list[Doc]:
    docs: list[Doc] = build(K8S / request.param)
    return docs


@pytest.fixture(scope="module")
def base() -> list[Doc]:
    docs: list[Doc] = build(K8S / "base")
    return docs


def namespaces(docs: list[Doc]) -> dict[str, Doc]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "Namespace"}


def workloads(docs: list[Doc]) -> list[Doc]:
    return [d for d in docs if d["kind"] in WORKLOADS]


def find(docs: list[Doc], kind: str, name: str) -> Doc:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


# ---- namespaces and levels ----------------------------------------------------------


def test_no_kustomization_sets_a_namespace() -> None:
    """`namespace:` would put every resource, the runner and the installer included, in
    one namespace (and rename the Namespace objects to it)."""
    found = sorted(K8S.rglob("kustomization.yaml"))
    assert len(found) >= 3
    for path in found:
        assert "namespace" not in yaml.safe_load(path.read_text()), path


def test_every_object_names_a_namespace_of_its_tree(tree: list[Doc]) -> None:
    """Nothing lands in whatever namespace kubectl's context happens to name."""
    for doc in tree:
        if doc["kind"] not in CLUSTER_SCOPED:
            assert doc["metadata"].get("namespace") in namespaces(tree), doc["metadata"]


def test_each_namespace_enforces_its_level(tree: list[Doc]) -> None:
    assert {name: enforced(ns) for name, ns in namespaces(tree).items()} == LEVELS


def test_a_privileged_namespace_holds_only_its_one_workload(tree: list[Doc]) -> None:
    assert set(namespaces(tree)) == set(LEVELS)
    for name, ns in namespaces(tree).items():
        held = {(w["kind"], w["metadata"]["name"]) for w in workloads(tree) if namespace(w) == name}
        if enforced(ns) == "privileged":
            assert held == ALONE[name], name
        else:
            assert not held & set().union(*ALONE.values()), name


def namespace(doc: Doc) -> str:
    found: str = doc["metadata"]["namespace"]
    return found


def test_every_pod_passes_the_level_of_its_namespace(tree: list[Doc]) -> None:
    spaces = namespaces(tree)
    assert len(workloads(tree)) == 6
    for workload in workloads(tree):
        level = enforced(spaces[namespace(workload)])
        assert violations(pod_of(workload), level) == [], workload["metadata"]["name"]


@pytest.mark.parametrize("name", sorted(NEEDS_PRIVILEGED))
def test_a_privileged_namespace_is_needed_for_exactly_these_fields(
    tree: list[Doc], name: str
) -> None:
    """Said precisely: what baseline refuses in the pod, and nothing more. A new
    loosening in the runner or the installer fails here until it is argued for."""
    pod = pod_of(next(w for w in workloads(tree) if w["metadata"]["name"] == name))
    assert {v.check for v in violations(pod, "baseline")} == NEEDS_PRIVILEGED[name]


def test_the_runner_needs_privileged_only_for_apparmor_from_policy_v1_35(
    base: list[Doc],
) -> None:
    pod = pod_of(find(base, "Deployment", "tether-tools-runner"))
    assert pod.spec["hostUsers"] is False
    assert {v.check for v in violations(pod, "baseline", (1, 34))} == {
        "appArmorProfile",
        "procMount",
    }
    # With an AppArmor profile loaded on the nodes (type Localhost) instead, baseline
    # would admit it (deploy/README.md).
    localhost = copy.deepcopy(pod)
    (container,) = localhost.spec["containers"]
    container["securityContext"]["appArmorProfile"] = {
        "type": "Localhost",
        "localhostProfile": "tether-bwrap",
    }
    assert violations(localhost, "baseline", LATEST) == []


# ---- the checks can fail ------------------------------------------------------------

Mutation = Callable[[Pod], None]


def main(pod: Pod) -> Doc:
    found: Doc = pod.spec["containers"][0]
    return found


def context(pod: Pod) -> Doc:
    found: Doc = main(pod).setdefault("securityContext", {})
    return found


def _set(path: str, value: Any) -> Mutation:
    """A mutation setting `path` (dots; `pod.` the pod spec, `c.` the main container's
    security context, `m.` the pod metadata)."""
    where, *keys = path.split(".")

    def mutate(pod: Pod) -> None:
        node: Doc = {"pod": pod.spec, "c": context(pod), "m": pod.metadata}[where]
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value

    return mutate


def _drop(path: str) -> Mutation:
    where, *keys = path.split(".")

    def mutate(pod: Pod) -> None:
        node: Doc = {"pod": pod.spec, "c": context(pod)}[where]
        for key in keys[:-1]:
            node = node[key]
        del node[keys[-1]]

    return mutate


def _add_volume(source: Doc) -> Mutation:
    return lambda pod: pod.spec["volumes"].append({"name": "extra"} | source)


def _host_port(pod: Pod) -> None:
    main(pod)["ports"][0]["hostPort"] = 8080


def _probe_host(pod: Pod) -> None:
    main(pod)["livenessProbe"]["httpGet"]["host"] = "10.0.0.1"


def _bare_init_container(pod: Pod) -> None:
    pod.spec["initContainers"] = [{"name": "init", "image": "busybox"}]


BASELINE_REFUSES: list[tuple[str, Mutation, str]] = [
    ("hostNetwork", _set("pod.hostNetwork", True), "hostNamespaces"),
    ("hostPID", _set("pod.hostPID", True), "hostNamespaces"),
    ("hostIPC", _set("pod.hostIPC", True), "hostNamespaces"),
    ("privileged", _set("c.privileged", True), "privileged"),
    ("cap SYS_ADMIN", _set("c.capabilities.add", ["SYS_ADMIN"]), "capabilities_baseline"),
    ("cap NET_RAW", _set("c.capabilities.add", ["NET_RAW"]), "capabilities_baseline"),
    ("hostPath", _add_volume({"hostPath": {"path": "/"}}), "hostPathVolumes"),
    ("hostPort", _host_port, "hostPorts"),
    ("apparmor field", _set("c.appArmorProfile", {"type": "Unconfined"}), "appArmorProfile"),
    (
        "apparmor annotation",
        _set("m.annotations", {"container.apparmor.security.beta.kubernetes.io/x": "unconfined"}),
        "appArmorProfile",
    ),
    ("selinux type", _set("c.seLinuxOptions", {"type": "spc_t"}), "seLinuxOptions"),
    ("selinux user", _set("c.seLinuxOptions", {"user": "system_u"}), "seLinuxOptions"),
    ("procMount", _set("c.procMount", "Unmasked"), "procMount"),
    ("seccomp off", _set("c.seccompProfile", {"type": "Unconfined"}), "seccompProfile_baseline"),
    (
        "sysctl",
        _set("pod.securityContext.sysctls", [{"name": "kernel.msgmax", "value": "1"}]),
        "sysctls",
    ),
    ("probe host", _probe_host, "hostProbesAndHostLifecycle"),
    ("hostProcess", _set("c.windowsOptions", {"hostProcess": True}), "hostProcess"),
]
RESTRICTED_ONLY: list[tuple[str, Mutation, str]] = [
    ("nfs volume", _add_volume({"nfs": {"server": "x", "path": "/"}}), "restrictedVolumes"),
    ("escalation unset", _drop("c.allowPrivilegeEscalation"), "allowPrivilegeEscalation"),
    ("escalation on", _set("c.allowPrivilegeEscalation", True), "allowPrivilegeEscalation"),
    ("non-root false", _set("c.runAsNonRoot", False), "runAsNonRoot"),
    ("root user", _set("c.runAsUser", 0), "runAsUser"),
    ("pod root user", _set("pod.securityContext.runAsUser", 0), "runAsUser"),
    ("no seccomp", _drop("pod.securityContext.seccompProfile"), "seccompProfile_restricted"),
    ("keeps capabilities", _drop("c.capabilities.drop"), "capabilities_restricted"),
    ("cap CHOWN", _set("c.capabilities.add", ["CHOWN"]), "capabilities_restricted"),
    ("bare init container", _bare_init_container, "allowPrivilegeEscalation"),
]


@pytest.fixture
def restricted_pod(base: list[Doc]) -> Pod:
    pod = pod_of(find(base, "Deployment", "tether-brain"))
    assert violations(pod, "restricted") == []
    return Pod(copy.deepcopy(pod.metadata), copy.deepcopy(pod.spec))


@pytest.mark.parametrize(
    ("mutate", "check"), [c[1:] for c in BASELINE_REFUSES], ids=[c[0] for c in BASELINE_REFUSES]
)
def test_baseline_refuses(restricted_pod: Pod, mutate: Mutation, check: str) -> None:
    mutate(restricted_pod)
    refusing: tuple[Level, ...] = ("baseline", "restricted")
    for level in refusing:
        assert check in {v.check for v in violations(restricted_pod, level)}, level
    assert violations(restricted_pod, "privileged") == []


@pytest.mark.parametrize(
    ("mutate", "check"), [c[1:] for c in RESTRICTED_ONLY], ids=[c[0] for c in RESTRICTED_ONLY]
)
def test_restricted_refuses_what_baseline_admits(
    restricted_pod: Pod, mutate: Mutation, check: str
) -> None:
    mutate(restricted_pod)
    assert check in {v.check for v in violations(restricted_pod, "restricted")}
    assert violations(restricted_pod, "baseline") == []


def test_procmount_is_admitted_by_baseline_only_in_a_user_namespace_from_v1_35(
    restricted_pod: Pod,
) -> None:
    context(restricted_pod)["procMount"] = "Unmasked"
    restricted_pod.spec["hostUsers"] = False
    assert violations(restricted_pod, "baseline", (1, 35)) == []
    assert {v.check for v in violations(restricted_pod, "baseline", (1, 34))} == {"procMount"}
    restricted_pod.spec["hostUsers"] = True
    assert {v.check for v in violations(restricted_pod, "baseline", (1, 35))} == {"procMount"}


# ---- the NATS release in the restricted namespace -----------------------------------


def test_the_nats_release_passes_restricted() -> None:
    """The chart's pod as the values shape it: the pod's and both containers' security
    contexts come from `merge`; the chart itself sets none, and nats-box is off."""
    values: dict[str, Any] = yaml.safe_load((K8S / "nats/values.yaml").read_text())
    assert values["natsBox"]["enabled"] is False
    assert not values.get("promExporter", {}).get("enabled")
    spec = copy.deepcopy(values["podTemplate"]["merge"]["spec"])
    spec["containers"] = [
        {"name": "nats", **values["container"]["merge"]},
        {"name": "reloader", **values["reloader"]["merge"]},
    ]
    spec["volumes"] = [
        {"name": "config", "configMap": {"name": "nats-config"}},
        {"name": "pid", "emptyDir": {}},
        *(op["value"] for op in values["podTemplate"]["patch"]),
    ]
    assert violations(Pod({}, spec), LEVELS[SERVICES_NS]) == []


# ---- names across namespaces --------------------------------------------------------


def _peers(policy: Doc, direction: str) -> list[tuple[Doc, Doc]]:
    """(peer, rule) for every peer of the policy's ingress (`from`) or egress (`to`)."""
    side = "from" if direction == "ingress" else "to"
    return [
        (peer, rule)
        for rule in policy["spec"].get(direction) or []
        for peer in rule.get(side) or []
    ]


def test_every_namespace_a_policy_names_exists(tree: list[Doc]) -> None:
    known = set(namespaces(tree)) | EXTERNAL_NAMESPACES
    named = set()
    for policy in (d for d in tree if d["kind"] == "NetworkPolicy"):
        for direction in ("ingress", "egress"):
            for peer, _rule in _peers(policy, direction):
                labels = (peer.get("namespaceSelector") or {}).get("matchLabels") or {}
                assert set(labels) <= {"kubernetes.io/metadata.name"}, policy["metadata"]
                named |= set(labels.values())
    assert RUNNER_NS not in named  # nothing needs to reach the runner
    assert SERVICES_NS in named  # the runner reaches NATS, the collector, PostgreSQL there
    assert named <= known, named - known


def references(pod: Pod) -> list[tuple[str, str, bool]]:
    """(kind, name, optional) of every object the pod reads: env, envFrom, volumes."""
    found = []
    for c in pod.containers():
        for source in c.get("envFrom") or []:
            for key, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
                if key in source:
                    found.append((kind, source[key]["name"], bool(source[key].get("optional"))))
        for entry in c.get("env") or []:
            for key, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
                ref = (entry.get("valueFrom") or {}).get(key)
                if ref:
                    found.append((kind, ref["name"], bool(ref.get("optional"))))
    for volume in pod.spec.get("volumes") or []:
        if "configMap" in volume:
            found.append(("ConfigMap", volume["configMap"]["name"], False))
        if "secret" in volume:
            found.append(("Secret", volume["secret"]["secretName"], False))
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            found.append(("PersistentVolumeClaim", claim, False))
    return found


def test_every_object_a_pod_reads_is_in_its_namespace(tree: list[Doc]) -> None:
    """ConfigMaps, Secrets and claims are read in the pod's own namespace only."""
    present = {
        (namespace(d), d["kind"], d["metadata"]["name"])
        for d in tree
        if "namespace" in d["metadata"]
    }
    seen = 0
    for workload in workloads(tree):
        for kind, name, optional in references(pod_of(workload)):
            assert optional or (namespace(workload), kind, name) in present, (
                workload["metadata"],
                kind,
                name,
            )
            seen += 1
    assert seen > 20


def settings_of(docs: list[Doc]) -> list[tuple[str, str, str]]:
    """(namespace, key, value) of every ConfigMap and Secret entry."""
    return [
        (namespace(d), key, str(value))
        for d in docs
        if d["kind"] in ("ConfigMap", "Secret")
        for key, value in ((d.get("data") or {}) | (d.get("stringData") or {})).items()
    ]


def test_every_service_name_in_settings_is_a_service_of_its_namespace(tree: list[Doc]) -> None:
    services = {(namespace(d), d["metadata"]["name"]) for d in tree if d["kind"] == "Service"}
    named = set()
    for _ns, key, value in settings_of(tree):
        for svc, ns in SVC_NAME.findall(value):
            assert ns in namespaces(tree), (key, value)
            assert (ns, svc) in services or (svc, ns) in RELEASES, (key, value)
            named.add(svc)
    assert {"nats", "otel-collector", "postgres"} <= named


def selects(selector: Doc, labels: dict[str, str]) -> bool:
    """A label selector (matchLabels, matchExpressions) applied to `labels`."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        present, value = expr["key"] in labels, labels.get(expr["key"])
        ok = {
            "In": present and value in expr.get("values", []),
            "NotIn": not present or value not in expr.get("values", []),
            "Exists": present,
            "DoesNotExist": not present,
        }[expr["operator"]]
        if not ok:
            return False
    return True


def may_reach(
    docs: list[Doc], workload: Doc, target_ns: str, target_labels: dict[str, str], port: int
) -> bool:
    """Whether the policies of the workload's namespace let its pods open TCP `port` to
    pods labelled `target_labels` in `target_ns` (the other side's ingress is not ours:
    the charts' pods are selected by no policy here)."""
    labels = pod_of(workload).metadata.get("labels") or {}
    for policy in (d for d in docs if d["kind"] == "NetworkPolicy"):
        if namespace(policy) != namespace(workload) or not selects(
            policy["spec"]["podSelector"], labels
        ):
            continue
        for peer, rule in _peers(policy, "egress"):
            ns_labels = (peer.get("namespaceSelector") or {}).get("matchLabels")
            peer_ns = ns_labels["kubernetes.io/metadata.name"] if ns_labels else namespace(policy)
            ports = {
                p["port"] for p in rule.get("ports") or [] if p.get("protocol", "TCP") == "TCP"
            }
            if (
                peer_ns == target_ns
                and "podSelector" in peer
                and selects(peer["podSelector"], target_labels)
                and port in ports
            ):
                return True
    return False


ENDPOINTS = ("TETHER_NATS_URL", "OTEL_EXPORTER_OTLP_ENDPOINT", "TETHER_DATABASE_URL")


def environment(docs: list[Doc], workload: Doc) -> dict[str, str]:
    """What the workload's container reads through envFrom, from its own namespace."""
    (container,) = pod_of(workload).spec["containers"]
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        ref = source.get("configMapRef") or source["secretRef"]
        kind = "ConfigMap" if "configMapRef" in source else "Secret"
        for doc in docs:
            if (doc["kind"], doc["metadata"]["name"]) == (kind, ref["name"]) and namespace(
                doc
            ) == namespace(workload):
                env |= (doc.get("data") or {}) | (doc.get("stringData") or {})
    return env


def test_each_pod_may_reach_what_its_settings_name(tree: list[Doc]) -> None:
    """NATS, the collector and PostgreSQL by `<svc>.<ns>.svc`: a name every namespace
    resolves alike, in the namespace where the release runs, and allowed by the
    policies of the pod's own namespace (the runner's crosses to namespace tether)."""
    checked = []
    for workload in workloads(tree):
        env = environment(tree, workload)
        for key in (k for k in ENDPOINTS if k in env):
            url = urlsplit(env[key])
            assert url.hostname is not None
            assert url.port is not None
            svc, ns, suffix = url.hostname.split(".")
            assert suffix == "svc"
            assert (svc, ns) in RELEASES, env[key]
            target = {"app.kubernetes.io/name": RELEASE_PODS[svc]}
            assert may_reach(tree, workload, ns, target, url.port), (workload["metadata"], key)
            checked.append((workload["metadata"]["name"], key))
    # Bus and telemetry for all five services, the database for all but the gateway.
    assert len(checked) == 5 * 2 + 4, checked


def test_reachability_is_judged_by_the_pods_own_namespace_and_policies(
    base: list[Doc],
) -> None:
    runner = find(base, "Deployment", "tether-tools-runner")
    nats = {"app.kubernetes.io/name": "nats"}
    assert may_reach(base, runner, SERVICES_NS, nats, 4222)
    assert not may_reach(base, runner, RUNNER_NS, nats, 4222)  # no NATS beside the runner
    assert not may_reach(base, runner, SERVICES_NS, nats, 6222)  # the cluster port
    assert not may_reach(base, runner, SERVICES_NS, {"app.kubernetes.io/name": "x"}, 4222)
    policy = "tether-runner-bus-dns-telemetry"
    without = [d for d in base if d["metadata"]["name"] != policy]
    assert not may_reach(without, runner, SERVICES_NS, nats, 4222)


def test_one_settings_file_feeds_both_namespaces(tree: list[Doc]) -> None:
    config = env_file(K8S / "base" / "config.env")
    made = [
        d for d in tree if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "tether-config"
    ]
    assert {namespace(d) for d in made} == {SERVICES_NS, RUNNER_NS}
    first, second = (d["data"] for d in made)
    assert first == second
    assert first.keys() == config.keys()
