"""sglang's own KL helpers, fetched from its wheel on PyPI and imported with small shims.

sglang publishes its test helpers inside its wheel (`sglang/test/kl_test_utils.py` and
friends). They are the oracle the differential tests compare `kl-bitexact` with, so they are
fetched at test time, pinned by version, and never installed nor committed: `pip download
--no-deps` gets the wheel (a zip), the few files below are read out of it into the cache, and
the wheel is deleted. Everything those files import from the rest of sglang (a tokenizer,
`kill_process_tree`, `popen_launch_server`, env flags) is a shim of ours, defined here.

    from sglang_wheel import load_sglang_module
    kl = load_sglang_module("kl_test_utils")       # or "sglang.test.kl_test_utils"

`load_sglang_module` raises `SglangWheelError` when the wheel cannot be fetched: a test that
needs the oracle fails then, it is never skipped (CI has network to PyPI).

Bumping the version: change `SGLANG_VERSION` (and the platform tag if the new wheel's
differs), run tests/differential/, and read what changed in the five files (docs/sglang-oracle.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import types
import unittest
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import process_groups
import requests

from kl_bitexact.results import verdict

SGLANG_VERSION = "0.5.23"
# The wheel is platform-specific only for its compiled parts; the test helpers are pure Python.
# These flags let pip fetch the published Linux wheel from any machine.
PIP_PLATFORM_FLAGS = (
    "--only-binary",
    ":all:",
    "--python-version",
    "3.11",
    "--platform",
    "manylinux_2_34_x86_64",
)
# The files read out of the wheel: the KL helpers, the multi-turn helpers, the unittest mixin,
# the server launcher module real test files import from, the CI partitioner, and the server
# base class most model test files derive from; then what sglang's KL test files import
# beside them (docs/sglang-oracle.md lists the files): the cache-hit, accuracy and
# branching kits, the disaggregation fixture, and the random-prompt dataset the cache-hit
# kit draws from.
WHEEL_FILES = (
    "sglang/test/kl_test_utils.py",
    "sglang/test/kl_multiturn_utils.py",
    "sglang/test/kits/kl_divergence_kit.py",
    "sglang/test/test_utils.py",
    "sglang/test/ci/ci_register.py",
    "sglang/test/server_fixtures/default_fixture.py",
    "sglang/test/kits/cache_hit_kit.py",
    "sglang/test/kits/eval_accuracy_kit.py",
    "sglang/test/kits/prefix_cache_branching_kit.py",
    "sglang/test/server_fixtures/disaggregation_fixture.py",
    "sglang/benchmark/datasets/common.py",
    "sglang/benchmark/datasets/random.py",
    "sglang/benchmark/utils.py",
)
DOWNLOAD_TIMEOUT_S = 600
LISTENING = "kl-bitexact reference server listening on "


class SglangWheelError(RuntimeError):
    """The wheel could not be fetched or read; the message says what to do."""


def cache_dir(version: str = SGLANG_VERSION) -> Path:
    root = os.environ.get("KL_BITEXACT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kl-bitexact"
    )
    return Path(root) / "sglang-wheel" / version


def source_root(version: str = SGLANG_VERSION) -> Path:
    """The directory holding `sglang/test/...` read out of the wheel, fetching it once."""
    directory = cache_dir(version)
    root = directory / "src"
    if _complete(root):
        return root
    directory.mkdir(parents=True, exist_ok=True)
    # One download at a time: parallel test sessions wait for the first one's files.
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _complete(root):
            _fetch(version, directory, root)
    return root


def _complete(root: Path) -> bool:
    return all((root / name).is_file() for name in WHEEL_FILES)


def _fetch(version: str, directory: Path, root: Path) -> None:
    with tempfile.TemporaryDirectory(dir=directory) as download:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            *PIP_PLATFORM_FLAGS,
            f"sglang=={version}",
            "-d",
            download,
        ]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired:
            raise SglangWheelError(
                f"`pip download sglang=={version}` took over {DOWNLOAD_TIMEOUT_S}s; "
                "check the network to PyPI"
            ) from None
        wheels = sorted(Path(download).glob("sglang-*.whl"))
        if done.returncode != 0 or not wheels:
            raise SglangWheelError(
                f"could not download sglang=={version} from PyPI (needed as the oracle of "
                f"tests/differential): {' '.join(command)}\n{done.stderr.strip()[-2000:]}"
            )
        staging = Path(download) / "src"
        with zipfile.ZipFile(wheels[0]) as wheel:
            present = set(wheel.namelist())
            missing = [name for name in WHEEL_FILES if name not in present]
            if missing:
                raise SglangWheelError(
                    f"{wheels[0].name} lacks {', '.join(missing)}: sglang moved its test "
                    "helpers; update WHEEL_FILES in tests/helpers/sglang_wheel.py"
                )
            for name in WHEEL_FILES:
                target = staging / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(wheel.read(name))
        # File by file, each replaced atomically: a session reading the files an older
        # WHEEL_FILES listed keeps reading them while the new ones arrive.
        for name in WHEEL_FILES:
            target = root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / name, target)


# --- shims: what the five files import from the rest of sglang ---------------------------


class ReferenceTokenizer:
    """The reference engine has no tokenizer (token ids 0..319, 0 = EOS); sglang's helpers only
    encode short separators such as ",". One id per character, never 0, stable across runs."""

    vocab_size = 320
    eos_token_id = 0

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [1 + ord(char) % (self.vocab_size - 1) for char in text]

    def decode(self, ids: Sequence[int], **_: Any) -> str:
        return ""


def get_tokenizer(tokenizer_name: str = "", *args: Any, **kwargs: Any) -> ReferenceTokenizer:
    return ReferenceTokenizer()


def kill_process_tree(parent_pid: int | None, include_parent: bool = True, **_: Any) -> None:
    """Servers started by `popen_launch_server` lead their own process group."""
    if parent_pid is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(parent_pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            finished, _status = os.waitpid(parent_pid, os.WNOHANG)
        except ChildProcessError:
            return
        if finished:
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(parent_pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(parent_pid, 0)


# sglang server flags the reference engine understands (same spelling, same meaning) and
# whether they take a value. Other flags are dropped when IGNORED_FLAGS says why they change
# nothing a KL test can observe on a one-process numpy model; any other flag (unknown ones
# included) names a path the engine does not have, and the test is not judged
# (`needed`, popen_launch_server): never silently dropped.
REFERENCE_FLAGS: dict[str, bool] = {
    "--page-size": True,
    "--mamba-track-interval": True,
    "--chunked-prefill-size": True,
    "--sliding-window": True,
    "--context-length": True,
    "--max-total-tokens": True,
    "--disable-radix-cache": False,
    "--enable-hierarchical-cache": False,
    "--hicache-write-policy": True,
    "--hicache-ratio": True,
    "--speculative-algorithm": True,
    "--speculative-num-draft-tokens": True,
    "--enable-deterministic-inference": False,
    "--random-seed": True,
    "--fault": True,
    "--vocab-size": True,
}
# Flags that only size, place or load what the reference engine does in one process with one
# arithmetic (why each is safe to drop), and the values of a flag that mean what the engine
# does anyway.
# sglang's switch for its overlapping scheduler: without it, the launcher adds
# serve-reference's --overlap-schedule (served_defaults).
DISABLE_OVERLAP = "--disable-overlap-schedule"
_RESOURCES = "memory sizing, loading or batching limits: no path of its own"
_PLACEMENT = "parallel placement of the same arithmetic: one process here"
_KERNELS = "a kernel or graph backend: the reference engine has one arithmetic"
_TEXT = "text parsing: the reference engine answers token ids"
IGNORED_FLAGS: dict[str, str] = {
    **dict.fromkeys(
        (
            "--mem-fraction-static",
            "--trust-remote-code",
            "--trust-remote",
            "--revision",
            "--model-loader-extra-config",
            "--weight-loader-prefetch-checkpoints",
            "--max-running-requests",
            "--swa-full-tokens-ratio",
            "--max-mamba-cache-size",
            "--mamba-full-memory-ratio",
            "--hicache-mem-layout",
            "--hicache-io-backend",
            "--enable-metrics",
            "--enable-cache-report",
            "--log-level",
        ),
        _RESOURCES,
    ),
    **dict.fromkeys(("--tp", "--tp-size", "--device"), _PLACEMENT),
    **dict.fromkeys(
        (
            "--attention-backend",
            "--moe-runner-backend",
            "--fp4-gemm-backend",
            "--speculative-draft-attention-backend",
            "--mm-attention-backend",
            "--cuda-graph-max-bs",
            "--cuda-graph-max-bs-decode",
            "--cuda-graph-backend-prefill",
            "--disable-cuda-graph",
            "--disable-piecewise-cuda-graph",
            "--disable-shared-experts-fusion",
            "--enable-torch-symm-mem",
        ),
        _KERNELS,
    ),
    **dict.fromkeys(("--reasoning-parser", "--tool-call-parser"), _TEXT),
    DISABLE_OVERLAP: "the reference engine then caches as a non-overlapping scheduler does",
}
# Flags whose listed values are what the reference engine does anyway.
IMPLIED_VALUES: dict[str, frozenset[str]] = {
    # a chain of drafts (top-1), as the built-in draft proposes; the chain's length is
    # --speculative-num-draft-tokens, which sglang sets to num-steps + 1 for top-1
    "--speculative-eagle-topk": frozenset({"1"}),
    "--speculative-num-steps": frozenset(str(n) for n in range(1, 64)),
}
# Not implied, though close: sglang's mamba extra_buffer / extra_buffer_lazy strategies track
# the recurrent state for caching with the overlapping scheduler, as serve-reference does
# with --overlap-schedule, but which prefill positions they keep differs (measured on
# sglang's August 2026 files: prefill hits 16/32 where sglang asserts more than half, with a
# track interval of 2 on pages of 1 or 2): they stay "needs" until the engine models it.
# The skip reason kl-bitexact reads as "not judged" (results/verdict.py: one wording).
NOT_JUDGED = verdict.NOT_JUDGED
SERVED_CONTEXT_LENGTH = 32768
# sglang's files draw random token ids up to 30000 (`rng.randint(1, 30000)`); real
# tokenizers have 150k+ ids. The engine's extra ids cost memory, not time (reference-engine.md).
SERVED_VOCAB_SIZE = 32768
# sglang's speculative algorithms the reference engine does not name: same built-in draft.
SPECULATIVE_ALIASES = {"NEXTN": "EAGLE"}


def reference_args(other_args: Sequence[object]) -> tuple[list[str], list[str]]:
    """sglang launch flags -> (serve-reference flags, dropped flags)."""
    args = [str(arg) for arg in other_args]
    kept: list[str] = []
    dropped: list[str] = []
    index = 0
    while index < len(args):
        flag, _, inline = args[index].partition("=")
        takes_value = REFERENCE_FLAGS.get(flag)
        has_next = index + 1 < len(args) and not args[index + 1].startswith("--")
        if takes_value is None:
            consumed = 1 if inline or not has_next else 2
            dropped.extend(args[index : index + consumed])
            index += consumed
            continue
        if takes_value and not inline and has_next:
            value = args[index + 1]
            index += 2
        else:
            value = inline
            index += 1
        if flag == "--speculative-algorithm":
            value = SPECULATIVE_ALIASES.get(value, value)
        kept.extend([flag, value] if takes_value else [flag])
    return kept, dropped


def needed(dropped: Sequence[str]) -> list[str]:
    """The dropped flags (with their values) that name a path the reference engine lacks:
    neither IGNORED_FLAGS nor a value IMPLIED_VALUES lists."""
    found: list[str] = []
    index = 0
    while index < len(dropped):
        flag, _, inline = dropped[index].partition("=")
        has_value = (
            not inline and index + 1 < len(dropped) and not dropped[index + 1].startswith("--")
        )
        value = inline or (dropped[index + 1] if has_value else "")
        index += 2 if has_value else 1
        if flag in IGNORED_FLAGS or value in IMPLIED_VALUES.get(flag, ()):
            continue
        found.append(f"{flag} {value}".strip())
    return found


def served_defaults(flags: Sequence[str]) -> list[str]:
    """What a served model has that the reference engine's defaults lack, unless set."""
    added: list[str] = []
    if DISABLE_OVERLAP not in flags:
        # sglang's default scheduler overlaps: a finished request is cached whole.
        added += ["--overlap-schedule"]
    if "--context-length" not in flags:
        # A served model's context is tens of thousands of tokens; the reference engine's 4096
        # default refused the second turn of sglang's own 2048-token decode test with a 400.
        added += ["--context-length", str(SERVED_CONTEXT_LENGTH)]
    if "--vocab-size" not in flags:
        added += ["--vocab-size", str(SERVED_VOCAB_SIZE)]
    if "--page-size" in flags and "--mamba-track-interval" not in flags:
        # A file that sets a page size but no track interval serves a model without a
        # recurrent state, whose cache keeps every page of a decode: a checkpoint on every
        # page is what the reference engine's hybrid model needs to keep them too.
        added += ["--mamba-track-interval", flags[flags.index("--page-size") + 1]]
    return added


def popen_launch_server(
    model: str,
    base_url: str,
    timeout: float,
    api_key: str | None = None,
    other_args: Sequence[object] | None = None,
    env: dict[str, str] | None = None,
    return_stdout_stderr: tuple[Any, Any] | None = None,
    device: str = "auto",
    **_: Any,
) -> subprocess.Popen[str]:
    """sglang's launcher, starting `kl-bitexact serve-reference` on base_url's port instead.

    Extra flags: $KL_BITEXACT_REFERENCE_ARGS (e.g. `--fault checkpoint-off-by-one`), so an
    unedited sglang test file runs against a faulty engine."""
    _scheme, host, port = base_url.split(":")
    flags, dropped = reference_args(other_args or ())
    if DISABLE_OVERLAP in dropped:
        flags.append(DISABLE_OVERLAP)  # read by served_defaults, removed below
    missing = needed(dropped)
    if missing:
        # The test would run a path the engine does not have: neither red nor green.
        raise unittest.SkipTest(f"{NOT_JUDGED}: needs {', '.join(missing)}")
    extra = (env or {}).get("KL_BITEXACT_REFERENCE_ARGS") or os.environ.get(
        "KL_BITEXACT_REFERENCE_ARGS", ""
    )
    flags += served_defaults([*flags, *extra.split()])
    flags = [flag for flag in flags if flag != DISABLE_OVERLAP]
    command = [
        sys.executable,
        "-m",
        "kl_bitexact",
        "serve-reference",
        "--host",
        host.removeprefix("//"),
        "--port",
        port.split("/")[0],
        *flags,
        *extra.split(),
    ]
    if dropped:
        print(f"sglang_wheel: serve-reference ignores {' '.join(dropped)}", file=sys.stderr)
    # sglang passes (stdout, stderr) files to capture the server's log; ours goes to stderr.
    stderr = (return_stdout_stderr or (None, None))[1]
    # A group of its own, killed with the session at the latest (process_groups.py).
    process = process_groups.start(
        command,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith(LISTENING):
        kill_process_tree(process.pid)
        raise RuntimeError(f"serve-reference did not start ({' '.join(command)}): {line!r}")
    _wait_healthy(base_url, timeout)
    return process


def terminate_and_kill_process_tree(process: subprocess.Popen[str], **_: Any) -> None:
    kill_process_tree(process.pid)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_healthy(base_url: str, timeout: float) -> None:
    deadline = time.monotonic() + min(timeout, 120)
    while time.monotonic() < deadline:
        with contextlib.suppress(requests.RequestException):
            if requests.get(base_url + "/health", timeout=5).status_code == 200:
                return
        time.sleep(0.1)
    raise TimeoutError(f"{base_url} did not answer /health")


def is_port_available(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def get_bool_env_var(name: str, default: str = "false") -> bool:
    return os.environ.get(name, default).lower() in ("true", "1")


def retry(fn: Any, max_retry: int = 0, **_: Any) -> Any:
    return fn()


NEEDS_A_REAL_MODEL = "needs a real model"


def _needs_a_real_model(what: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise unittest.SkipTest(
            f"{NOT_JUDGED}: {NEEDS_A_REAL_MODEL} ({what} scores a real model's answers; the "
            "reference engine has no tokenizer and answers random tokens)"
        )

    return refuse


@dataclasses.dataclass
class RequestFuncOutput:
    """What a benchmark request measured; sglang's cache-hit kit fills one per request (its
    own lives in sglang.benchmark.serving, which imports half of sglang's benchmarks)."""

    generated_text: str = ""
    success: bool = False
    latency: float = 0.0
    ttft: float = 0.0
    itl: list[float] = dataclasses.field(default_factory=list)
    prompt_len: int = 0
    error: str = ""
    output_len: int = 0
    cached_tokens: int = 0


# sglang's random-prompt dataset samples token ids from ShareGPT conversations, downloaded
# from the hub; the reference engine's stand-in is a file of the same shape, made once.
SHAREGPT_CONVERSATIONS = 256


def sharegpt_stand_in(*args: Any, **kwargs: Any) -> str:
    import json

    path = cache_dir() / "sharegpt" / "conversations.json"
    if not path.is_file():
        rng = random.Random(26)
        letters = "abcdefghijklmnopqrstuvwxyz ,."

        def text() -> str:
            return "".join(rng.choice(letters) for _ in range(rng.randint(20, 600)))

        conversations = [
            {
                "conversations": [
                    {"from": "human", "value": text()},
                    {"from": "gpt", "value": text()},
                ]
            }
            for _ in range(SHAREGPT_CONVERSATIONS)
        ]
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_suffix(f".{os.getpid()}.tmp")
        scratch.write_text(json.dumps(conversations))
        os.replace(scratch, path)
    return str(path)


class _EnvFlag:
    def __init__(self, default: Any) -> None:
        self.default = default

    def get(self) -> Any:
        return self.default


class _Envs:
    """sglang.srt.environ.envs: every flag at its default (None)."""

    def __getattr__(self, name: str) -> _EnvFlag:
        return _EnvFlag(None)


class _Unavailable:
    """A name test_utils imports from a library the oracle never calls (torch, PIL, ...)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> _Unavailable:
        return _unavailable_attribute(self._name, attribute)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self._name} is not available in kl-bitexact's sglang shims")

    def __mro_entries__(self, bases: tuple[object, ...]) -> tuple[type, ...]:
        return (object,)


def _unavailable_attribute(owner: str, attribute: str) -> _Unavailable:
    # Dunders stay missing: tools that walk sys.modules (hypothesis reads every module's
    # `__file__`, inspect and copy probe `__wrapped__`...) must see a plain module, not a stub.
    if attribute.startswith("__") and attribute.endswith("__"):
        raise AttributeError(f"{owner} has no {attribute}")
    return _Unavailable(f"{owner}.{attribute}")


def _stub_module(name: str, **attributes: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    module.__getattr__ = functools.partial(_unavailable_attribute, name)  # type: ignore[method-assign]
    module.__path__ = []  # a package, so `import name.sub` finds the next stub
    return module


def _shim_modules() -> dict[str, types.ModuleType]:
    false = lambda *args, **kwargs: False  # noqa: E731 - no GPU of any brand here
    utils = {
        "get_bool_env_var": get_bool_env_var,
        "get_device": lambda *args, **kwargs: "cpu",
        "is_blackwell": false,
        "is_cuda": false,
        "is_xpu": false,
        "is_hip": false,
        "is_npu": false,
        "kill_process_tree": kill_process_tree,
        "retry": retry,
    }
    return {
        "sglang.srt": _stub_module("sglang.srt"),
        "sglang.srt.utils": _stub_module("sglang.srt.utils", **utils),
        "sglang.srt.utils.hf_transformers_utils": _stub_module(
            "sglang.srt.utils.hf_transformers_utils", get_tokenizer=get_tokenizer
        ),
        "sglang.srt.utils.network": _stub_module(
            "sglang.srt.utils.network", is_port_available=is_port_available
        ),
        "sglang.srt.environ": _stub_module("sglang.srt.environ", envs=_Envs()),
        "sglang.utils": _stub_module(
            "sglang.utils",
            normalize_base_url=lambda url: url.rstrip("/"),
            is_in_ci=lambda: get_bool_env_var("SGLANG_IS_IN_CI"),
        ),
        "sglang.benchmark": _stub_module("sglang.benchmark"),
        "sglang.benchmark.serving": _stub_module(
            "sglang.benchmark.serving", RequestFuncOutput=RequestFuncOutput
        ),
        # where sglang's benchmark scripts (benchmark/hicache/) still import it from
        "sglang.bench_serving": _stub_module(
            "sglang.bench_serving", RequestFuncOutput=RequestFuncOutput
        ),
        "sglang.test.run_eval": _stub_module(
            "sglang.test.run_eval", run_eval=_needs_a_real_model("run_eval (gsm8k, mmlu, ...)")
        ),
        "sglang.test.few_shot_gsm8k": _stub_module(
            "sglang.test.few_shot_gsm8k", run_eval=_needs_a_real_model("few-shot GSM8K")
        ),
        "sglang.lang": _stub_module("sglang.lang"),
        "sglang.lang.global_config": _stub_module("sglang.lang.global_config"),
        "sglang.test.sgl_eval_utils": _stub_module(
            "sglang.test.sgl_eval_utils",
            SGL_EVAL_BENCHMARKS=frozenset(),
            run_sgl_eval=_needs_a_real_model("sglang's eval harness"),
        ),
    }


# Third-party libraries test_utils imports at module level but the KL tests never use. Stubbed
# only while test_utils executes, and only when really absent, so no other test sees a fake.
THIRD_PARTY: tuple[str, ...] = ("torch", "torch.nn", "torch.nn.functional", "PIL", "PIL.Image")
THIRD_PARTY += ("aiohttp",)
THIRD_PARTY += ("psutil",)


class _Finder(importlib.abc.MetaPathFinder):
    """Serves `sglang.*`: the wheel's files from the cache, packages as directories, shims."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.shims = _shim_modules()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "sglang" and not fullname.startswith("sglang."):
            return None
        if fullname in self.shims:
            return importlib.util.spec_from_loader(fullname, _ShimLoader(self.shims[fullname]))
        relative = Path(*fullname.split("."))
        source = self.root / relative.with_suffix(".py")
        if source.is_file():
            loader = _WheelSourceLoader(fullname, str(source))
            return importlib.util.spec_from_file_location(fullname, source, loader=loader)
        if (self.root / relative).is_dir():
            spec = importlib.machinery.ModuleSpec(fullname, None, is_package=True)
            spec.submodule_search_locations = [str(self.root / relative)]
            return spec
        return None


class _ShimLoader(importlib.abc.Loader):
    def __init__(self, module: types.ModuleType) -> None:
        self.module = module

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return self.module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


# Third-party libraries other wheel modules import at module level for what the KL files
# never reach (model tokenizers: sglang's get_tokenizer is replaced below).
TRANSFORMERS: tuple[str, ...] = ("transformers",)
STUBBED_WHILE_LOADING = {
    "sglang.test.test_utils": THIRD_PARTY,
    "sglang.benchmark.utils": (*TRANSFORMERS, "tqdm", "tqdm.asyncio"),
    "sglang.benchmark.datasets.random": TRANSFORMERS,
}


class _WheelSourceLoader(importlib.machinery.SourceFileLoader):
    def exec_module(self, module: types.ModuleType) -> None:
        with _third_party_stubs(STUBBED_WHILE_LOADING.get(module.__name__, ())):
            super().exec_module(module)
        adapt = _ADAPTERS.get(module.__name__)
        if adapt is not None:
            adapt(module)


def _adapt_test_utils(module: Any) -> None:
    # The real launcher starts `sglang serve`; ours starts the reference engine.
    module.popen_launch_server = popen_launch_server
    module.kill_process_tree = kill_process_tree
    module.terminate_and_kill_process_tree = terminate_and_kill_process_tree
    # sglang's fixed port (21000) would collide between parallel test sessions.
    module.DEFAULT_URL_FOR_TEST = f"http://127.0.0.1:{free_port()}"


def _adapt_kl_test_utils(module: Any) -> None:
    """sglang's LongBench prompt cache, for every model name and size a file asks for: our
    prompts are written into the cache directory (kl-bitexact's own, never sglang's, so a
    real sglang run on this machine never reads them) before sglang's get_input_ids reads it."""
    module.CACHE_DIR = os.environ.get(LONGBENCH_DIR_ENV) or str(cache_dir() / "longbench")
    original = module.get_input_ids

    @functools.wraps(original)
    def get_input_ids(
        tokenizer_path: str,
        max_prompt_tokens: int = 3000,
        num_samples: int | None = None,
        **kw: Any,
    ) -> Any:
        count = num_samples if num_samples is not None else module.DEFAULT_NUM_SAMPLES
        ensure_longbench_prompts(module.CACHE_DIR, tokenizer_path, max_prompt_tokens, count)
        return original(tokenizer_path, max_prompt_tokens, num_samples, **kw)

    module.get_input_ids = get_input_ids


def _adapt_benchmark_utils(module: Any) -> None:
    module.get_tokenizer = get_tokenizer
    module.download_and_cache_hf_file = sharegpt_stand_in


def _adapt_prefix_cache_branching_kit(module: Any) -> None:
    # Its requests carry `text`; the hit it expects is counted in a real tokenizer's tokens.
    module.PrefixCacheBranchingMixin.send_request_helper = classmethod(
        _needs_a_real_model("the prefix-cache branching kit (it sends text)")
    )


_ADAPTERS = {
    "sglang.test.test_utils": _adapt_test_utils,
    "sglang.test.kl_test_utils": _adapt_kl_test_utils,
    "sglang.benchmark.utils": _adapt_benchmark_utils,
    "sglang.test.kits.prefix_cache_branching_kit": _adapt_prefix_cache_branching_kit,
}

LONGBENCH_DIR_ENV = "KL_BITEXACT_LONGBENCH_DIR"
# Our stand-in for LongBench prompts: lengths and ids from a seed of the file's name, so
# every run (and every process of one run) reads the same prompts. sglang's are 1500-4500
# tokens (3000 x 0.5..1.5); its multi-turn tests cut a 512-token prefix from each and expect
# a hit of exactly 512, so ours are longer than that, yet short enough for a CPU engine.
LONGBENCH_LENGTHS = (520, 1100)


def ensure_longbench_prompts(
    directory: str, model: str, max_prompt_tokens: int, num_samples: int
) -> Path:
    """sglang's cache file `input_ids_{model}_{tokens}_{samples}.json` in `directory`,
    written (atomically) when absent: `num_samples` prompts of 520-1100 token ids in 1..30000."""
    import json
    import zlib

    safe = model.replace("/", "_").replace("\\", "_")
    path = Path(directory, f"input_ids_{safe}_{max_prompt_tokens}_{num_samples}.json")
    if path.is_file():
        return path
    rng = random.Random(zlib.crc32(path.name.encode()))
    prompts = [
        [rng.randint(1, 30000) for _ in range(rng.randint(*LONGBENCH_LENGTHS))]
        for _ in range(num_samples)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(f".{os.getpid()}.tmp")
    scratch.write_text(json.dumps(prompts))
    os.replace(scratch, path)
    return path


@contextlib.contextmanager
def _third_party_stubs(names: Sequence[str]) -> Iterator[None]:
    absent = {
        top
        for top in {name.split(".")[0] for name in names}
        if top not in sys.modules and importlib.util.find_spec(top) is None
    }
    added = [name for name in names if name.split(".")[0] in absent]
    for name in added:
        sys.modules[name] = _stub_module(name)
    try:
        yield
    finally:
        for name in added:
            sys.modules.pop(name, None)


@functools.cache
def install(version: str = SGLANG_VERSION) -> Path:
    """Fetch the files (once) and make `import sglang.test...` resolve to them; idempotent."""
    root = source_root(version)
    if "sglang" in sys.modules and not isinstance(
        getattr(sys.modules["sglang"], "__spec__", None), importlib.machinery.ModuleSpec
    ):
        raise SglangWheelError("a different `sglang` is already imported")
    sys.meta_path.insert(0, _Finder(root))
    return root


def load_sglang_module(name: str) -> types.ModuleType:
    """`kl_test_utils`, `kl_multiturn_utils`, `kits.kl_divergence_kit`, `test_utils`,
    `ci.ci_register`, `server_fixtures.default_fixture` (or their full `sglang.test.` names)
    from the pinned wheel."""
    install()
    full = name if name.startswith("sglang.") else f"sglang.test.{name}"
    module = importlib.import_module(full)
    return module


REFERENCE_MODEL = "kl-bitexact-reference"


def child_env(
    scratch: Path,
    *,
    fault: str | None = None,
    pythonpath: Sequence[str] = (),
    reference_args: Sequence[str] = (),
) -> dict[str, str]:
    """The environment of a child `kl-bitexact pytest -- -p sglang_wheel ...`: sglang's
    LongBench prompt cache under `scratch` (48 prompts for the reference model), the wheel
    where this session fetched it, this helper and this kl_bitexact importable (after
    `pythonpath`), and `fault` and `reference_args` for the reference engine
    popen_launch_server starts."""
    import json

    import numpy as np

    cache = scratch / "xdg"
    longbench = cache / "sglang" / "longbench"
    longbench.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(4)
    prompts = [rng.integers(1, 320, int(rng.integers(60, 200))).tolist() for _ in range(48)]
    (longbench / f"input_ids_{REFERENCE_MODEL}_3000_48.json").write_text(json.dumps(prompts))
    import kl_bitexact

    own = [str(Path(__file__).parent), str(Path(kl_bitexact.__file__).parents[1])]
    return {
        **os.environ,
        "XDG_CACHE_HOME": str(cache),
        # the wheel stays where the session fetched it, whatever XDG_CACHE_HOME says
        "KL_BITEXACT_CACHE": str(cache_dir().parents[1]),
        "PYTHONPATH": os.pathsep.join([*pythonpath, *own]),
        "KL_BITEXACT_REFERENCE_ARGS": " ".join(
            [*reference_args, *(["--fault", fault] if fault else [])]
        ),
        LONGBENCH_DIR_ENV: str(longbench),
    }


def pytest_configure(config: object) -> None:
    """As a pytest plugin (`-p sglang_wheel`): sglang's test files import as in sglang's CI."""
    install()


if __name__ == "__main__":
    # `.ci/run` prefetches here, so a failed download fails CI before the tests start.
    try:
        print(source_root())
    except SglangWheelError as error:
        sys.exit(f"sglang_wheel: {error}")
