"""deploy/k8s checked without a cluster: every manifest of the base and of each overlay
against the Kubernetes JSON Schemas (kubernetes-validate, offline, strict), and the
Deployments against the supervisor's service table, the settings classes and the
generated NATS permissions. Overlays are rendered by tests/kustomize_render.py (no
binary needed); namespaces and Pod Security are tests/deploy/test_deploy_pod_security.py."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]  # ships no type information
import pytest
import yaml
from pydantic_settings import BaseSettings

from kustomize_render import Doc, build
from tether_approvals.settings import ApprovalSettings
from tether_brain.settings import BrainSettings
from tether_client.server.natsauth import USERS, EnvRef, password_env, render_config
from tether_client.server.supervisor import SERVICES, ServiceSpec
from tether_common.placeholders import placeholder_secrets
from tether_common.settings import CommonSettings
from tether_common.subjects import Subjects
from tether_common.topology import SECRET_ENV
from tether_gateway.settings import GatewaySettings
from tether_output_store.settings import OutputSettings
from tether_tools_runner.settings import RunnerSettings

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
KUBERNETES_VERSION = "1.37.0"
TREES = ("base", "overlays/dev", "overlays/prod")
SETTINGS: dict[str, type[BaseSettings]] = {
    "brain": BrainSettings,
    "gateway": GatewaySettings,
    "tools-runner": RunnerSettings,
    "approvals": ApprovalSettings,
    "output-store": OutputSettings,
}
AUTOSCALED = ("brain", "gateway", "tools-runner")
PRIVATE_RANGES = {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"}


def env_names(cls: type[BaseSettings]) -> set[str]:
    """Every environment variable a settings class reads (as tests/contract does)."""
    prefix = str(cls.model_config.get("env_prefix", ""))
    names: set[str] = set()
    for name, field in cls.model_fields.items():
        names.add(f"{prefix}{name}".upper())
        choices = getattr(field.validation_alias, "choices", None) or []
        names.update(str(c).upper() for c in choices)
    return names


KNOWN_ENV = env_names(CommonSettings).union(*(env_names(c) for c in SETTINGS.values()))


@pytest.fixture(scope="module", params=TREES)
def tree(request: pytest.FixtureRequest) -> list[Doc]:
    docs: list[Doc] = build(K8S / request.param)
    return docs


@pytest.fixture(scope="module")
def base() -> list[Doc]:
    docs: list[Doc] = build(K8S / "base")
    return docs


def find(docs: list[Doc], kind: str, name: str, namespace: str | None = None) -> Doc:
    """The one `kind` named `name` (in `namespace`, when the name is in several)."""
    (found,) = [
        d
        for d in docs
        if d["kind"] == kind
        and d["metadata"]["name"] == name
        and namespace in (None, d["metadata"].get("namespace"))
    ]
    return found


def deployment_of(docs: list[Doc], spec: ServiceSpec) -> Doc:
    return find(docs, "Deployment", f"tether-{spec.name}")


def container_of(docs: list[Doc], spec: ServiceSpec) -> Doc:
    pod = deployment_of(docs, spec)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return dict(container)


def test_every_manifest_matches_the_kubernetes_schemas(tree: list[Doc]) -> None:
    assert tree
    for doc in tree:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)  # raises if invalid


def test_every_yaml_file_in_base_is_a_resource() -> None:
    listed = yaml.safe_load((K8S / "base/kustomization.yaml").read_text())["resources"]
    on_disk = {p.name for p in (K8S / "base").glob("*.yaml")} - {"kustomization.yaml"}
    assert on_disk == set(listed)


@pytest.mark.parametrize("spec", SERVICES, ids=[s.name for s in SERVICES])
def test_each_deployment_matches_the_service_table(base: list[Doc], spec: ServiceSpec) -> None:
    container = container_of(base, spec)
    assert container["image"] == f"tether-{spec.name}"
    assert SETTINGS[spec.name].model_fields["http_port"].default == spec.default_port
    (port,) = container["ports"]
    assert (port["name"], port["containerPort"]) == ("http", spec.default_port)
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    for bound in ("requests", "limits"):
        assert {"cpu", "memory"} <= container["resources"][bound].keys()
    namespace = deployment_of(base, spec)["metadata"]["namespace"]
    service = find(base, "Service", f"tether-{spec.name}", namespace)
    assert service["spec"]["ports"][0]["port"] == spec.default_port
    find(base, "PodDisruptionBudget", f"tether-{spec.name}", namespace)


@pytest.mark.parametrize("spec", SERVICES, ids=[s.name for s in SERVICES])
def test_each_container_is_locked_down(base: list[Doc], spec: ServiceSpec) -> None:
    context = container_of(base, spec)["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    pod = deployment_of(base, spec)["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False


def test_the_sandbox_gets_a_user_namespace_instead_of_capabilities(base: list[Doc]) -> None:
    runner = find(base, "Deployment", "tether-tools-runner")["spec"]["template"]["spec"]
    assert runner["hostUsers"] is False
    context = runner["containers"][0]["securityContext"]
    assert context["procMount"] == "Unmasked"
    assert "add" not in context["capabilities"]


def test_hpas_scale_brain_gateway_and_runner(base: list[Doc]) -> None:
    hpas = [d for d in base if d["kind"] == "HorizontalPodAutoscaler"]
    scaled = {d["spec"]["scaleTargetRef"]["name"] for d in hpas}
    assert scaled == {f"tether-{name}" for name in AUTOSCALED}
    for hpa in hpas:  # an autoscaler scales a Deployment of its own namespace
        target = hpa["spec"]["scaleTargetRef"]["name"]
        find(base, "Deployment", target, hpa["metadata"]["namespace"])


def referenced_env(docs: list[Doc], spec: ServiceSpec) -> set[str]:
    """The variables a service's container is given, from its own namespace's objects."""
    namespace = deployment_of(docs, spec)["metadata"]["namespace"]
    container = container_of(docs, spec)
    names = {e["name"] for e in container.get("env", [])}
    for source in container.get("envFrom", []):
        ref = source.get("configMapRef") or source["secretRef"]
        kind = "ConfigMap" if "configMapRef" in source else "Secret"
        found = find(docs, kind, ref["name"], namespace)
        names |= set(found.get("data") or {}) | set(found.get("stringData") or {})
    return names


@pytest.mark.parametrize(
    "variable", sorted(v for v, who in SECRET_ENV.items() if v.endswith("_KEY") and who)
)
def test_each_services_own_key_reaches_exactly_its_holders(tree: list[Doc], variable: str) -> None:
    """A key `tether up` gives some services (topology.SECRET_ENV) reaches exactly
    those pods, from a Secret of their own namespace."""
    given = {spec.name for spec in SERVICES if variable in referenced_env(tree, spec)}
    assert given == set(SECRET_ENV[variable]), variable


def test_every_environment_variable_is_a_known_setting(tree: list[Doc]) -> None:
    for spec in SERVICES:
        for name in referenced_env(tree, spec):
            assert name in KNOWN_ENV or name.startswith("OTEL_"), (spec.name, name)


# Where the NATS chart is installed (nats/values.yaml): it reads every user's password.
NATS_NAMESPACE = "tether"


@pytest.mark.parametrize("spec", SERVICES, ids=[s.name for s in SERVICES])
def test_each_service_connects_to_nats_as_itself(base: list[Doc], spec: ServiceSpec) -> None:
    """Each service reads its own password; a namespace other than NATS's holds only the
    passwords of the services it runs (the runner's: its own)."""
    namespace = deployment_of(base, spec)["metadata"]["namespace"]
    env = {e["name"]: e for e in container_of(base, spec)["env"]}
    assert env["TETHER_NATS_USER"]["value"] == spec.name
    ref = env["TETHER_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"]
    secret = find(base, "Secret", ref["name"], namespace)
    assert ref["key"] == spec.name
    if namespace == NATS_NAMESPACE:
        assert set(secret["stringData"]) == set(USERS)
    else:
        running = {
            s.name for s in SERVICES if deployment_of(base, s)["metadata"]["namespace"] == namespace
        }
        assert set(secret["stringData"]) == running


def test_the_nats_chart_gets_the_generated_permissions(base: list[Doc]) -> None:
    generated = render_config(Subjects(), {u: EnvRef(password_env(u)) for u in USERS})
    config_map = find(base, "ConfigMap", "tether-nats-auth", NATS_NAMESPACE)
    assert config_map["data"]["nats-server.conf"] == generated
    values: dict[str, Any] = yaml.safe_load((K8S / "nats/values.yaml").read_text())
    assert f"-n {NATS_NAMESPACE} " in (K8S / "nats/values.yaml").read_text()
    assert values["config"]["cluster"]["replicas"] == 3
    assert values["config"]["jetstream"]["enabled"] is True
    env = values["container"]["env"]
    for user in USERS:
        ref = env[password_env(user)]["valueFrom"]["secretKeyRef"]
        assert ref["key"] == user
        assert user in find(base, "Secret", ref["name"], NATS_NAMESPACE)["stringData"]


def egress_of(docs: list[Doc], name: str) -> list[Doc]:
    rules: list[Doc] = find(docs, "NetworkPolicy", name)["spec"]["egress"]
    return rules


def namespaces(docs: list[Doc]) -> set[str]:
    return {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"}


def test_only_the_runner_and_gateway_reach_the_internet(base: list[Doc]) -> None:
    policies = [d for d in base if d["kind"] == "NetworkPolicy"]
    open_to_world = {
        p["metadata"]["name"]
        for p in policies
        for rule in p["spec"].get("egress", [])
        for peer in rule.get("to", [])
        if peer.get("ipBlock", {}).get("cidr") == "0.0.0.0/0"
    }
    assert open_to_world == {"tether-tools-runner-web", "tether-gateway-providers"}
    for name in open_to_world:
        for rule in egress_of(base, name):
            assert set(rule["to"][0]["ipBlock"]["except"]) >= PRIVATE_RANGES
    (web,) = egress_of(base, "tether-tools-runner-web")
    assert {p["port"] for p in web["ports"]} == {80, 443}
    for namespace in namespaces(base):  # each namespace denies all its Tether pods first
        default = find(base, "NetworkPolicy", "tether-default-deny", namespace)["spec"]
        assert default["policyTypes"] == ["Ingress", "Egress"]
        assert "ingress" not in default
        assert "egress" not in default
        if namespace != NATS_NAMESPACE:  # the runner's and the installer's: every pod
            assert default["podSelector"] == {}


@pytest.mark.parametrize("overlay", ["overlays/dev", "overlays/prod"])
def test_overlays_pin_images_and_keep_base_namespaces(overlay: str) -> None:
    docs = build(K8S / overlay)
    assert namespaces(docs) == namespaces(build(K8S / "base"))
    for spec in SERVICES:
        image = container_of(docs, spec)["image"]
        # <prefix>/<service>:<tag>, the names compose gives the images it builds.
        assert image.rsplit(":", 1)[0].endswith(f"tether/{spec.name}")
        assert ":" in image
        assert "example" not in image


def test_dev_runs_one_of_each_and_prod_three_brains() -> None:
    dev, prod = build(K8S / "overlays/dev"), build(K8S / "overlays/prod")
    for spec in SERVICES:
        assert find(dev, "Deployment", f"tether-{spec.name}")["spec"]["replicas"] == 1
    assert find(prod, "Deployment", "tether-brain")["spec"]["replicas"] == 3
    assert find(prod, "HorizontalPodAutoscaler", "tether-brain")["spec"]["minReplicas"] == 3
    pdb = find(dev, "PodDisruptionBudget", "tether-brain")["spec"]
    assert pdb == pdb | {"maxUnavailable": 1}
    assert "minAvailable" not in pdb


SECCOMP_PROFILE = ROOT / "deploy" / "seccomp" / "tether-bwrap.json"
KUBELET_SECCOMP_ROOT = Path("/var/lib/kubelet/seccomp")
PUBLIC_SERVICES = {"tether-brain", "tether-approvals", "tether-output-store"}


def test_the_runner_seccomp_profile_is_installed_on_every_node(tree: list[Doc]) -> None:
    """The Localhost profile the runner pods name exists on the node: a DaemonSet copies
    the ConfigMap holding deploy/seccomp/tether-bwrap.json into the kubelet's folder (as
    rendered by each overlay, so none can move one side alone)."""
    runner = find(tree, "Deployment", "tether-tools-runner")["spec"]["template"]["spec"]
    wanted = runner["containers"][0]["securityContext"]["seccompProfile"]
    assert wanted["type"] == "Localhost"
    daemon_set = find(tree, "DaemonSet", "tether-seccomp-installer")
    # A pod mounts ConfigMaps of its own namespace only.
    config_map = find(
        tree, "ConfigMap", "tether-seccomp-profile", daemon_set["metadata"]["namespace"]
    )
    (name,) = config_map["data"]
    assert config_map["data"][name] == SECCOMP_PROFILE.read_text()
    installer = daemon_set["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in installer["volumes"]}
    assert volumes["profile"]["configMap"]["name"] == "tether-seccomp-profile"
    host = volumes["kubelet-seccomp"]["hostPath"]["path"]
    (init,) = installer["initContainers"]
    mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    script = init["command"][-1]
    assert f"{mounts['kubelet-seccomp']}/{name}" in script
    assert f"{mounts['profile']}/{name}" in script
    assert KUBELET_SECCOMP_ROOT / wanted["localhostProfile"] == Path(host) / name
    for container in [init, *installer["containers"]]:
        context = container["securityContext"]
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert context["allowPrivilegeEscalation"] is False
        assert context["readOnlyRootFilesystem"] is True
    assert installer["automountServiceAccountToken"] is False


def container_env(docs: list[Doc], spec: ServiceSpec) -> dict[str, str]:
    """The environment a service's container starts with, from the ConfigMaps and
    Secrets of its own namespace."""
    namespace = deployment_of(docs, spec)["metadata"]["namespace"]
    container = container_of(docs, spec)
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        ref = source.get("configMapRef") or source["secretRef"]
        kind = "ConfigMap" if "configMapRef" in source else "Secret"
        found = find(docs, kind, ref["name"], namespace)
        env |= (found.get("data") or {}) | (found.get("stringData") or {})
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        elif ref := entry["valueFrom"].get("secretKeyRef"):
            secret = find(docs, "Secret", ref["name"], namespace)
            env[entry["name"]] = secret["stringData"][ref["key"]]
    return env


@pytest.mark.parametrize("spec", SERVICES, ids=[s.name for s in SERVICES])
def test_each_service_refuses_the_shipped_placeholder_secrets(
    base: list[Doc], spec: ServiceSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Applied as shipped, every pod stops at start naming what to fill in; with the
    REPLACE-ME values replaced it starts."""
    shipped = container_env(base, spec)

    def refused(env: dict[str, str]) -> set[str]:
        for var in [v for v in os.environ if v.startswith("TETHER_")]:
            monkeypatch.delenv(var)
        for var, value in env.items():
            monkeypatch.setenv(var, value)
        found = placeholder_secrets(CommonSettings(), SETTINGS[spec.name]())
        return {p.setting for p in found}

    assert "TETHER_NATS_PASSWORD" in refused(shipped)
    filled = {k: v.replace("REPLACE-ME", secrets.token_hex(20)) for k, v in shipped.items()}
    assert refused(filled) == set()


def test_the_ingress_example_reaches_only_the_public_apis() -> None:
    prod = build(K8S / "overlays/prod")
    (ingress,) = [d for d in prod if d["kind"] == "Ingress"]
    spec = ingress["spec"]
    hosts = {rule["host"] for rule in spec["rules"]}
    (tls,) = spec["tls"]
    assert set(tls["hosts"]) == hosts
    backends = set()
    for rule in spec["rules"]:
        for path in rule["http"]["paths"]:
            service = path["backend"]["service"]
            found = find(prod, "Service", service["name"], ingress["metadata"]["namespace"])
            ports = found["spec"]["ports"]
            assert service["port"]["name"] in {p["name"] for p in ports}
            backends.add(service["name"])
    assert backends == PUBLIC_SERVICES
    # The controller the Ingress is written for is the one the NetworkPolicy admits.
    assert spec["ingressClassName"] == "nginx"
    (allowed,) = find(prod, "NetworkPolicy", "tether-public-http")["spec"]["ingress"]
    selector = allowed["from"][0]["namespaceSelector"]["matchLabels"]
    assert selector == {"kubernetes.io/metadata.name": "ingress-nginx"}
