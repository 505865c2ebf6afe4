"""The Kubernetes backend: a session's objects from the one template, checked offline against the
cluster's schemas (`kubernetes-validate --strict`, which ships them), `new-session.sh` rendering
through the same code, and, when `KUBECONFIG` names a cluster, the backend's lifecycle against it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from runtime.hub.kubernetes_objects import (HUB_LABEL, SESSION_LABEL, TEMPLATE_DIR, load_template, names,
                                            network_policy, session_objects)

ROOT = Path(__file__).resolve().parents[2]
HUB_ID = "0123456789abcdef0123456789abcdef"


def _hub_objects(session_id: str = "5e55105e55aa") -> list[dict]:
    """What the hub's backend makes for one session (the image, resources and labels it sets)."""
    return session_objects(session_id, token=secrets.token_hex(24), image="registry.example/codedesk:1.2",
                           resources={"cpus": 1.5, "memory_mb": 2048, "pids": 4096}, labels={HUB_LABEL: HUB_ID})


def _strict(obj: dict) -> None:
    """`obj` validated against the newest schemas kubernetes-validate ships, strictly (unknown
    fields refused); a kind it has no schema for fails too (its CLI would only warn)."""
    import kubernetes_validate

    kubernetes_validate.validate(obj, kubernetes_validate.utils.latest_version(), strict=True)


def test_a_sessions_objects_pass_kubernetes_validate_strict():
    """Every object the hub makes for a session, and the namespace's NetworkPolicy, is valid for
    the cluster: a typo in a field would be refused by the API server only at create time."""
    objects = _hub_objects()
    assert [o["kind"] for o in objects] == ["Secret", "PersistentVolumeClaim", "Deployment", "Service"]
    for obj in [*objects, network_policy()]:
        _strict(obj)


def test_the_strict_check_refuses_an_unknown_field():
    """The check above is not vacuous: a misspelt field in a container fails it."""
    import kubernetes_validate

    deployment = next(o for o in _hub_objects() if o["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        _strict(deployment)


def test_the_kubernetes_validate_command_passes_the_rendered_stream(tmp_path):
    """The command a person runs, on what `python -m runtime.hub.kubernetes_objects` prints,
    with no network (its schemas ship in the package)."""
    rendered = subprocess.run([sys.executable, "-m", "runtime.hub.kubernetes_objects", "web-1", "--cpus", "1"],
                              cwd=ROOT, capture_output=True, text=True, check=True).stdout
    policy = subprocess.run([sys.executable, "-m", "runtime.hub.kubernetes_objects", "--part", "network-policy"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    path = tmp_path / "session.yaml"
    path.write_text(rendered + "---\n" + policy)
    # In a network namespace of its own (no network at all) where the machine allows it: offline.
    offline = ["unshare", "-n"]
    if not shutil.which("unshare") or subprocess.run([*offline, "true"], capture_output=True).returncode != 0:
        offline = []
    out = subprocess.run([*offline, Path(sys.executable).parent / "kubernetes-validate", "--strict", str(path)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("passed for resource") == 5, out.stdout
    assert "WARN" not in out.stdout and "ERROR" not in out.stdout, out.stdout


def test_a_session_is_stamped_from_the_template_with_nothing_of_the_example_left():
    """Names, label values, the claim and the Secret the pod refers to are all the session's; the
    selectors still select the pod; the hub's label is on every object and on the pod."""
    sid = "5e55105e55aa"
    objects = _hub_objects(sid)
    assert "example" not in json.dumps(objects).replace("registry.example", "")
    by_kind = {o["kind"]: o for o in objects}
    n = names(sid)
    assert by_kind["Secret"]["metadata"]["name"] == n["secret"]
    assert by_kind["PersistentVolumeClaim"]["metadata"]["name"] == n["claim"]
    deployment, service = by_kind["Deployment"], by_kind["Service"]
    assert deployment["metadata"]["name"] == n["deployment"] and service["metadata"]["name"] == n["service"]
    pod = deployment["spec"]["template"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert pod["metadata"]["labels"][SESSION_LABEL] == sid and pod["metadata"]["labels"][HUB_LABEL] == HUB_ID
    assert HUB_LABEL not in deployment["spec"]["selector"]["matchLabels"]  # selectors never change
    assert all(o["metadata"]["labels"][HUB_LABEL] == HUB_ID for o in objects)
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert claims == [n["claim"]]
    runtime = next(c for c in pod["spec"]["containers"] if c["name"] == "runtime")
    token_ref = next(e for e in runtime["env"] if e["name"] == "CODEDESK_TOKEN")["valueFrom"]["secretKeyRef"]
    assert token_ref == {"name": n["secret"], "key": "token"}
    assert {c["image"] for c in pod["spec"]["containers"]} == {"registry.example/codedesk:1.2"}


def test_a_sessions_resources_become_the_desktop_containers_limits():
    """cpus and memory_mb bind the container where the browser and programs run; its requests
    never exceed them (the API server would refuse the pod)."""
    small = session_objects("s1", token=None, resources={"cpus": 0.25, "memory_mb": 768})
    desktop = next(c for c in small[1]["spec"]["template"]["spec"]["containers"] if c["name"] == "desktop")
    assert desktop["resources"]["limits"] == {"cpu": "250m", "memory": "768Mi"}
    assert desktop["resources"]["requests"] == {"cpu": "250m", "memory": "768Mi"}
    big = session_objects("s1", token=None, resources={"cpus": 3, "memory_mb": 4096})
    desktop = next(c for c in big[1]["spec"]["template"]["spec"]["containers"] if c["name"] == "desktop")
    assert desktop["resources"]["limits"] == {"cpu": "3", "memory": "4096Mi"}
    assert desktop["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}  # the template's
    assert [o["kind"] for o in small] == ["PersistentVolumeClaim", "Deployment", "Service"]  # no token, no Secret


def test_the_template_rendered_for_example_is_the_template():
    """session.yaml stays a working example: stamping it for `example` changes nothing."""
    assert session_objects("example", token=None) == load_template(TEMPLATE_DIR)


def test_new_session_sh_applies_what_the_renderer_makes(tmp_path):
    """The script and the hub share one source: what it hands kubectl is the renderer's output
    (kubectl is stood in for by a recorder, as no cluster is reachable here)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(f'#!/bin/sh\nn=$(ls {tmp_path}/call-*.args 2>/dev/null | wc -l)\n'
                       f'printf "%s \\n" "$@" > {tmp_path}/call-$n.args\ncat > {tmp_path}/call-$n.yaml\n')
    kubectl.chmod(kubectl.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CODEDESK_PYTHON": sys.executable}
    out = subprocess.run(["bash", "deploy/kubernetes/new-session.sh", "team-7", "-n", "agents"], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "session team-7" in out.stdout
    assert (tmp_path / "call-0.args").read_text().split() == ["-n", "agents", "create", "-f", "-"]
    assert (tmp_path / "call-1.args").read_text().split() == ["-n", "agents", "apply", "-f", "-"]
    secret = list(yaml.safe_load_all((tmp_path / "call-0.yaml").read_text()))
    session = list(yaml.safe_load_all((tmp_path / "call-1.yaml").read_text()))
    assert [o["kind"] for o in secret] == ["Secret"] and len(secret[0]["stringData"]["token"]) == 48
    assert session == session_objects("team-7", token=None)
    bad = subprocess.run(["bash", "deploy/kubernetes/new-session.sh", "Bad_ID"], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "lowercase" in bad.stderr


CLUSTER = os.environ.get("KUBECONFIG")


@pytest.mark.skipif(not CLUSTER, reason=(
    "NOT RUN: no Kubernetes cluster: $KUBECONFIG is not set; set it to a cluster's kubeconfig to drive the "
    "Kubernetes backend against a real cluster"))
def test_the_backend_creates_sleeps_wakes_and_deletes_a_session_in_a_real_cluster(tmp_path):
    """Against the cluster of $KUBECONFIG: the four objects are made; a pause is a sleep (the
    Deployment at zero, the claim kept); a wake scales it to one; delete leaves nothing."""
    import anyio

    from runtime.hub.kubernetes_backend import KubernetesBackend
    from runtime.hub.service import HubSettings, SessionHub
    from runtime.hub.store import SessionRecord, Store

    backend = KubernetesBackend("test" + secrets.token_hex(8), namespace=os.environ.get("CODEDESK_K8S_NAMESPACE"))
    backend.ping()
    sid = secrets.token_hex(6)
    core, apps = backend._apis()
    try:
        ref = backend.create(sid, os.environ.get("CODEDESK_IMAGE", "codedesk:latest"), {"cpus": 1.0, "memory_mb": 2048},
                             secrets.token_hex(24))
        assert ref["deployment"] == f"codedesk-{sid}"
        assert backend.list_sessions() == {sid: "running"}
        store = Store(tmp_path)
        hub = SessionHub(store, backend, HubSettings(public_url="http://hub"))
        now = time.time()
        rec = SessionRecord(id=sid, state="running", image="i", resources={}, idle_timeout_s=None, ttl_s=None,
                            metadata={}, token_hash="h", runtime_token="t", backend_ref=ref, created_at=now,
                            claimed_at=now, last_activity=now, state_since=now)
        store.insert(rec)
        hub._records[sid] = rec
        assert anyio.run(hub.pause, sid)["state"] == "sleeping"
        assert apps.read_namespaced_deployment(ref["deployment"], backend.namespace).spec.replicas == 0
        assert core.read_namespaced_persistent_volume_claim(ref["claim"], backend.namespace)
        assert backend.status(sid)["status"] == "exited"
        backend.start(sid)
        assert apps.read_namespaced_deployment(ref["deployment"], backend.namespace).spec.replicas == 1
        anyio.run(hub.delete, sid)
        store.close()
        deadline = time.monotonic() + 120  # a claim is held until its pod is gone (pvc-protection)
        while sid in backend.list_sessions() and time.monotonic() < deadline:
            time.sleep(1)
        assert sid not in backend.list_sessions()
    finally:
        backend.remove(sid)


def test_a_hub_on_kubernetes_without_a_cluster_says_how_to_configure_one(hub_factory, tmp_path):
    """`--backend kubernetes` with no reachable cluster starts, reports the backend down, and a
    create is a clear 503 naming $KUBECONFIG, with nothing written."""
    hub = hub_factory("--backend", "kubernetes", env={"KUBECONFIG": str(tmp_path / "no-such-kubeconfig")})
    assert hub.api("GET", "/healthz").json() == {"ok": True, "backend": "kubernetes", "backend_up": False}
    r = hub.api("POST", "/v1/sessions", json={})
    assert r.status_code == 503, r.text
    error = r.json()["error"]
    assert error["code"] == "backend_unavailable" and "KUBECONFIG" in error["fix"]
    assert "nothing was changed" in error["message"]
    assert hub.api("GET", "/v1/sessions").json() == {"sessions": []}
