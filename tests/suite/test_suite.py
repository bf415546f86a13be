"""Suite files: the schema, defaults, and errors that name file, key path and fix."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kl_bitexact.errors import ConfigError
from kl_bitexact.suite import load as suite
from kl_bitexact.suite.model import NOT_BUNDLED, CheckName

GOOD = """
stage: extra-b
runner_config: 4-gpu-b200
est_time: 1700
server:
  engine: sglang
  command: [python3, -m, sglang.launch_server, --port, "{port}", --page-size, "128"]
  env: {SGLANG_ENABLE_UNIFIED_RADIX_TREE: "1"}
  startup_timeout: 1800
tests:
  - name: decode_cache_hit
    check: decode_cache_hit
    samples: 32
    prompt_tokens: 1024
    max_new_tokens: 256
    kl_threshold: 1.0e-9
    min_cache_hit_ratio: 0.99
    exact: false
    blocked_by: [sgl-project/sglang#29792]
  - name: turns
    check: multiturn
    groups: 2
    branches: 3
    turn_suffix_tokens: [64, 32]
    cache_assert: mamba
    flow: sglang
"""


def _error(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        suite.parse(text, source="s.yaml")
    error = caught.value
    return error.message + " | " + (error.hint or "")


def test_issue_example_parses():
    [parsed] = suite.parse(GOOD, source="s.yaml")
    assert parsed.name == "extra-b-test-4-gpu-b200"
    assert parsed.est_time == 1700
    assert parsed.server.env == (("SGLANG_ENABLE_UNIFIED_RADIX_TREE", "1"),)
    decode, turns = parsed.tests
    assert decode.prompt_tokens == (1024, 1024) and decode.min_cache_hit_ratio == 0.99
    assert decode.blocked_by == ("sgl-project/sglang#29792",)
    assert turns.samples == 6 and turns.turn_suffix_tokens == (64, 32)
    assert turns.cache_assert == "mamba" and turns.flow == "sglang"


def test_multiturn_flow_is_branch_waves_unless_told_and_named_otherwise():
    text = GOOD.replace("    flow: sglang\n", "")
    assert suite.parse(text, source="s.yaml")[0].tests[1].flow == "branch-waves"
    message = _error(GOOD.replace("flow: sglang", "flow: sglan"))
    assert "'sglan' is not one of branch-waves, sglang" in message and "'sglang'" in message


def test_several_suites_per_file_and_reference_command():
    text = """
- name: a
  server: {engine: reference, args: [--page-size, 16]}
  tests: [{name: m, check: match, prompt_tokens: [8, 16]}]
- name: b
  server: {engine: sglang, base_url: "http://127.0.0.1:1"}
  tests: [{name: m, check: match}]
"""
    first, second = suite.parse(text, source="s.yaml")
    assert first.server.command == (
        sys.executable,
        "-m",
        "kl_bitexact",
        "serve-reference",
        "--port",
        "{port}",
        "--page-size",
        "16",
    )
    assert first.tests[0].prompt_tokens == (8, 16)
    assert second.server.base_url == "http://127.0.0.1:1" and second.server.command == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            GOOD.replace("samples: 32", "sampels: 32"),
            "tests[0].sampels: unknown key | did you mean 'samples'",
        ),
        (
            GOOD.replace("samples: 32", "samples: lots"),
            "tests[0].samples: expected an integer >= 1",
        ),
        (GOOD.replace("engine: sglang", "engine: sglng"), "server.engine: 'sglng' is not one of"),
        (GOOD.replace("check: multiturn", "check: multi"), "tests[1].check"),
        (
            GOOD.replace("stage: extra-b", "name: x\nstage: extra-b"),
            "name: give `name` or the pair",
        ),
        (GOOD.replace('"{port}"', '"30000"'), "server.command: no {port} placeholder"),
        (
            GOOD.replace("min_cache_hit_ratio: 0.99", "min_cache_hit_ratio: 1.5"),
            "min_cache_hit_ratio",
        ),
        (GOOD.replace("sgl-project/sglang#29792", "soon"), "tests[0].blocked_by"),
        (
            GOOD.replace("    groups: 2\n", "    groups: 2\n    samples: 4\n"),
            "tests[1].samples: does not apply",
        ),
        (
            GOOD.replace("    exact: false\n", "    exact: false\n    groups: 2\n"),
            "tests[0].groups: does not apply",
        ),
        (GOOD.replace('"1"}', "[1]}"), "server.env: every value must be a string"),
        ("tests: [1, 2", "invalid YAML at line"),
        ("- 3", "[0]: expected a mapping"),
        ("name: x\nserver: {engine: reference}\ntests: []", "tests: expected a non-empty list"),
        ("name: x\ntests: [{name: a, check: match}]", "server: missing"),
        (
            "name: x\nserver: {engine: sglang, base_url: notaurl}\n"
            "tests: [{name: a, check: match}]",
            "server.base_url: 'notaurl' is not an http(s) URL with a host | e.g. base_url: http://",
        ),
        (
            "name: x\nserver: {engine: reference, base_url: 'http://h:99999'}\n"
            "tests: [{name: a, check: match}]",
            "server.base_url: 'http://h:99999' is not an http(s) URL",
        ),
        (
            "name: x\nserver: {engine: reference}\n"
            "tests: [{name: a, check: match}, {name: a, check: match}]",
            "test name 'a' appears twice",
        ),
        (
            "name: x\nserver: {engine: reference}\n"
            "tests: [{name: a, check: match, reach: [sglang.srt.scheduler.Scheduler]}]",
            "tests[0].reach: 'sglang.srt.scheduler.Scheduler' is not `module:qualname` | "
            "name a function as its module and qualified name, e.g. sglang.srt.",
        ),
        (
            "name: x\nreach: [a:f.<locals>.g]\nserver: {engine: reference}\n"
            "tests: [{name: a, check: match}]",
            "reach: 'a:f.<locals>.g' is not `module:qualname`",
        ),
        (
            "name: x\nreach: a:f\nserver: {engine: reference}\ntests: [{name: a, check: match}]",
            "reach: expected a list of strings",
        ),
    ],
)
def test_errors_name_the_key_and_the_fix(text, expected):
    message = _error(text)
    assert message.startswith("s.yaml: ")
    assert expected in message


def test_reach_is_the_suites_functions_then_the_tests_own_once_each():
    [loaded] = suite.parse(
        "name: x\nreach: [a.b:C.run, m:f]\nserver: {engine: reference}\n"
        "tests: [{name: a, check: match, reach: [m:f, m:g]}, {name: b, check: match}]",
        source="s.yaml",
    )
    assert [spec.reach for spec in loaded.tests] == [
        ("a.b:C.run", "m:f", "m:g"),
        ("a.b:C.run", "m:f"),
    ]


def test_prompts_file_is_relative_to_the_suite(tmp_path: Path):
    (tmp_path / "p.json").write_text(json.dumps([[1, 2, 3], [4, 5]]))
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: x\nserver: {engine: reference}\ntests: [{name: a, check: match, prompts: p.json}]"
    )
    [parsed] = suite.load(path)
    assert parsed.tests[0].prompts == ((1, 2, 3), (4, 5))
    (tmp_path / "p.json").write_text("[[1, -2]]")
    with pytest.raises(ConfigError, match=r"tests\[0\].prompts: .*token-id lists"):
        suite.load(path)


def test_prompts_from_sglangs_longbench_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """sglang's own cache file of a model, found as its get_input_ids finds it; a real
    tokenizer's ids (151k here) need no vocab_size."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cached = tmp_path / "sglang" / "longbench" / "input_ids_Qwen_Qwen3-8B_3000_48.json"
    cached.parent.mkdir(parents=True)
    cached.write_text(json.dumps([[151643, 7, 8], [9, 10]]))
    text = (
        "name: x\nserver: {engine: reference}\ntests: [{name: a, check: decode_cache_hit, "
        "samples: 2, prompts: {sglang_longbench: Qwen/Qwen3-8B}}]"
    )
    [parsed] = suite.parse(text, source="s.yaml")
    assert parsed.tests[0].prompts == ((151643, 7, 8), (9, 10))
    message = _error(text.replace("Qwen3-8B}", "Qwen3-8B, num_samples: 9}"))
    assert "input_ids_Qwen_Qwen3-8B_3000_9.json" in message and "LongBench" in message
    assert "sglang_longbench" in _error(text.replace("sglang_longbench", "model"))
    with_vocab = text.replace("samples: 2,", "samples: 2, vocab_size: 1000,")
    assert "ids < vocab_size 1000" in _error(with_vocab)


def test_missing_file_is_a_config_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="cannot read suite file"):
        suite.load(tmp_path / "nope.yaml")


def test_bundled_example_is_valid():
    suites = suite.load_bundled()
    checks = {test.check for s in suites for test in s.tests}
    assert checks == set(CheckName) - NOT_BUNDLED
    args = " ".join(part for s in suites for part in s.server.command)
    assert "--enable-hierarchical-cache" in args and "--speculative-algorithm" in args
    assert all(s.server.engine == "reference" for s in suites)
