"""A session's Kubernetes objects, stamped from the one template in `deploy/kubernetes/`.

`deploy/kubernetes/session.yaml` is a working example (session `example`: its claim, Deployment
and Service) and the only template: the hub's Kubernetes backend and
`deploy/kubernetes/new-session.sh` both render a session's objects from it here, so the two
cannot drift. Rendering is structural, not textual: the YAML is parsed, the names
`codedesk-example…` and the label `codedesk/session: example` are replaced by the session's, and
what a session may set on top (image, resources, extra labels such as the hub's id) is written
into the parsed objects. The runtime's token becomes a Secret object of its own, which the
template only refers to (a token in a file people copy would be shared by every session).

    python -m runtime.hub.kubernetes_objects ID [--image IMAGE] [--part all|secret|session|network-policy]

prints the objects as a YAML stream for `kubectl apply -f -` (what `new-session.sh` does).
"""

from __future__ import annotations

import argparse
import copy
import re
import secrets
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

TEMPLATE_DIR = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
EXAMPLE = "example"
SESSION_LABEL = "codedesk/session"
HUB_LABEL = "codedesk/hub"
# A Service name is a DNS-1035 label; "codedesk-" + ID + "-data" must stay within 63 characters.
SESSION_ID = re.compile(r"^[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?$")
RUNTIME_PORT = 8765
VIEWER_PORT = 6080


def _yaml():  # noqa: ANN202
    try:
        import yaml
    except ImportError as exc:  # pragma: no cover - installed with the kubernetes extra
        raise RuntimeError("rendering Kubernetes objects needs PyYAML: pip install 'codedesk[kubernetes]'") from exc
    return yaml


def load_template(template_dir: Path = TEMPLATE_DIR) -> list[dict[str, Any]]:
    """The objects of `session.yaml`, as parsed (session `example`)."""
    with open(template_dir / "session.yaml") as f:
        return [doc for doc in _yaml().safe_load_all(f) if doc]


def network_policy(template_dir: Path = TEMPLATE_DIR) -> dict[str, Any]:
    """The namespace's NetworkPolicy for every session pod (`network-policy.yaml`, applied once)."""
    with open(template_dir / "network-policy.yaml") as f:
        return _yaml().safe_load(f)


def names(session_id: str) -> dict[str, str]:
    """The names of a session's objects."""
    base = f"codedesk-{session_id}"
    return {"deployment": base, "service": base, "claim": f"{base}-data", "secret": f"{base}-token"}


def _stamp(node: Any, session_id: str, key: str | None = None) -> Any:
    """`node` with session `example`'s names and label values made `session_id`'s."""
    if isinstance(node, dict):
        return {k: _stamp(v, session_id, k) for k, v in node.items()}
    if isinstance(node, list):
        return [_stamp(v, session_id) for v in node]
    if isinstance(node, str):
        if key == SESSION_LABEL and node == EXAMPLE:
            return session_id
        prefix = f"codedesk-{EXAMPLE}"
        if node == prefix or node.startswith(prefix + "-"):
            return f"codedesk-{session_id}" + node[len(prefix):]
    return node


def _quantity_cpu(cpus: float) -> str:
    millis = round(cpus * 1000)
    return f"{millis // 1000}" if millis % 1000 == 0 else f"{millis}m"


def _cpu_value(quantity: str) -> float:
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def _memory_mib(quantity: str) -> float:
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024 ** 2, "k": 1000 / 2**20, "M": 1e6 / 2**20,
             "G": 1e9 / 2**20}
    for unit, factor in units.items():
        if quantity.endswith(unit):
            return float(quantity[: -len(unit)]) * factor
    return float(quantity) / 2**20


def _apply_resources(container: dict[str, Any], resources: dict[str, Any]) -> None:
    """The session's `cpus` and `memory_mb` as the desktop container's limits (where the browser and
    the programs run; the runtime container keeps the template's), its requests kept at or below."""
    res = container.setdefault("resources", {})
    limits, requests = res.setdefault("limits", {}), res.setdefault("requests", {})
    if resources.get("cpus"):
        limits["cpu"] = _quantity_cpu(float(resources["cpus"]))
        if "cpu" in requests and _cpu_value(str(requests["cpu"])) > float(resources["cpus"]):
            requests["cpu"] = limits["cpu"]
    if resources.get("memory_mb"):
        limits["memory"] = f"{int(resources['memory_mb'])}Mi"
        if "memory" in requests and _memory_mib(str(requests["memory"])) > int(resources["memory_mb"]):
            requests["memory"] = limits["memory"]


def session_objects(session_id: str, *, token: str | None, image: str | None = None,
                    resources: dict[str, Any] | None = None, labels: dict[str, str] | None = None,
                    replicas: int = 1, template: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Session `session_id`'s objects: its Secret (when `token` is given), claim, Deployment and
    Service, from the template. `image` replaces every container's image, `resources`
    (`cpus`, `memory_mb`) become the desktop container's limits, and `labels` are added to every
    object and to the pod (never to selectors, which cannot change once made)."""
    if not SESSION_ID.match(session_id):
        raise ValueError(f"session id {session_id!r}: use lowercase letters, digits and '-' (at most 42)")
    objects = [_stamp(copy.deepcopy(obj), session_id) for obj in (template or load_template())]
    extra = dict(labels or {})
    if token is not None:
        objects.insert(0, {
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": names(session_id)["secret"],
                         "labels": {"app.kubernetes.io/name": "codedesk", SESSION_LABEL: session_id}},
            "stringData": {"token": token},
        })
    for obj in objects:
        obj["metadata"].setdefault("labels", {}).update(extra)
        if obj["kind"] != "Deployment":
            continue
        obj["spec"]["replicas"] = replicas
        pod = obj["spec"]["template"]
        pod["metadata"].setdefault("labels", {}).update(extra)
        for container in pod["spec"]["containers"]:
            if image:
                container["image"] = image
            if container["name"] == "desktop" and resources:
                _apply_resources(container, resources)
    return objects


def dump(objects: Iterable[dict[str, Any]]) -> str:
    """A YAML stream, as `kubectl apply -f -` reads it."""
    return _yaml().safe_dump_all(list(objects), sort_keys=False, default_flow_style=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m runtime.hub.kubernetes_objects", description=(
        "Print one session's Kubernetes objects (from deploy/kubernetes/session.yaml) as YAML for kubectl."))
    p.add_argument("id", nargs="?", help="the session's id: lowercase letters, digits and '-'")
    p.add_argument("--image", help="the containers' image (default: the template's)")
    p.add_argument("--cpus", type=float, help="the desktop container's CPU limit")
    p.add_argument("--memory-mb", type=int, help="the desktop container's memory limit in MiB")
    p.add_argument("--part", choices=["all", "secret", "session", "network-policy"], default="all", help=(
        "secret: only the token's Secret (a new random token); session: claim, Deployment and Service; "
        "network-policy: the namespace's policy (no ID needed); all: secret and session"))
    args = p.parse_args(argv)
    if args.part == "network-policy":
        sys.stdout.write(dump([network_policy()]))
        return 0
    if not args.id or not SESSION_ID.match(args.id):
        print("ID must be lowercase letters, digits and '-' (at most 42, not starting or ending with '-')",
              file=sys.stderr)
        return 2
    resources = {k: v for k, v in (("cpus", args.cpus), ("memory_mb", args.memory_mb)) if v}
    objects = session_objects(args.id, token=secrets.token_hex(24), image=args.image, resources=resources)
    if args.part == "secret":
        objects = [o for o in objects if o["kind"] == "Secret"]
    elif args.part == "session":
        objects = [o for o in objects if o["kind"] != "Secret"]
    sys.stdout.write(dump(objects))
    return 0


if __name__ == "__main__":
    sys.exit(main())
