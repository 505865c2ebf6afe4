"""The Kubernetes backend: per session the objects of `deploy/kubernetes/` (a Secret with the
runtime's token, a claim for /data, a Deployment of one replica, a Service), stamped from the one
template by `runtime.hub.kubernetes_objects`, through the official `kubernetes` Python client.

- create: the four objects, labelled `codedesk/hub=<hub id>` and `codedesk/session=<id>` (how the
  hub finds its own after a restart and removes orphans), and the namespace's NetworkPolicy once;
- sleep / wake: the Deployment scaled to zero / one; the claim, and so the disk, stays;
- pause: Kubernetes cannot freeze a pod in place, so this backend has `can_pause = False` and the
  hub puts a session it would pause to sleep instead;
- delete: the four objects (the claim's volume goes with its reclaim policy, `Delete` by default).

The hub reaches a session at its pod's IP (`--kube-address pod`, the default: no DNS, no
kube-proxy hop) or at its Service's cluster name (`service`), so it runs inside the cluster or
on a network that routes to it. Pod and Service are the template's; nothing here knows their
containers beyond the names `desktop` (whose log explains a failed start) and the two ports.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from runtime.hub.errors import BackendUnavailable, InvalidRequest, SessionConflict
from runtime.hub.kubernetes_objects import (HUB_LABEL, RUNTIME_PORT, SESSION_LABEL, TEMPLATE_DIR, VIEWER_PORT,
                                            names, network_policy, session_objects)
from runtime.hub.session_files import READ_VIEWER_FILE, viewer_secret

log = logging.getLogger("codedesk.hub")

REQUEST_TIMEOUT_S = 15
# A pod's container waiting for one of these will not start by itself: the session failed.
_STUCK = {"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CreateContainerConfigError",
          "CreateContainerError", "RunContainerError"}


class KubernetesBackend:
    name = "kubernetes"
    can_pause = False

    def __init__(self, hub_id: str, namespace: str | None = None, context: str | None = None,
                 address: str = "pod", template_dir: Path = TEMPLATE_DIR) -> None:
        if address not in ("pod", "service"):
            raise ValueError("address must be 'pod' or 'service'")
        self.hub_id = hub_id
        self.context = context
        self.address = address
        self.template_dir = template_dir
        self._namespace = namespace
        self._api = None
        self._policy_checked = False

    # -- the cluster
    def _client(self):  # noqa: ANN202
        """The API client, configured from $KUBECONFIG / ~/.kube/config, else the pod's service account."""
        if self._api is not None:
            return self._api
        try:
            from kubernetes import client, config
            from kubernetes.config.config_exception import ConfigException
        except ImportError as exc:
            raise BackendUnavailable("the kubernetes Python client is not installed",
                                     "pip install 'codedesk[kubernetes]' (make install does)") from exc
        try:
            try:
                config.load_kube_config(context=self.context)
                if self._namespace is None:
                    contexts, active = config.list_kube_config_contexts()
                    chosen = next((c for c in contexts if c["name"] == self.context), active)
                    self._namespace = (chosen or {}).get("context", {}).get("namespace") or "default"
            except (ConfigException, OSError, TypeError):
                config.load_incluster_config()
                if self._namespace is None:
                    self._namespace = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read_text().strip()
        except (ConfigException, OSError) as exc:
            raise BackendUnavailable(
                f"no Kubernetes cluster is configured ({str(exc).splitlines()[0][:200]}); nothing was changed",
                "set $KUBECONFIG to a kubeconfig (or run the hub in the cluster with a service account), "
                "then retry: the hub reconnects by itself") from exc
        self._api = client.ApiClient()
        return self._api

    @property
    def namespace(self) -> str:
        self._client()
        assert self._namespace is not None
        return self._namespace

    def _apis(self):  # noqa: ANN202
        from kubernetes import client

        api = self._client()
        return client.CoreV1Api(api), client.AppsV1Api(api)

    def _call(self, fn, *args, **kwargs):  # noqa: ANN001, ANN202
        """`fn(*args)` with the cluster's connection failures translated to BackendUnavailable; the
        API's own refusals (ApiException) go through, but for 401/403, which no retry mends."""
        import urllib3.exceptions
        from kubernetes.client.exceptions import ApiException

        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT_S)
        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            if exc.status in (401, 403):
                raise BackendUnavailable(
                    f"the cluster refused the hub ({exc.status} {exc.reason}: "
                    f"{_api_message(exc)[:200]}); nothing was changed",
                    f"give the hub's account the rights on deployments, deployments/scale, services, "
                    f"persistentvolumeclaims, secrets, pods, pods/log and pods/exec in namespace "
                    f"{self._namespace}") from exc
            raise
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise BackendUnavailable(
                f"the Kubernetes API does not answer ({type(exc).__name__}: {str(exc)[:200]}); nothing was changed",
                "check the cluster (kubectl cluster-info) and the hub's kubeconfig, then retry: the hub "
                "reconnects by itself") from exc

    def ping(self) -> None:
        from kubernetes import client

        self._call(client.VersionApi(self._client()).get_code)

    def check_image(self, image: str) -> None:
        """Nothing to check from here: whether the nodes can pull `image` shows when the pod starts
        (a pull failure fails the session's start, naming it)."""

    # -- names and labels
    @staticmethod
    def container_name(session_id: str) -> str:
        return names(session_id)["deployment"]

    def _selector(self, session_id: str | None = None) -> str:
        selector = f"{HUB_LABEL}={self.hub_id}"
        return selector + (f",{SESSION_LABEL}={session_id}" if session_id else "")

    def logs_hint(self, session_id: str) -> str:
        return f"kubectl -n {self.namespace} logs deploy/{names(session_id)['deployment']} -c desktop"

    # -- lifecycle
    def create(self, session_id: str, image: str, resources: dict[str, Any], runtime_token: str) -> dict[str, Any]:
        """Make the session's Secret, claim, Deployment and Service; where they are."""
        from kubernetes.client.exceptions import ApiException

        core, apps = self._apis()
        ns = self.namespace
        self._ensure_network_policy()
        objects = session_objects(session_id, token=runtime_token, image=image, resources=resources,
                                  labels={HUB_LABEL: self.hub_id}, template=_template(self.template_dir))
        makers = {"Secret": core.create_namespaced_secret,
                  "PersistentVolumeClaim": core.create_namespaced_persistent_volume_claim,
                  "Deployment": apps.create_namespaced_deployment, "Service": core.create_namespaced_service}
        try:
            for obj in objects:
                self._call(makers[obj["kind"]], ns, obj)
        except ApiException as exc:
            self.remove(session_id)
            if exc.status == 422:
                raise InvalidRequest(f"the cluster refused session {session_id}'s objects: {_api_message(exc)[:300]}",
                                     "check the image name and the resources asked for") from exc
            raise SessionConflict(f"the cluster refused session {session_id}'s objects ({exc.status} "
                                  f"{exc.reason}: {_api_message(exc)[:300]})", "retry; nothing was kept") from exc
        except Exception:
            self.remove(session_id)
            raise
        n = names(session_id)
        return {"kind": "kubernetes", "namespace": ns, "deployment": n["deployment"], "service": n["service"],
                "claim": n["claim"], "secret": n["secret"]}

    def _ensure_network_policy(self) -> None:
        """The namespace's egress policy (`network-policy.yaml`), made once if it is missing."""
        if self._policy_checked:
            return
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        net = client.NetworkingV1Api(self._client())
        policy = network_policy(self.template_dir)
        try:
            self._call(net.read_namespaced_network_policy, policy["metadata"]["name"], self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            try:
                self._call(net.create_namespaced_network_policy, self.namespace, policy)
            except ApiException as exc2:
                if exc2.status != 409:
                    raise
        except BackendUnavailable as exc:
            if "refused the hub" not in exc.message:
                raise
            log.warning("kubernetes: cannot read or make the NetworkPolicy %s (%s); apply "
                        "deploy/kubernetes/network-policy.yaml in namespace %s by hand",
                        policy["metadata"]["name"], exc.message, self.namespace)
        self._policy_checked = True

    def _deployment(self, session_id: str):  # noqa: ANN202
        from kubernetes.client.exceptions import ApiException

        _, apps = self._apis()
        try:
            return self._call(apps.read_namespaced_deployment, names(session_id)["deployment"], self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _pods(self, session_id: str) -> list:
        core, _ = self._apis()
        return self._call(core.list_namespaced_pod, self.namespace, label_selector=self._selector(session_id)).items

    def status(self, session_id: str) -> dict[str, Any]:
        """`{"status": running|exited|dead|missing, "exit_code", "reason", "addresses"}`: `exited` is
        asleep (scaled to zero), `dead` a pod that will not start by itself (the reason says why)."""
        deployment = self._deployment(session_id)
        if deployment is None:
            return {"status": "missing"}
        if not deployment.spec.replicas:
            return {"status": "exited", "exit_code": None}
        addresses: dict[int, str] = {}
        for pod in self._pods(session_id):
            if pod.metadata.deletion_timestamp is not None:
                continue  # the pod of the last start, going
            for cs in (pod.status.container_statuses or []):
                waiting = cs.state.waiting if cs.state else None
                if waiting is not None and waiting.reason in _STUCK:
                    code = cs.last_state.terminated.exit_code if cs.last_state and cs.last_state.terminated else None
                    return {"status": "dead", "exit_code": code,
                            "reason": f"container {cs.name}: {waiting.reason}: {(waiting.message or '')[:300]}"}
            if pod.status.pod_ip:
                if self.address == "service":
                    host = f"{names(session_id)['service']}.{self.namespace}.svc"
                else:
                    host = pod.status.pod_ip
                addresses = {RUNTIME_PORT: f"{host}:{RUNTIME_PORT}", VIEWER_PORT: f"{host}:{VIEWER_PORT}"}
        return {"status": "running", "exit_code": None, "addresses": addresses}

    def list_sessions(self) -> dict[str, str]:
        """The ids of this hub's sessions the cluster holds, with their status (`running`: scaled to
        one, `exited`: to zero, `volume-only`: objects left without a Deployment)."""
        core, apps = self._apis()
        selector, ns = self._selector(), self.namespace
        found: dict[str, str] = {}
        for d in self._call(apps.list_namespaced_deployment, ns, label_selector=selector).items:
            found[d.metadata.labels[SESSION_LABEL]] = "running" if d.spec.replicas else "exited"
        for lister in (core.list_namespaced_persistent_volume_claim, core.list_namespaced_service,
                       core.list_namespaced_secret):
            for obj in self._call(lister, ns, label_selector=selector).items:
                found.setdefault((obj.metadata.labels or {}).get(SESSION_LABEL, ""), "volume-only")
        found.pop("", None)
        return found

    def _scale(self, session_id: str, replicas: int) -> None:
        from kubernetes.client.exceptions import ApiException

        _, apps = self._apis()
        try:
            self._call(apps.patch_namespaced_deployment_scale, names(session_id)["deployment"], self.namespace,
                       {"spec": {"replicas": replicas}})
        except ApiException as exc:
            if exc.status == 404:
                raise SessionConflict(f"session {session_id}'s Deployment is gone (removed outside the hub)",
                                      f"delete the session (codedesk session delete {session_id}) and create a "
                                      "new one") from exc
            raise

    def pause(self, session_id: str) -> None:
        raise SessionConflict("a pod cannot be frozen in place", "put the session to sleep instead")

    def unpause(self, session_id: str) -> None:
        self._scale(session_id, 1)

    def stop(self, session_id: str) -> None:
        """Sleep: the Deployment scaled to zero (the pod's grace period lets `desktop down` flush
        Chromium's profile); the claim stays."""
        self._scale(session_id, 0)

    def start(self, session_id: str) -> None:
        self._scale(session_id, 1)

    def remove(self, session_id: str) -> None:
        """The session's four objects, whatever is left of them."""
        from kubernetes.client.exceptions import ApiException

        core, apps = self._apis()
        n, ns = names(session_id), self.namespace
        for fn, name in ((apps.delete_namespaced_deployment, n["deployment"]),
                         (core.delete_namespaced_service, n["service"]),
                         (core.delete_namespaced_persistent_volume_claim, n["claim"]),
                         (core.delete_namespaced_secret, n["secret"])):
            try:
                self._call(fn, name, ns)
            except ApiException as exc:
                if exc.status != 404:
                    raise

    def logs(self, session_id: str, tail: int = 30) -> str:
        from kubernetes.client.exceptions import ApiException

        core, _ = self._apis()
        out = []
        for pod in self._pods(session_id):
            try:
                out.append(self._call(core.read_namespaced_pod_log, pod.metadata.name, self.namespace,
                                      container="desktop", tail_lines=tail))
            except ApiException:
                continue
        return "\n".join(out)

    def viewer_secret(self, session_id: str) -> str | None:
        """The viewer's secret of the running session (a new one per start), or None."""
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import stream

        core, _ = self._apis()
        pods = [p for p in self._pods(session_id) if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]
        if not pods:
            return None
        try:
            out = self._call(stream, core.connect_get_namespaced_pod_exec, pods[0].metadata.name, self.namespace,
                             container="desktop", command=READ_VIEWER_FILE, stderr=False, stdin=False,
                             stdout=True, tty=False)
        except ApiException:
            return None
        return viewer_secret(out)


def _api_message(exc: Exception) -> str:
    try:
        return json.loads(exc.body).get("message", "")  # type: ignore[attr-defined]
    except (ValueError, TypeError, AttributeError):
        return str(exc)


_TEMPLATES: dict[Path, list[dict[str, Any]]] = {}


def _template(template_dir: Path) -> list[dict[str, Any]]:
    """The parsed template, read once per hub (sessions are stamped from copies of it)."""
    if template_dir not in _TEMPLATES:
        from runtime.hub.kubernetes_objects import load_template

        _TEMPLATES[template_dir] = load_template(template_dir)
    return _TEMPLATES[template_dir]
