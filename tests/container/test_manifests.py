"""The Kubernetes manifests of deploy/kubernetes/: valid against the API schemas (offline, the
schemas kubernetes-validate bundles), and carrying the security settings the privilege model
needs. Runs in `make test`; needs neither Docker nor a cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

kubernetes_validate = pytest.importorskip("kubernetes_validate")

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
VERSION = "1.30.0"


def _documents() -> list[dict]:
    docs = []
    for path in MANIFESTS:
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def _pod_spec() -> dict:
    (deployment,) = [d for d in _documents() if d["kind"] == "Deployment"]
    return deployment["spec"]["template"]["spec"]


@pytest.mark.parametrize("doc", _documents(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_every_manifest_is_valid_against_the_kubernetes_schemas(doc):
    """A manifest the API server would reject is found here, not at an operator's first apply;
    strict mode also refuses misspelt fields the server would silently drop."""
    kubernetes_validate.validate(doc, VERSION, strict=True)


def test_a_misspelt_field_is_refused_by_the_validation():
    """The check above can fail: a field the schema does not know is an error."""
    (deployment,) = [d for d in _documents() if d["kind"] == "Deployment"]
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContex"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSION, strict=True)


def test_the_pod_carries_the_security_settings_of_the_privilege_model():
    """The runtime holds the token: non-root, no capabilities, no escalation, read-only root;
    the launcher keeps only the capabilities that dropping to the session's users needs; the
    seccomp profile that lets Chromium keep its sandbox applies to the pod."""
    spec = _pod_spec()
    assert spec["securityContext"]["seccompProfile"] == {
        "type": "Localhost", "localhostProfile": "codedesk/seccomp-chromium.json"}
    assert spec["automountServiceAccountToken"] is False
    containers = {c["name"]: c for c in spec["containers"]}
    runtime = containers["runtime"]["securityContext"]
    assert runtime["runAsNonRoot"] is True and runtime["runAsUser"] != 0
    assert runtime["allowPrivilegeEscalation"] is False
    assert runtime["readOnlyRootFilesystem"] is True
    assert runtime["capabilities"] == {"drop": ["ALL"]}
    desktop = containers["desktop"]["securityContext"]
    assert desktop["allowPrivilegeEscalation"] is False
    assert desktop["capabilities"]["drop"] == ["ALL"]
    assert set(desktop["capabilities"]["add"]) <= {"SETUID", "SETGID", "SETPCAP", "CHOWN", "FOWNER",
                                                   "DAC_OVERRIDE", "KILL"}
    for c in containers.values():
        assert c["resources"]["requests"] and c["resources"]["limits"]


def test_the_pod_keeps_the_session_on_a_claim_and_probes_the_health_endpoint():
    """Sleeping a session is scaling its pod to zero: its disk must be a claim, not the pod's;
    the orchestrator's probes use the token-free health endpoint."""
    spec = _pod_spec()
    claims = [v for v in spec["volumes"] if "persistentVolumeClaim" in v]
    assert claims and any(m["mountPath"] == "/data" and m["name"] == claims[0]["name"]
                          for m in spec["containers"][0]["volumeMounts"])
    runtime = {c["name"]: c for c in spec["containers"]}["runtime"]
    assert runtime["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert runtime["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_the_network_policy_refuses_the_metadata_ranges():
    """The cluster holds the egress policy the session holds on one machine (boundary 6)."""
    (policy,) = [d for d in _documents() if d["kind"] == "NetworkPolicy"]
    excepted = {cidr for rule in policy["spec"]["egress"] for peer in rule["to"]
                for cidr in peer["ipBlock"].get("except", [])}
    assert {"169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128"} <= excepted
    assert "Egress" in policy["spec"]["policyTypes"]


def test_the_shipped_seccomp_profile_allows_namespaces_and_refuses_the_dangerous_calls():
    """Chromium's sandbox needs unshare/clone of namespaces; mount, ptrace, bpf, kexec and
    module loading stay refused, as under Docker's default."""
    profile = json.loads((ROOT / "desktop-image" / "seccomp-chromium.json").read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    allowed = {n for rule in profile["syscalls"] if rule["action"] == "SCMP_ACT_ALLOW" for n in rule["names"]}
    assert {"unshare", "clone", "chroot", "read", "execve"} <= allowed
    assert not allowed & {"mount", "ptrace", "bpf", "kexec_load", "init_module", "setns", "keyctl"}
