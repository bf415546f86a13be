"""The workflow cache returns exactly what reading the workflows returns, until one changes."""

from __future__ import annotations

from kl_bitexact.registry import config, repo, workflowcache


def test_cached_workflows_equal_the_computed_ones_until_a_file_changes(
    make_repo, tmp_path, monkeypatch
):
    monkeypatch.setenv("KL_BITEXACT_CACHE_DIR", str(tmp_path / "cache"))
    root = make_repo("unresolved-dispatch")
    settings = config.load(root, None)
    computed = repo.read(root, settings).workflows
    assert computed.unresolved and computed.targets and computed.dispatches
    calls: list[int] = []
    monkeypatch.setattr(workflowcache, "_decode", _counted(workflowcache._decode, calls))
    assert repo.read(root, settings).workflows == computed
    assert calls == [1]  # served from the cache
    extra = root / ".github/workflows/pr-test-extra.yml"
    extra.write_text(extra.read_text().replace("8-gpu-h200, timeout", "4-gpu-gb300, timeout"))
    changed = repo.read(root, settings).workflows
    assert changed != computed
    assert "extra-b-test-4-gpu-gb300" in changed.dispatched()


def _counted(function, calls):
    def wrapper(*args):
        calls.append(1)
        return function(*args)

    return wrapper
