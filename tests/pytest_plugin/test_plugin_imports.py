"""The plugin is imported by every pytest session where kl-bitexact is installed: importing
it must load nothing beyond pytest and a few small kl-bitexact modules."""

from __future__ import annotations

from import_probe import heavy_in, modules_after


def test_plugin_import_loads_nothing_heavy():
    before = modules_after("import pytest")
    after = modules_after("import pytest\nimport kl_bitexact.pytest_plugin")
    added = after - before
    assert heavy_in(after) == []
    assert sorted(added) == [
        "kl_bitexact",
        "kl_bitexact.errors",
        "kl_bitexact.ingest",
        "kl_bitexact.ingest.properties",
        "kl_bitexact.pytest_plugin",
        "kl_bitexact.pytest_plugin.fixtures",
    ]


def test_markers_and_fixtures_still_load_what_they_need():
    code = (
        "from kl_bitexact.pytest_plugin import fixtures\n"
        "fixtures.SuiteSource({'name': 's', 'server': {'engine': 'reference'}}, 'x', "
        "__import__('pathlib').Path('.')).parse([{'name': 'm', 'check': 'match'}])"
    )
    assert "yaml" in modules_after(code)
