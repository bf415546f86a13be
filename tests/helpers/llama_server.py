"""llama.cpp's real `llama-server` for the integration tests: find or build the binary
(scripts/build-llama-server.sh, cached per version) and the commands that serve a model."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kl_bitexact.run import server
from kl_bitexact.suite.model import PORT_PLACEHOLDER, DialectName, EngineName, ServerSpec

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-llama-server.sh"
STARTUP_TIMEOUT_S = 60.0
# Flash attention off everywhere: on CPU it makes a one-token decode step differ from a
# prefill by up to ~1e-3 in logprob (docs/engines.md), which would drown the cache's
# last-bit drift.
FLASH_ATTENTION_OFF = ("-fa", "off")


def llama_server_binary() -> Path:
    """$KL_BITEXACT_LLAMA_SERVER, else the build script's cached binary (built if absent)."""
    given = os.environ.get("KL_BITEXACT_LLAMA_SERVER")
    if given:
        return Path(given)
    built = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=True
    )
    return Path(built.stdout.strip().splitlines()[-1])


def _serving(model: Path) -> list[str]:
    return [str(llama_server_binary()), "-m", str(model), "--host", "127.0.0.1"]


def llama_server_command(model: Path, workdir: Path, *, slot_actions: bool = True) -> list[str]:
    """Serve `model` on `{port}` the way docs/engines.md documents for every check.

    Four slots, so each sample of a small batch keeps its own cache; `--cache-ram 0` and
    `--slot-save-path` so that erasing the slots really empties every cache (only `multiturn`
    needs that); one thread.
    """
    command = [*_serving(model), "--port", PORT_PLACEHOLDER, "-np", "4", "-c", "4096", "-t", "1"]
    command += [*FLASH_ATTENTION_OFF, "--cache-ram", "0"]
    if not slot_actions:
        return command
    slots = workdir / "slots"
    slots.mkdir(exist_ok=True)
    return [*command, "--slot-save-path", f"{slots}/"]


def default_command(model: Path, slots: int) -> list[str]:
    """Serve `model` as a user starts llama-server: default flags (host-RAM prompt cache on,
    no slot actions), `slots` slots, and flash attention off."""
    command = [*_serving(model), "--port", PORT_PLACEHOLDER, "-c", "2048", "-np", str(slots)]
    return [*command, "-t", "1", *FLASH_ATTENTION_OFF]


@contextmanager
def running_llama_server(model: Path, workdir: Path, *, slot_actions: bool = True) -> Iterator[str]:
    """Launched the way `kl-bitexact run` launches a suite's server; yields the base URL."""
    with running_command(
        llama_server_command(model, workdir, slot_actions=slot_actions), workdir
    ) as url:
        yield url


@contextmanager
def running_command(command: list[str], workdir: Path) -> Iterator[str]:
    spec = ServerSpec(
        engine=EngineName.OPENAI,
        dialect=DialectName.LLAMACPP,
        command=tuple(command),
        startup_timeout=STARTUP_TIMEOUT_S,
    )
    running = server.launch(spec, workdir / "llama-server.log", label="llama-server")
    try:
        yield running.base_url
    finally:
        running.stop()
