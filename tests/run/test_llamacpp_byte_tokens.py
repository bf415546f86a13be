"""`kl-bitexact run` against a real llama-server serving vocabularies with byte tokens,
started the ways users start it (issue 17).

The models (tests/helpers/tiny_llama_gguf.py) hold the 256 byte tokens of real vocabularies,
so random sampling often leaves the generated text in the middle of a UTF-8 character; for
such a token llama-server reports no probability at all. Each way of starting the server must
still give a verdict (exit 1 here: the suite is strict), never a run error (exit 2):
- `match` with one new token compares uncached prefill with uncached prefill: 0 differ;
- the cache-hit checks hit and see llama.cpp's last-bit drift: exact mismatches, a tiny KL;
- positions the server did not report are counted, not compared and never an error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from llama_server import default_command, llama_server_command
from tiny_llama_gguf import write_tiny_llama

# The first run on a clean machine builds llama-server (~10 min on 2 cores).
pytestmark = pytest.mark.timeout(1800)

SHAPE = {"samples": 4, "prompt_tokens": [24, 40], "exact": True, "seed": 3}
TESTS = [
    {"name": "uncached", "check": "match", "max_new_tokens": 1, **SHAPE},
    {"name": "full-prompt-hit", "check": "prefill_cache_hit", "max_new_tokens": 1, **SHAPE},
    {"name": "extended-prompt-hit", "check": "decode_cache_hit", "max_new_tokens": 6, **SHAPE},
]
# Measured (docs/engines.md): the SentencePiece model's cache drift stays under sglang's 1e-9;
# the byte-level model's full-prompt hit reaches 1.2e-8 (the KL gate fails it too).
KL_BOUND = {"sentencepiece": 1e-9, "byte_level": 1e-7}
WAYS = {
    "documented": lambda model, workdir: llama_server_command(model, workdir),
    "default-np1": lambda model, workdir: default_command(model, 1),
    "default-np4": lambda model, workdir: default_command(model, 4),
}


def run_suite(cli: Any, workdir: Path, command: list[str]) -> dict[str, dict[str, Any]]:
    suite = {
        "name": "llamacpp",
        "server": {"engine": "openai", "dialect": "llamacpp", "command": command},
        "tests": TESTS,
    }
    (workdir / "suite.yaml").write_text(json.dumps(suite), encoding="utf-8")
    out = workdir / "out"
    run = cli(["run", str(workdir / "suite.yaml"), "--out", str(out)], timeout=600)
    # Shown with `pytest -s`: the figures docs/engines.md quotes.
    print(run.stdout)
    assert run.returncode == 1, run.stdout + run.stderr
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    return {test["id"].split("::")[1]: test for test in results["suites"][0]["tests"]}


@pytest.mark.parametrize(
    ("vocabulary", "way"),
    [
        ("sentencepiece", "documented"),
        ("sentencepiece", "default-np1"),
        ("sentencepiece", "default-np4"),
        ("byte_level", "default-np1"),
    ],
)
def test_every_way_of_starting_llama_server_gives_a_verdict(
    vocabulary: str, way: str, tmp_path: Path, cli: Any
) -> None:
    model = write_tiny_llama(tmp_path / f"{vocabulary}.gguf", vocabulary=vocabulary)
    tests = run_suite(cli, tmp_path, WAYS[way](model, tmp_path))

    uncached = tests["uncached"]
    assert uncached["status"] == "passed", uncached["message"]
    assert uncached["exact"]["mismatched"] == 0 and uncached["kl_div"] == 0
    for name in ("full-prompt-hit", "extended-prompt-hit"):
        hit = tests[name]
        assert hit["status"] == "failed" and "exact:" in hit["message"], hit["message"]
        assert hit["cache_hits"]["hit"] > 0
        assert hit["exact"]["mismatched"] > 0 and 0 < hit["kl_div"] < KL_BOUND[vocabulary]
    # Byte tokens were sampled and left out, counted, in at least one check.
    assert sum(test["exact"]["not_reported"] for test in tests.values()) > 0


# SentencePiece ids: <unk> 0, <s> 1, byte <0xNN> 3 + NN. 中 is E4 B8 AD, 号 is E5 8F B7.
def byte(value: int) -> int:
    return 3 + value


SPECIALS_INSIDE_CHARACTERS: tuple[int, ...] = (byte(0xE4), 1, byte(0xB8), byte(0xAD))
SPECIALS_INSIDE_CHARACTERS += (byte(0xE5), 0, byte(0x8F), byte(0xB7))


def test_specials_sampled_inside_a_character_are_placed_as_the_server_does(
    tmp_path: Path, cli: Any
) -> None:
    # The model cycles through 中 and 号 spelled in byte tokens with <s> and <unk> after
    # their lead bytes. Generation appends a special as nothing, so the server keeps back
    # the lead byte, the special and the middle byte, and reports only each last byte; read
    # as /tokenize spells them, the specials would seem to end the characters (the test
    # errored: "withholds tokens differently from llama.cpp's rule").
    model = write_tiny_llama(
        tmp_path / "chain.gguf", vocabulary="sentencepiece", chain=SPECIALS_INSIDE_CHARACTERS
    )
    suite = {
        "name": "specials",
        "server": {"engine": "openai", "dialect": "llamacpp", "command": default_command(model, 1)},
        "tests": [
            {
                "name": "m",
                "check": "match",
                "samples": 2,
                "prompt_tokens": [8, 12],
                "max_new_tokens": 16,
                "exact": True,
                "seed": 3,
                "vocab_size": 259,
            }
        ],
    }
    (tmp_path / "suite.yaml").write_text(json.dumps(suite), encoding="utf-8")
    run = cli(["run", str(tmp_path / "suite.yaml"), "--out", str(tmp_path / "out")], timeout=600)
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    test = results["suites"][0]["tests"][0]
    assert test["status"] == "passed", test["message"] + run.stdout
    # 16 tokens: two turns of the chain of 8 (wherever in it the prompt sends them first):
    # two characters of two per sample reported, 6 of 8 tokens kept back in each cycle.
    assert test["exact"]["tokens"] == 2 * 4 and test["exact"]["not_reported"] == 2 * 12
