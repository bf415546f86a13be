"""Suite files: loading and validating the YAML schema into `model` specs.

A suite file holds one suite (a mapping) or several (a list). Every error names the file,
the path to the key (`suites[1].tests[0].samples`) and what to write instead; an unknown
key gets a "did you mean". Nothing here launches or measures: the result is plain values.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from kl_bitexact.errors import ConfigError
from kl_bitexact.suite import expect, longbench
from kl_bitexact.suite.model import (
    FUNCTION_EXAMPLE,
    PORT_PLACEHOLDER,
    URL_EXAMPLE,
    CacheAssert,
    CheckName,
    DialectName,
    EngineName,
    Expect,
    Flow,
    Gate,
    ServerSpec,
    Suite,
    TestSpec,
    is_function_name,
    is_server_url,
)
from kl_bitexact.suite.reader import Reader, is_int, kind
from kl_bitexact.suite.references import parse_ref
from kl_bitexact.untrusted import yamlbounds
from kl_bitexact.untrusted.jsonfile import read_bounded, read_json

LONGBENCH_HINT = (
    "run the sglang test once where it can download LongBench (it caches the token ids there), "
    "or copy that file; XDG_CACHE_HOME moves the cache"
)

_SUITE_KEYS = ("name", "stage", "runner_config", "est_time", "server", "tests", "reach")
_SERVER_KEYS = (
    "engine",
    "dialect",
    "command",
    "args",
    "env",
    "base_url",
    "startup_timeout",
    "request_timeout",
    "gate",
    "expect",
)
_TEST_KEYS = (
    "name",
    "check",
    "samples",
    "prompt_tokens",
    "prompts",
    "max_new_tokens",
    "kl_threshold",
    "min_cache_hit_ratio",
    "exact",
    "blocked_by",
    "seed",
    "temperature",
    "vocab_size",
    "separator_ids",
    "gate",
    "floor_factor",
    "floor_margin",
    "reach",
    "expect",
)
_SHAPE_KEYS = (
    "samples",
    "prompt_tokens",
    "prompts",
    "separator_ids",
    "groups",
    "branches",
    "prefix_tokens",
    "turn_suffix_tokens",
    "cache_assert",
    "flow",
    "pressure",
    "warm",
    "rounds",
)
_MULTITURN_KEYS = (
    "groups",
    "branches",
    "prefix_tokens",
    "turn_suffix_tokens",
    "cache_assert",
    "flow",
)
# pressure_restore: groups of branches on a shared prefix, then pressure, then a probe.
_PRESSURE_KEYS = ("groups", "branches", "prefix_tokens", "turn_suffix_tokens", "pressure")
# Multiturn builds its prompts from groups x branches, a shared prefix and suffixes.
_SINGLE_TURN_KEYS = ("samples", "prompt_tokens", "prompts", "separator_ids")
# concurrent_prefix_hit: its prompts (a file, or a shared prefix then their own tokens), what
# is warmed before each round, and how many rounds of them are sent at once.
_CONCURRENT_KEYS = ("samples", "prompt_tokens", "prompts", "prefix_tokens", "warm", "rounds")
# Requests sent at once (a thread and a connection each), and rounds of them: bounded.
MAX_CONCURRENT_REQUESTS = 64
MAX_ROUNDS = 20
# The most `pressure` asks: a few times the pool evicts everything older.
MAX_PRESSURE = 4.0


# --- loading ----------------------------------------------------------------------------

# A suite file is a few kilobytes; a prompts file a few megabytes at most.
MAX_SUITE_BYTES = 1024 * 1024
MAX_PROMPTS_BYTES = 64 * 1024 * 1024


def load(path: Path) -> list[Suite]:
    """All suites in one file."""
    raw = read_bounded(
        path,
        what="suite file",
        max_bytes=MAX_SUITE_BYTES,
        hint="pass the path of a suite YAML file (see docs/suites.md)",
    )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}: not UTF-8 text (line {line}), so not a suite file",
            hint="save the suite file as UTF-8",
        ) from None
    return parse(text, source=str(path), base_dir=path.parent)


def load_bundled() -> list[Suite]:
    """The example suite shipped with the package (run by `kl-bitexact run` with no file)."""
    resource = resources.files("kl_bitexact").joinpath("suites/example.yaml")
    return parse(resource.read_text(encoding="utf-8"), source="<bundled example.yaml>")


def parse(text: str, *, source: str, base_dir: Path | None = None) -> list[Suite]:
    try:
        yamlbounds.check(yaml.parse(text, Loader=yaml.SafeLoader), source)
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ConfigError(f"{source}: invalid YAML{where}: {problem}") from None
    if isinstance(document, Mapping):
        return [_SuiteReader(source, "", document, base_dir).suite()]
    if isinstance(document, list) and document:
        suites = [
            _SuiteReader.at(source, f"[{i}]", item, base_dir).suite()
            for i, item in enumerate(document)
        ]
        _check_unique([suite.name for suite in suites], source, "suite name")
        return suites
    raise ConfigError(
        f"{source}: a suite file holds a suite (a mapping) or a list of suites",
        hint="start with `name: my-suite` or `- name: my-suite` (see docs/suites.md)",
    )


def reference_command(args: Sequence[str]) -> tuple[str, ...]:
    """How `engine: reference` is launched: this package's own server, on `{port}`."""
    return (
        sys.executable,
        "-m",
        "kl_bitexact",
        "serve-reference",
        "--port",
        PORT_PLACEHOLDER,
        *args,
    )


def _check_unique(names: Sequence[str], source: str, what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ConfigError(
                f"{source}: {what} {name!r} appears twice", hint="give each a distinct name"
            )
        seen.add(name)


class _SuiteReader(Reader):
    """The suite schema, level by level, over the typed accessors."""

    # the three levels -----------------------------------------------------------------

    def suite(self) -> Suite:
        self.allow(_SUITE_KEYS)
        tests = self.mapping.get("tests")
        if not isinstance(tests, list) or not tests:
            raise self.fail(
                "tests",
                "expected a non-empty list of tests",
                "add `tests: [{name: t, check: match}]`",
            )
        if "server" not in self.mapping:
            raise self.fail(
                "server", "missing", "add `server: {engine: reference}` (see docs/suites.md)"
            )
        server_reader = self.child("server", self.mapping["server"])
        server = server_reader.server()
        named = self.functions()
        facts = expect.read(server_reader)
        specs = tuple(
            self.child(f"tests[{i}]", item).test(server.gate, named, facts)
            for i, item in enumerate(tests)
        )
        _check_unique(
            [spec.name for spec in specs], f"{self.source}: {self.path or 'suite'}", "test name"
        )
        est = self.number("est_time", 0.0) if self.has("est_time") else None
        return Suite(self.suite_name(), self.source, server, specs, est)

    def suite_name(self) -> str:
        pair = self.has("stage") or self.has("runner_config")
        if self.has("name") and pair:
            raise self.fail("name", "give `name` or the pair `stage` + `runner_config`, not both")
        if pair:
            return f"{self.text('stage')}-test-{self.text('runner_config')}"
        if not self.has("name"):
            raise self.fail(
                "name", "missing", "add `name: my-suite`, or `stage:` + `runner_config:`"
            )
        return self.text("name")

    def server(self) -> ServerSpec:
        self.allow(_SERVER_KEYS)
        engine = self.choice("engine", EngineName)
        base_url = self.text("base_url") if self.has("base_url") else None
        if base_url is not None and not is_server_url(base_url):
            raise self.fail(
                "base_url",
                f"{base_url!r} is not an http(s) URL with a host",
                f"e.g. base_url: {URL_EXAMPLE} (the server's address, no path)",
            )
        command = self.command(engine, base_url)
        default_startup = 120.0 if engine is EngineName.REFERENCE else 1800.0
        return ServerSpec(
            engine=engine,
            command=command,
            dialect=self.dialect(engine),
            env=self.env(),
            base_url=base_url,
            startup_timeout=self.number("startup_timeout", default_startup, low=1.0),
            request_timeout=self.number("request_timeout", 1800.0, low=1.0),
            gate=self.choice("gate", Gate, Gate.BIT_EXACT),
        )

    def dialect(self, engine: EngineName) -> DialectName | None:
        if not self.has("dialect"):
            return None
        if engine is not EngineName.OPENAI:
            raise self.fail("dialect", "only applies to engine: openai", "remove `dialect`")
        return self.choice("dialect", DialectName)

    def command(self, engine: EngineName, base_url: str | None) -> tuple[str, ...]:
        if self.has("args") and engine is not EngineName.REFERENCE:
            raise self.fail(
                "args", "only applies to engine: reference", "put the flags in `command`"
            )
        if engine is EngineName.REFERENCE:
            if self.has("command"):
                raise self.fail(
                    "command", "engine: reference is launched by kl-bitexact", "use `args: [...]`"
                )
            return () if base_url else reference_command(self.strings("args"))
        if base_url and self.has("command"):
            raise self.fail("base_url", "give `command` or `base_url`, not both")
        if base_url:
            return ()
        command = self.strings("command")
        if not command:
            raise self.fail(
                "command", "missing", 'add `command: [...]` with "{port}", or `base_url: URL`'
            )
        if not any(PORT_PLACEHOLDER in part for part in command):
            raise self.fail(
                "command", "no {port} placeholder", 'add `--port, "{port}"` so a free port is used'
            )
        return command

    def env(self) -> tuple[tuple[str, str], ...]:
        value = self.mapping.get("env", {})
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise self.fail("env", f"expected a mapping of names to strings, got {kind(value)}")
        if any(isinstance(v, (list, dict)) or v is None for v in value.values()):
            raise self.fail("env", "every value must be a string", 'quote values: SOME_FLAG: "1"')
        return tuple(sorted((key, str(item)) for key, item in value.items()))

    def functions(self) -> tuple[str, ...]:
        """`reach:`, the functions a suite or test exists to exercise (`module:qualname`)."""
        names = self.strings("reach")
        for name in names:
            if not is_function_name(name):
                raise self.fail(
                    "reach",
                    f"{name!r} is not `module:qualname`",
                    f"name a function as its module and qualified name, e.g. {FUNCTION_EXAMPLE}",
                )
        return names

    def test(
        self,
        gate: Gate = Gate.BIT_EXACT,
        named: tuple[str, ...] = (),
        facts: tuple[Expect, ...] = (),
    ) -> TestSpec:
        self.allow(tuple(dict.fromkeys(_TEST_KEYS + _SHAPE_KEYS)))
        check = self.choice("check", CheckName)
        shaped = self._shape_keys(check)
        self.reject([key for key in _SHAPE_KEYS if key not in shaped], f"check: {check}")
        if self.has("prompts") and self.has("prompt_tokens"):
            raise self.fail("prompts", "give `prompts` (a file) or `prompt_tokens`, not both")
        vocab = self.integer("vocab_size", 32000, minimum=2)
        # A prompts file holds a real tokenizer's ids: bounded only by a vocab_size given.
        prompt_vocab = vocab if self.has("vocab_size") else None
        shape = self.shape(check)
        samples = _samples(check, shape) or self.integer("samples", 32)
        return TestSpec(
            name=self.text("name"),
            check=check,
            samples=samples,
            prompt_tokens=self.length_range("prompt_tokens", 1024),
            prompts=self.prompts(prompt_vocab) if self.has("prompts") else None,
            max_new_tokens=self.integer("max_new_tokens", 256),
            kl_threshold=self.number("kl_threshold", 1e-9),
            min_cache_hit_ratio=self.number("min_cache_hit_ratio", _hit_ratio(check), high=1.0),
            exact=self.flag("exact", False),
            blocked_by=self.blockers(),
            seed=self.integer("seed", 0, minimum=0),
            temperature=self.number("temperature", 1.0),
            vocab_size=vocab,
            separator_ids=self.integers("separator_ids", (11,)),
            gate=self.choice("gate", Gate, gate),
            floor_factor=self.number("floor_factor", 4.0, low=1.0),
            floor_margin=self.number("floor_margin", 1e-9),
            reach=tuple(dict.fromkeys((*named, *self.functions()))),
            expect=expect.merged(facts, expect.read(self)),
            **shape,
        )

    def blockers(self) -> tuple[str, ...]:
        refs = self.strings("blocked_by")
        for ref in refs:
            try:
                parse_ref(ref, default_repo="owner/repo")
            except ConfigError as error:
                raise self.fail("blocked_by", error.message, error.hint) from None
        return refs

    def prompts(self, vocab: int | None) -> tuple[tuple[int, ...], ...]:
        """A JSON file of token-id lists: a path, or sglang's LongBench cache of a model
        (`{sglang_longbench: MODEL, prompt_tokens: 3000, num_samples: 48}`)."""
        path = self.prompts_path()
        try:
            prompts = _prompts_file(path, vocab, _stamp(path))
        except ConfigError as error:
            hint = LONGBENCH_HINT if isinstance(self.mapping.get("prompts"), Mapping) else None
            raise self.fail("prompts", error.message, hint) from None
        if prompts is None:
            bound = f", ids < vocab_size {vocab}" if vocab is not None else ""
            raise self.fail(
                "prompts", f"{path} must be a JSON list of non-empty token-id lists{bound}"
            )
        return prompts

    def prompts_path(self) -> Path:
        value = self.mapping.get("prompts")
        if not isinstance(value, Mapping):
            return (self.base_dir or Path.cwd()) / self.text("prompts")
        unknown = sorted(set(value) - {"sglang_longbench", "prompt_tokens", "num_samples"})
        model = value.get("sglang_longbench")
        if unknown or not isinstance(model, str) or not model:
            raise self.fail(
                "prompts",
                "a mapping names sglang's LongBench cache: sglang_longbench (the model path "
                "the sglang test passes), optional prompt_tokens and num_samples",
                "e.g. prompts: {sglang_longbench: Qwen/Qwen3-Next-80B-A3B-Instruct}",
            )
        tokens = value.get("prompt_tokens", longbench.DEFAULT_PROMPT_TOKENS)
        count = value.get("num_samples", longbench.DEFAULT_NUM_SAMPLES)
        if not all(is_int(number, 1) for number in (tokens, count)):
            raise self.fail("prompts", "prompt_tokens and num_samples must be integers >= 1")
        return longbench.cache_file(model, tokens, count)

    @staticmethod
    def _shape_keys(check: CheckName) -> tuple[str, ...]:
        """The keys that shape `check`'s prompts (the others are refused for it)."""
        if check is CheckName.MULTITURN:
            return _MULTITURN_KEYS
        if check is CheckName.PRESSURE_RESTORE:
            return _PRESSURE_KEYS
        if check is CheckName.CONCURRENT_PREFIX_HIT:
            return _CONCURRENT_KEYS
        return _SINGLE_TURN_KEYS

    def shape(self, check: CheckName) -> dict[str, Any]:
        if check is CheckName.MULTITURN:
            return self.multiturn()
        if check is CheckName.CONCURRENT_PREFIX_HIT:
            return self.concurrent()
        if check is not CheckName.PRESSURE_RESTORE:
            return {}
        return {
            "groups": self.integer("groups", 1),
            "branches": self.integer("branches", 2, minimum=2),
            "prefix_tokens": self.integer("prefix_tokens", 512),
            "turn_suffix_tokens": self.integers("turn_suffix_tokens", (512,), minimum=1),
            "pressure": self.number("pressure", 1.5, low=1.0, high=MAX_PRESSURE),
        }

    def concurrent(self) -> dict[str, Any]:
        if self.has("prompts") and self.has("prefix_tokens"):
            raise self.fail(
                "prefix_tokens", "shapes synthetic prompts only: the prompts file is sent as is"
            )
        samples = self.mapping.get("samples", 32)
        if is_int(samples, 1) and samples > MAX_CONCURRENT_REQUESTS:
            raise self.fail(
                "samples",
                f"{samples} requests at once: at most {MAX_CONCURRENT_REQUESTS} (a thread "
                "and a connection each)",
            )
        rounds = self.integer("rounds", 3)
        if rounds > MAX_ROUNDS:
            raise self.fail("rounds", f"expected an integer from 1 to {MAX_ROUNDS}, got {rounds}")
        vocab = self.integer("vocab_size", 32000, minimum=2) if self.has("vocab_size") else None
        return {
            "prefix_tokens": self.integer("prefix_tokens", 512, minimum=0),
            "warm": self.token_lists("warm", vocab) if self.has("warm") else (),
            "rounds": rounds,
        }

    def token_lists(self, key: str, vocab: int | None) -> tuple[tuple[int, ...], ...]:
        """A JSON file (relative to the suite file) of token-id lists."""
        path = (self.base_dir or Path.cwd()) / self.text(key)
        try:
            loaded = _prompts_file(path, vocab, _stamp(path))
        except ConfigError as error:
            raise self.fail(key, error.message, error.hint) from None
        if loaded is None:
            bound = f", ids < vocab_size {vocab}" if vocab is not None else ""
            raise self.fail(key, f"{path} must be a JSON list of non-empty token-id lists{bound}")
        return loaded

    def multiturn(self) -> dict[str, Any]:
        return {
            "groups": self.integer("groups", 3),
            "branches": self.integer("branches", 3),
            "prefix_tokens": self.integer("prefix_tokens", 512),
            "turn_suffix_tokens": self.integers("turn_suffix_tokens", (512, 256), minimum=1),
            "cache_assert": self.choice("cache_assert", CacheAssert, CacheAssert.EXACT),
            "flow": self.choice("flow", Flow, Flow.BRANCH_WAVES),
        }


def _hit_ratio(check: CheckName) -> float:
    """The default `min_cache_hit_ratio`: concurrent_prefix_hit needs only one hit in all
    (the first request a round serves has nothing to reuse); its rounds judge the shape."""
    return 0.0 if check is CheckName.CONCURRENT_PREFIX_HIT else 0.99


def _samples(check: CheckName, shape: dict[str, Any]) -> int | None:
    """What a shaped check sends and scores: multiturn every branch, pressure_restore one
    probe per group; None for the single-turn checks (their `samples`)."""
    if check is CheckName.MULTITURN:
        return int(shape["groups"] * shape["branches"])
    if check is CheckName.PRESSURE_RESTORE:
        return int(shape["groups"])
    return None


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None  # read_json names the problem
    return info.st_mtime_ns, info.st_size


@functools.lru_cache(maxsize=16)
def _prompts_file(
    path: Path, vocab: int | None, stamp: tuple[int, int] | None
) -> tuple[tuple[int, ...], ...] | None:
    """A prompts file read and checked once per content (`stamp`): the checks of a suite
    usually share one, and reading and checking it again for each was a third of the
    suite's parse time. None when it is not a list of token-id lists under `vocab`."""
    loaded = read_json(path, what="prompts file", max_bytes=MAX_PROMPTS_BYTES)
    good = isinstance(loaded, list) and loaded and all(_is_token_list(p, vocab) for p in loaded)
    return tuple(tuple(prompt) for prompt in loaded) if good else None


def _is_token_list(value: Any, vocab: int | None) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(is_int(t, 0) and (vocab is None or t < vocab) for t in value)
    )
