"""The Docker backend: one container and one named volume per session, through the Docker SDK
for Python against the local engine (never the docker CLI).

- create: a volume `codedesk-<id>-data` on /data, a container `codedesk-<id>` with the image's
  seccomp profile (Chromium's sandbox needs it), the resources as Docker limits, the runtime's
  token in its environment, the runtime's and the viewer's ports published on loopback only;
- pause / unpause: the cgroup freezer (memory kept, resumes at once);
- sleep / wake: stop / start (memory freed, the volume kept);
- delete: the container and the volume. Docker has no per-container secret object: the
  runtime token lives in the container's settings and the hub's database, and goes with both.

Every object carries the labels `codedesk.hub=<hub id>` and `codedesk.session=<id>`, which is how
the hub finds its own after a restart and removes what it no longer knows (orphans).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runtime.hub.errors import BackendUnavailable, SessionStartFailed
from runtime.hub.session_files import READ_VIEWER_FILE, viewer_secret

RUNTIME_PORT = 8765
VIEWER_PORT = 6080
SECCOMP_FLAG = "--security-opt seccomp=desktop-image/seccomp-chromium.json"


class DockerBackend:
    name = "docker"
    can_pause = True

    def __init__(self, hub_id: str, seccomp_profile: Path) -> None:
        self.hub_id = hub_id
        self.seccomp_profile = seccomp_profile
        self._client = None

    # -- the engine
    def _docker(self):  # noqa: ANN202
        import docker
        import docker.errors

        if self._client is None:
            try:
                self._client = docker.from_env(timeout=60)
            except docker.errors.DockerException as exc:
                raise self._unavailable(exc) from exc
        return self._client

    @staticmethod
    def _unavailable(exc: Exception) -> BackendUnavailable:
        return BackendUnavailable(
            f"the Docker engine does not answer ({str(exc).splitlines()[0][:200]}); nothing was changed",
            "start the Docker engine (dockerd; Debian: apt-get install docker.io) or point $DOCKER_HOST "
            "at it, then retry: the hub reconnects by itself")

    def _call(self, fn, *args, **kwargs):  # noqa: ANN001, ANN202
        """`fn(*args)` with the engine's connection failures translated to BackendUnavailable."""
        import docker.errors
        import requests

        try:
            return fn(*args, **kwargs)
        except (requests.exceptions.ConnectionError, docker.errors.DockerException) as exc:
            if isinstance(exc, docker.errors.APIError):
                raise
            self._client = None
            raise self._unavailable(exc) from exc

    def ping(self) -> None:
        self._call(lambda: self._docker().ping())

    def check_image(self, image: str) -> None:
        import docker.errors

        try:
            self._call(lambda: self._docker().images.get(image))
        except docker.errors.ImageNotFound as exc:
            from runtime.hub.errors import InvalidRequest

            raise InvalidRequest(f"the image {image!r} is not in the Docker engine",
                                 "build it (make image builds codedesk:latest) or pull it, or pass "
                                 "another image", field="image") from exc

    # -- names
    @staticmethod
    def container_name(session_id: str) -> str:
        return f"codedesk-{session_id}"

    @staticmethod
    def volume_name(session_id: str) -> str:
        return f"codedesk-{session_id}-data"

    def logs_hint(self, session_id: str) -> str:
        return f"docker logs {self.container_name(session_id)}"

    def _labels(self, session_id: str) -> dict[str, str]:
        return {"codedesk.hub": self.hub_id, "codedesk.session": session_id}

    # -- lifecycle
    def create(self, session_id: str, image: str, resources: dict[str, Any], runtime_token: str) -> dict[str, Any]:
        """Make the session's volume and container and start it; where they are."""
        try:
            profile = json.dumps(json.loads(self.seccomp_profile.read_text()))
        except (OSError, ValueError) as exc:
            raise SessionStartFailed(
                f"the seccomp profile {self.seccomp_profile} cannot be read ({exc}); without it Chromium "
                "cannot start sandboxed under Docker", "pass --seccomp FILE pointing at "
                "desktop-image/seccomp-chromium.json") from exc
        client = self._docker()
        labels = self._labels(session_id)
        volume = self._call(client.volumes.create, name=self.volume_name(session_id), labels=labels)
        limits: dict[str, Any] = {}
        if resources.get("cpus"):
            limits["nano_cpus"] = int(resources["cpus"] * 1e9)
        if resources.get("memory_mb"):
            limits["mem_limit"] = f"{resources['memory_mb']}m"
            limits["memswap_limit"] = f"{resources['memory_mb']}m"
        if resources.get("pids"):
            limits["pids_limit"] = resources["pids"]
        try:
            container = self._call(
                client.containers.run, image, detach=True, name=self.container_name(session_id),
                labels=labels, environment={"CODEDESK_TOKEN": runtime_token},
                volumes={volume.name: {"bind": "/data", "mode": "rw"}},
                ports={f"{RUNTIME_PORT}/tcp": ("127.0.0.1",), f"{VIEWER_PORT}/tcp": ("127.0.0.1",)},
                security_opt=[f"seccomp={profile}"], shm_size="512m", **limits)
        except Exception:
            self._call(volume.remove, force=True)
            raise
        return {"kind": "docker", "container": container.name, "container_id": container.id[:12],
                "volume": volume.name}

    def _container(self, session_id: str):  # noqa: ANN202
        """The session's container, or None when it is gone."""
        import docker.errors

        try:
            return self._call(self._docker().containers.get, self.container_name(session_id))
        except docker.errors.NotFound:
            return None

    def status(self, session_id: str) -> dict[str, Any]:
        """`{"status": running|paused|exited|created|restarting|missing, "exit_code", "addresses"}`, the
        addresses being where the hub reaches the session's ports: `{8765: "127.0.0.1:49153", ...}`."""
        container = self._container(session_id)
        if container is None:
            return {"status": "missing"}
        state = container.attrs.get("State", {})
        addresses = {}
        for inner, bound in (container.attrs.get("NetworkSettings", {}).get("Ports") or {}).items():
            if bound:
                addresses[int(inner.split("/")[0])] = f"127.0.0.1:{bound[0]['HostPort']}"
        return {"status": state.get("Status", "unknown"), "exit_code": state.get("ExitCode"), "addresses": addresses}

    def list_sessions(self) -> dict[str, str]:
        """The ids of this hub's sessions the engine holds (containers or volumes), with their status."""
        client = self._docker()
        found: dict[str, str] = {}
        label = f"codedesk.hub={self.hub_id}"
        for c in self._call(client.containers.list, all=True, filters={"label": label}):
            found[c.labels["codedesk.session"]] = c.status
        for v in self._call(client.volumes.list, filters={"label": label}):
            found.setdefault((v.attrs.get("Labels") or {}).get("codedesk.session", ""), "volume-only")
        found.pop("", None)
        return found

    def pause(self, session_id: str) -> None:
        self._call(self._required(session_id).pause)

    def unpause(self, session_id: str) -> None:
        self._call(self._required(session_id).unpause)

    def stop(self, session_id: str) -> None:
        self._call(self._required(session_id).stop, timeout=30)

    def start(self, session_id: str) -> None:
        self._call(self._required(session_id).start)

    def remove(self, session_id: str) -> None:
        """The container and the volume, whatever is left of them."""
        import docker.errors

        container = self._container(session_id)
        if container is not None:
            try:
                self._call(container.remove, force=True)
            except docker.errors.NotFound:
                pass
        try:
            self._call(self._docker().volumes.get(self.volume_name(session_id)).remove, force=True)
        except docker.errors.NotFound:
            pass

    def logs(self, session_id: str, tail: int = 30) -> str:
        container = self._container(session_id)
        if container is None:
            return ""
        return self._call(container.logs, tail=tail).decode(errors="replace")

    def viewer_secret(self, session_id: str) -> str | None:
        """The viewer's secret of the running session (a new one per start), or None."""
        container = self._container(session_id)
        if container is None:
            return None
        code, out = self._call(container.exec_run, READ_VIEWER_FILE, user="root")
        return viewer_secret(out) if code == 0 else None

    def _required(self, session_id: str):  # noqa: ANN202
        container = self._container(session_id)
        if container is None:
            from runtime.hub.errors import SessionConflict

            raise SessionConflict(f"session {session_id}'s container is gone (removed outside the hub)",
                                  f"delete the session (codedesk session delete {session_id}) and create a new one")
        return container
