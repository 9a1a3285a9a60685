"""Just enough of `kustomize build` to render deploy/k8s without the binary: resources,
ConfigMap generators (`files` and `envs`, each in the namespace it names), labels,
images, replicas and JSON 6902 patches chosen by kind and name. Any other kustomization
field (`namespace:` included: it would move every resource into one namespace) fails
loudly, so a manifest never relies on something rendered here differently."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

Doc = dict[str, Any]
KNOWN_FIELDS = {
    "apiVersion",
    "kind",
    "resources",
    "configMapGenerator",
    "labels",
    "images",
    "replicas",
    "patches",
}
GENERATOR_FIELDS = {"name", "namespace", "files", "envs", "options"}
CLUSTER_SCOPED = {"Namespace"}


def load_docs(path: Path) -> list[Doc]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def build(folder: Path) -> list[Doc]:
    """The documents `kustomize build folder` prints (in no particular order)."""
    spec: Doc = yaml.safe_load((folder / "kustomization.yaml").read_text())
    unknown = spec.keys() - KNOWN_FIELDS
    assert not unknown, f"{folder}: the renderer does not understand {sorted(unknown)}"
    docs: list[Doc] = []
    for entry in spec.get("resources", []):
        target = folder / entry
        docs += build(target) if target.is_dir() else load_docs(target)
    docs += [_generated_config_map(folder, gen) for gen in spec.get("configMapGenerator", [])]
    docs = copy.deepcopy(docs)
    for doc in docs:
        _apply_labels(doc, spec.get("labels", []))
        _apply_images(doc, spec.get("images", []))
        _apply_replicas(doc, spec.get("replicas", []))
    for patch in spec.get("patches", []):
        _apply_patch(docs, patch)
    return docs


def _generated_config_map(folder: Path, gen: Doc) -> Doc:
    unknown = gen.keys() - GENERATOR_FIELDS
    assert not unknown, f"{folder}: the renderer does not understand {sorted(unknown)}"
    assert gen.get("options", {}).get("disableNameSuffixHash"), "hash suffixes not modelled"
    data = {name: (folder / name).read_text() for name in gen.get("files", [])}
    for name in gen.get("envs", []):
        data |= env_file(folder / name)
    metadata = {"name": gen["name"]} | (
        {"namespace": gen["namespace"]} if "namespace" in gen else {}
    )
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}


def env_file(path: Path) -> dict[str, str]:
    """An `envs` file as kustomize reads it: KEY=VALUE lines; blank and # lines skipped."""
    pairs: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition("=")
        assert sep, f"{path}: not KEY=VALUE: {line!r}"
        pairs[name.strip()] = value
    return pairs


def _apply_labels(doc: Doc, labels: list[Doc]) -> None:
    for entry in labels:
        assert not entry.get("includeSelectors"), "selector labels not modelled"
        doc["metadata"].setdefault("labels", {}).update(entry["pairs"])


def workload_containers(doc: Doc) -> list[Doc]:
    """The containers of a Deployment or DaemonSet's pod template (none for other kinds)."""
    if doc["kind"] not in ("Deployment", "DaemonSet"):
        return []
    containers: list[Doc] = doc["spec"]["template"]["spec"]["containers"]
    return containers


def _apply_images(doc: Doc, images: list[Doc]) -> None:
    for container in workload_containers(doc):
        for image in images:
            if container["image"].split(":")[0] == image["name"]:
                container["image"] = f"{image.get('newName', image['name'])}:{image['newTag']}"


def _apply_replicas(doc: Doc, replicas: list[Doc]) -> None:
    for entry in replicas:
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] == entry["name"]:
            doc["spec"]["replicas"] = entry["count"]


def _apply_patch(docs: list[Doc], patch: Doc) -> None:
    target, ops = patch["target"], yaml.safe_load(patch["patch"])
    matched = [
        d
        for d in docs
        if d["kind"] == target["kind"]
        and target.get("name", d["metadata"]["name"]) == d["metadata"]["name"]
        and target.get("namespace", d["metadata"].get("namespace"))
        == d["metadata"].get("namespace")
    ]
    assert matched, f"patch matches nothing: {target}"
    for doc in matched:
        for op in ops:
            _json6902(doc, op)


def _json6902(doc: Doc, op: Doc) -> None:
    *parents, last = [p for p in op["path"].split("/") if p]
    node: Any = doc
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key: Any = int(last) if isinstance(node, list) and last != "-" else last
    if op["op"] == "remove":
        del node[key]
    elif op["op"] == "replace":
        assert key in node if isinstance(node, dict) else key < len(node), op
        node[key] = op["value"]
    elif op["op"] == "add" and isinstance(node, list):
        node.append(op["value"]) if key == "-" else node.insert(key, op["value"])
    elif op["op"] == "add":
        node[key] = op["value"]
    else:
        raise AssertionError(f"unsupported patch op {op}")


__all__ = ["CLUSTER_SCOPED", "Doc", "build", "env_file", "load_docs", "workload_containers"]
