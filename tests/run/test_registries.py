"""Each word a suite file can choose is listed once, as an enum in suite/model.py; every table
keyed by those words holds exactly its members, and the suite loader accepts exactly them.
Adding a check, engine, dialect or cache rule to one place and not the others fails here."""

from __future__ import annotations

import json
from enum import Enum
from typing import Any

import pytest
import yaml

from kl_bitexact.errors import ConfigError
from kl_bitexact.run.checks import CHECKS
from kl_bitexact.run.checks.multiturn import RULES
from kl_bitexact.run.engines import ADAPTERS
from kl_bitexact.run.engines.openai import DIALECTS
from kl_bitexact.suite.load import parse
from kl_bitexact.suite.model import CacheAssert, CheckName, DialectName, EngineName, Flow

REGISTRIES: list[tuple[str, dict[Any, Any], type[Enum]]] = [
    ("run.checks.CHECKS", CHECKS, CheckName),
    ("run.engines.ADAPTERS", ADAPTERS, EngineName),
    ("run.engines.openai.DIALECTS", DIALECTS, DialectName),
    ("run.checks.multiturn.RULES", RULES, CacheAssert),
]


@pytest.mark.parametrize(
    ("table", "names"), [r[1:] for r in REGISTRIES], ids=[r[0] for r in REGISTRIES]
)
def test_every_registry_holds_exactly_its_enum(table: dict[Any, Any], names: type[Enum]) -> None:
    assert list(table) == list(names)  # same members, and listed in the enum's order
    assert all(type(key) is names for key in table)  # members, not strings that equal them


def _suite(server: dict[str, Any], test: dict[str, Any]) -> str:
    return yaml.safe_dump({"name": "s", "server": server, "tests": [{"name": "t", **test}]})


LAUNCHED = {"command": ["serve", "--port", "{port}"]}


def _launch(engine: str) -> dict[str, Any]:
    return {} if engine == "reference" else LAUNCHED  # kl-bitexact launches the reference


# (key, enum, how a suite with key: value looks, where the loaded value is)
CHOICES: list[tuple[str, type[Enum], Any, Any]] = [
    (
        "engine",
        EngineName,
        lambda v: _suite(
            {"engine": v, **({} if v == "reference" else LAUNCHED)}, {"check": "match"}
        ),
        lambda s: s.server.engine,
    ),
    (
        "dialect",
        DialectName,
        lambda v: _suite({"engine": "openai", "dialect": v, **LAUNCHED}, {"check": "match"}),
        lambda s: s.server.dialect,
    ),
    (
        "check",
        CheckName,
        lambda v: _suite({"engine": "reference"}, {"check": v}),
        lambda s: s.tests[0].check,
    ),
    (
        "cache_assert",
        CacheAssert,
        lambda v: _suite({"engine": "reference"}, {"check": "multiturn", "cache_assert": v}),
        lambda s: s.tests[0].cache_assert,
    ),
    (
        "flow",
        Flow,
        lambda v: _suite({"engine": "reference"}, {"check": "multiturn", "flow": v}),
        lambda s: s.tests[0].flow,
    ),
]


@pytest.mark.parametrize(("key", "names", "text", "loaded"), CHOICES, ids=[c[0] for c in CHOICES])
def test_the_suite_loader_accepts_exactly_the_enum(key, names, text, loaded) -> None:
    for member in names:
        [suite] = parse(text(member.value), source="s.yaml")
        assert loaded(suite) is member
    with pytest.raises(ConfigError) as error:
        parse(text("nonesuch"), source="s.yaml")
    words = ", ".join(member.value for member in names)
    assert error.value.message.endswith(f"{key}: 'nonesuch' is not one of {words}")


@pytest.mark.parametrize("member", [m for _, _, names in REGISTRIES for m in names] + list(Flow))
def test_a_name_reads_as_its_word_everywhere_results_and_messages_go(member: Enum) -> None:
    word = member.value
    assert (str(member), f"{member}") == (word, word)
    assert json.dumps({"check": member}) == json.dumps({"check": word})
    assert member == word and hash(member) == hash(word) and {word: 1}[member] == 1
