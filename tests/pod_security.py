"""The Pod Security Standards (baseline and restricted), checked on a pod template as
pod-security-admission checks it, without a cluster. Each check carries the id of the
admission controller's check (staging/src/k8s.io/pod-security-admission/policy) and
reads the fields that check reads, in the pod and in every container, init container
and ephemeral container.

Deliberately no stricter or looser than the controller where our manifests could reach:
a pod with `hostUsers: false` may set `procMount: Unmasked` under baseline from policy
version v1.35 (`procMount_baseline`), never before. The controller's other relaxations
for such pods (runAsNonRoot, runAsUser under restricted) are not modelled: a pod judged
here is held to the stricter rule."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

Doc = dict[str, Any]
Level = Literal["privileged", "baseline", "restricted"]
Version = tuple[int, int]
LATEST: Version = (1, 35)
LEVEL_LABEL = "pod-security.kubernetes.io/enforce"

# Baseline's capabilities: Docker's default set; restricted: NET_BIND_SERVICE only.
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})
RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod template: its metadata and spec."""

    metadata: Doc
    spec: Doc

    def containers(self) -> Iterator[Doc]:
        for key in ("initContainers", "containers", "ephemeralContainers"):
            yield from self.spec.get(key) or []

    def context(self) -> Doc:
        found: Doc = self.spec.get("securityContext") or {}
        return found

    @staticmethod
    def of(container: Doc) -> Doc:
        found: Doc = container.get("securityContext") or {}
        return found


@dataclass(frozen=True, slots=True)
class Violation:
    check: str  # pod-security-admission's check id
    detail: str


Check = Callable[[Pod, Version], list[str]]


def pod_of(workload: Doc) -> Pod:
    """The pod a workload makes (a Pod is its own)."""
    if workload["kind"] == "Pod":
        return Pod(workload.get("metadata") or {}, workload["spec"])
    template = workload["spec"]["template"]
    if workload["kind"] == "CronJob":
        template = workload["spec"]["jobTemplate"]["spec"]["template"]
    return Pod(template.get("metadata") or {}, template["spec"])


WORKLOADS = frozenset(
    {"Pod", "Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job", "CronJob"}
)


# ---- baseline -----------------------------------------------------------------------


def _host_process(pod: Pod, _v: Version) -> list[str]:
    contexts = [pod.context(), *(Pod.of(c) for c in pod.containers())]
    return [
        "windowsOptions.hostProcess"
        for c in contexts
        if (c.get("windowsOptions") or {}).get("hostProcess")
    ]


def _host_namespaces(pod: Pod, _v: Version) -> list[str]:
    return [f"{key}=true" for key in ("hostNetwork", "hostPID", "hostIPC") if pod.spec.get(key)]


def _privileged(pod: Pod, _v: Version) -> list[str]:
    return [c["name"] for c in pod.containers() if Pod.of(c).get("privileged")]


def _capabilities_baseline(pod: Pod, _v: Version) -> list[str]:
    return [
        f"{c['name']} adds {cap}"
        for c in pod.containers()
        for cap in (Pod.of(c).get("capabilities") or {}).get("add") or []
        if cap not in BASELINE_CAPABILITIES
    ]


def _host_path_volumes(pod: Pod, _v: Version) -> list[str]:
    return [v["name"] for v in pod.spec.get("volumes") or [] if "hostPath" in v]


def _host_ports(pod: Pod, _v: Version) -> list[str]:
    return [
        f"{c['name']}:{p['hostPort']}"
        for c in pod.containers()
        for p in c.get("ports") or []
        if p.get("hostPort")
    ]


def _app_armor(pod: Pod, _v: Version) -> list[str]:
    allowed = {"RuntimeDefault", "Localhost"}
    found = []
    for owner, context in [("pod", pod.context())] + [
        (c["name"], Pod.of(c)) for c in pod.containers()
    ]:
        kind = (context.get("appArmorProfile") or {}).get("type")
        if kind is not None and kind not in allowed:
            found.append(f"{owner}: {kind}")
    for key, value in (pod.metadata.get("annotations") or {}).items():
        allowed_value = value in ("", "runtime/default") or value.startswith("localhost/")
        if key.startswith(APPARMOR_ANNOTATION) and not allowed_value:
            found.append(f"{key}={value}")
    return found


def _se_linux(pod: Pod, _v: Version) -> list[str]:
    found = []
    for context in [pod.context(), *(Pod.of(c) for c in pod.containers())]:
        options = context.get("seLinuxOptions") or {}
        if options.get("type", "") not in SELINUX_TYPES:
            found.append(f"type {options['type']}")
        found += [f"{key} set" for key in ("user", "role") if options.get(key)]
    return found


def _proc_mount(pod: Pod, version: Version) -> list[str]:
    if version >= (1, 35) and pod.spec.get("hostUsers") is False:
        return []  # procMount_baseline: a pod in its own user namespace may unmask /proc
    return [
        f"{c['name']}: {Pod.of(c)['procMount']}"
        for c in pod.containers()
        if Pod.of(c).get("procMount") not in (None, "Default")
    ]


def _seccomp_baseline(pod: Pod, _v: Version) -> list[str]:
    contexts = [pod.context(), *(Pod.of(c) for c in pod.containers())]
    return [
        "Unconfined"
        for c in contexts
        if (c.get("seccompProfile") or {}).get("type") == "Unconfined"
    ]


def _sysctls(pod: Pod, _v: Version) -> list[str]:
    return [s["name"] for s in pod.context().get("sysctls") or [] if s["name"] not in SAFE_SYSCTLS]


def _host_probes(pod: Pod, _v: Version) -> list[str]:
    found = []
    for c in pod.containers():
        handlers = [c.get(p) or {} for p in ("livenessProbe", "readinessProbe", "startupProbe")]
        handlers += [(c.get("lifecycle") or {}).get(h) or {} for h in ("postStart", "preStop")]
        for handler in handlers:
            for kind in ("httpGet", "tcpSocket"):
                if (handler.get(kind) or {}).get("host"):
                    found.append(f"{c['name']} {kind}.host")
    return found


# ---- restricted ---------------------------------------------------------------------


def _restricted_volumes(pod: Pod, _v: Version) -> list[str]:
    return [
        v["name"]
        for v in pod.spec.get("volumes") or []
        if not (v.keys() - {"name"}) <= RESTRICTED_VOLUMES
    ]


def _allow_privilege_escalation(pod: Pod, _v: Version) -> list[str]:
    return [
        c["name"]
        for c in pod.containers()
        if Pod.of(c).get("allowPrivilegeEscalation") is not False
    ]


def _run_as_non_root(pod: Pod, _v: Version) -> list[str]:
    pod_says = pod.context().get("runAsNonRoot")
    found = ["pod: runAsNonRoot=false"] if pod_says is False else []
    for c in pod.containers():
        says = Pod.of(c).get("runAsNonRoot")
        if says is False or (says is None and pod_says is not True):
            found.append(f"{c['name']}: runAsNonRoot unset or false")
    return found


def _run_as_user(pod: Pod, _v: Version) -> list[str]:
    contexts = [("pod", pod.context())] + [(c["name"], Pod.of(c)) for c in pod.containers()]
    return [f"{owner}: runAsUser=0" for owner, c in contexts if c.get("runAsUser") == 0]


def _seccomp_restricted(pod: Pod, _v: Version) -> list[str]:
    allowed = {"RuntimeDefault", "Localhost"}
    pod_type = (pod.context().get("seccompProfile") or {}).get("type")
    found = [f"pod: {pod_type}"] if pod_type is not None and pod_type not in allowed else []
    for c in pod.containers():
        kind = (Pod.of(c).get("seccompProfile") or {}).get("type")
        if kind is not None and kind not in allowed:
            found.append(f"{c['name']}: {kind}")
        elif kind is None and pod_type not in allowed:
            found.append(f"{c['name']}: no seccomp profile")
    return found


def _capabilities_restricted(pod: Pod, _v: Version) -> list[str]:
    found = []
    for c in pod.containers():
        capabilities = Pod.of(c).get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            found.append(f"{c['name']} does not drop ALL")
        found += [
            f"{c['name']} adds {cap}"
            for cap in capabilities.get("add") or []
            if cap != "NET_BIND_SERVICE"
        ]
    return found


BASELINE: dict[str, Check] = {
    "hostProcess": _host_process,
    "hostNamespaces": _host_namespaces,
    "privileged": _privileged,
    "capabilities_baseline": _capabilities_baseline,
    "hostPathVolumes": _host_path_volumes,
    "hostPorts": _host_ports,
    "appArmorProfile": _app_armor,
    "seLinuxOptions": _se_linux,
    "procMount": _proc_mount,
    "seccompProfile_baseline": _seccomp_baseline,
    "sysctls": _sysctls,
    "hostProbesAndHostLifecycle": _host_probes,
}
RESTRICTED: dict[str, Check] = {
    "restrictedVolumes": _restricted_volumes,
    "allowPrivilegeEscalation": _allow_privilege_escalation,
    "runAsNonRoot": _run_as_non_root,
    "runAsUser": _run_as_user,
    "seccompProfile_restricted": _seccomp_restricted,
    "capabilities_restricted": _capabilities_restricted,
}


def violations(pod: Pod, level: Level, version: Version = LATEST) -> list[Violation]:
    """What `level` (at policy `version`) refuses in `pod`; empty when it is admitted."""
    checks = {} if level == "privileged" else dict(BASELINE)
    if level == "restricted":
        checks |= RESTRICTED
    return [Violation(check, detail) for check, fn in checks.items() for detail in fn(pod, version)]


def enforced(namespace: Doc) -> Level:
    """The level a Namespace enforces (no label: privileged, the cluster default)."""
    level = (namespace["metadata"].get("labels") or {}).get(LEVEL_LABEL, "privileged")
    assert level in ("privileged", "baseline", "restricted"), level
    found: Level = level
    return found


__all__ = [
    "LATEST",
    "LEVEL_LABEL",
    "WORKLOADS",
    "Level",
    "Pod",
    "Violation",
    "enforced",
    "pod_of",
    "violations",
]
