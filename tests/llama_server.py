"""llama.cpp's real `llama-server` for the integration tests: find or build the binary
(scripts/build-llama-server.sh, cached per version), start it on a tiny model, stop it."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-llama-server.sh"
STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0


def llama_server_binary() -> Path:
    """$KL_BITEXACT_LLAMA_SERVER, else the build script's cached binary (built if absent)."""
    given = os.environ.get("KL_BITEXACT_LLAMA_SERVER")
    if given:
        return Path(given)
    built = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=True
    )
    return Path(built.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def running_llama_server(binary: Path, model: Path, workdir: Path) -> Iterator[str]:
    """Serve `model`; yields the base URL.

    Four slots, so each sample of a small batch keeps its own cache; `--cache-ram 0` and
    `--slot-save-path` so that erasing the slots really empties every cache; one thread.
    Flash attention off: on CPU it makes a one-token decode step differ from a prefill by up
    to ~1e-3 in logprob (docs/engines.md), which would drown the cache's last-bit drift.
    """
    slots = workdir / "slots"
    slots.mkdir(exist_ok=True)
    port = free_port()
    command = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
    command += ["-np", "4", "-c", "4096", "-t", "1", "--cache-ram", "0", "-fa", "off"]
    command += ["--slot-save-path", f"{slots}/"]
    log_path = workdir / "llama-server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_healthy(url, process, log_path)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_healthy(url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            if requests.get(url + "/health", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    tail = log_path.read_text(errors="replace")[-2000:]
    raise RuntimeError(f"llama-server did not become healthy at {url}:\n{tail}")
