"""Benchmark the container image: its size, the time from `docker run` and from `docker start`
to the first run_js answer, and the idle memory of a running container.

- size: `docker image inspect` (bytes, as `docker images` counts them), and the largest parts
  inside the image (`du` of the folders named in the README).
- cold start: `docker run` (new volume) to the first successful run_js `1 + 1` over HTTP.
- warm start: `docker stop` then `docker start` of the same container to the first answer.
- idle memory: the container's cgroup memory once the session is up and nothing runs (docker
  stats), after 10 s of quiet.

Each start is measured `--runs` times (medians); the baseline in the same run is the time to
the first answer of `/healthz` (the runtime's socket), so the run_js figure shows what the
runtime adds. Runs the image as the README says (seccomp profile, token).

Usage: .venv/bin/python benchmarks/bench_container.py [--image codedesk:latest] [--runs 3] [--quick]
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.container.test_image import SECCOMP, http_get  # noqa: E402

PARTS = ["/usr/lib/chromium", "/usr/lib/libreoffice", "/usr/share/fonts", "/usr/share/tesseract-ocr",
         "/opt/codedesk/.venv", "/home/codedesk/.cache", "/usr/lib/x86_64-linux-gnu", "/usr/share/icons"]


def docker(*args: str) -> str:
    return subprocess.run(["docker", *args], check=True, capture_output=True, text=True, timeout=180).stdout.strip()


def first_answers(port_of, token: str, started: float) -> tuple[float, float]:
    """Seconds from `started` to the first /healthz answer and to the first run_js answer."""
    from tests.container.test_image import call_run_js

    health = None
    while time.monotonic() - started < 120:
        try:
            url = f"http://127.0.0.1:{port_of()}"
            if health is None and http_get(url + "/healthz")[0] == 200:
                health = time.monotonic() - started
            if health is not None and call_run_js(url, token, "1 + 1", timeout=30)["text"] == "2":
                return health, time.monotonic() - started
        except Exception:
            pass
        time.sleep(0.1)
    raise SystemExit("the container did not answer run_js within 120 s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--image", default="codedesk:latest")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one run of each")
    args = parser.parse_args()
    runs = 1 if args.quick else args.runs

    size = int(docker("image", "inspect", "-f", "{{.Size}}", args.image))
    print(f"image {args.image}: {size / 1e9:.2f} GB")
    sizes = docker("run", "--rm", "--entrypoint", "du", args.image, "-sh", *PARTS)
    for line in sizes.splitlines():
        print(f"  {line}")

    cold, cold_health, warm, warm_health, idle = [], [], [], [], []
    for _ in range(runs):
        token = secrets.token_hex(16)
        volume = f"codedesk-bench-{secrets.token_hex(4)}"
        started = time.monotonic()
        cid = docker("run", "-d", "--security-opt", f"seccomp={SECCOMP}", "-e", f"CODEDESK_TOKEN={token}",
                     "-v", f"{volume}:/data", "-p", "127.0.0.1::8765", args.image)
        port_of = lambda: int(docker("port", cid, "8765/tcp").splitlines()[0].rsplit(":", 1)[1])  # noqa: E731
        try:
            h, r = first_answers(port_of, token, started)
            cold_health.append(h)
            cold.append(r)
            # Idle: the session up, nothing running.
            deadline = time.monotonic() + 120
            while subprocess.run(["docker", "exec", cid, "test", "-f", "/data/session.json"]).returncode != 0:
                if time.monotonic() > deadline:
                    raise SystemExit("the desktop session did not start")
                time.sleep(0.5)
            time.sleep(10)
            idle.append(docker("stats", "--no-stream", "--format", "{{.MemUsage}}", cid).split("/")[0].strip())
            docker("stop", "-t", "30", cid)
            started = time.monotonic()
            docker("start", cid)
            h, r = first_answers(port_of, token, started)
            warm_health.append(h)
            warm.append(r)
        finally:
            subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
            subprocess.run(["docker", "volume", "rm", "-f", volume], capture_output=True)

    med = statistics.median
    print(f"docker run   -> /healthz {med(cold_health):.1f} s, first run_js {med(cold):.1f} s "
          f"(runtime adds {med(cold) - med(cold_health):.1f} s)  [{runs} runs]")
    print(f"docker start -> /healthz {med(warm_health):.1f} s, first run_js {med(warm):.1f} s "
          f"(runtime adds {med(warm) - med(warm_health):.1f} s)")
    print(f"idle memory of a running container: {', '.join(idle)}")


if __name__ == "__main__":
    main()
