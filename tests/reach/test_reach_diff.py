"""The PR's change, reached or not (`run --reach-diff`), against a small engine repository
whose server runs the reference engine: the changed functions are read from git, probed on
the launched server, attributed per test, and their changed lines measured by coverage.py."""

from __future__ import annotations

import json

import pytest
import toy_engine_repo
from fake_suites import Silent

from kl_bitexact.errors import ConfigError
from kl_bitexact.reach import diff
from kl_bitexact.reach.changes import changed_code
from kl_bitexact.results.model import Status
from kl_bitexact.run.runner import Plan, run_suites
from kl_bitexact.suite import load

SUITE = """
name: toy
server:
  engine: sglang
  command: {command}
tests:
  - name: prefill
    check: prefill_cache_hit
    samples: 4
    prompt_tokens: [40, 60]
    max_new_tokens: 8
    vocab_size: 256
"""


def test_the_changed_functions_are_read_from_git(tmp_path):
    base = toy_engine_repo.make(tmp_path / "engine")
    code = changed_code(tmp_path / "engine", base)
    assert [(f.name, f.path) for f in code.functions] == [
        ("toyengine.engine:ToyEngine.admit", "toyengine/engine.py"),
        ("toyengine.engine:ToyEngine.clear", "toyengine/engine.py"),
        ("toyengine.engine:ToyEngine.evict", "toyengine/engine.py"),
    ]  # tests/test_engine.py changed too: a test's module is not the engine's code
    assert code.files == ((tmp_path / "engine" / "toyengine" / "engine.py").resolve(),)


def test_a_head_that_is_not_checked_out_is_refused(tmp_path):
    base = toy_engine_repo.make(tmp_path / "engine")
    with pytest.raises(ConfigError, match="is not the checked-out commit") as caught:
        changed_code(tmp_path / "engine", f"HEAD..{base}")
    assert caught.value.hint and "check out the PR's head" in caught.value.hint
    with pytest.raises(ConfigError, match="--reach-diff: git merge-base nope HEAD"):
        changed_code(tmp_path / "engine", "nope")


def test_which_tests_executed_each_changed_function_and_which_lines(tmp_path, monkeypatch):
    repo = tmp_path / "engine"
    base = toy_engine_repo.make(repo)
    monkeypatch.chdir(repo)  # the servers run the checkout: `python -m toyengine.serve`
    command = toy_engine_repo.server_command("--enable-deterministic-inference")
    [suite] = load.parse(SUITE.format(command=json.dumps(command)), source="s.yaml")
    plan = Plan((suite,), tmp_path / "logs", changes=changed_code(repo, base))
    final = run_suites(plan, Silent(), lambda partial: None)
    [(_, test)] = list(final.all_tests())
    assert test.status is Status.PASSED, test.message
    assert test.reach is not None and test.reach.measured and test.reach.functions == ()
    assert final.changes is not None and final.changes.measured
    found = {f.name.split(":")[1]: f for f in final.changes.functions}
    assert found["ToyEngine.admit"].tests == ("toy::prefill",)
    assert found["ToyEngine.clear"].tests == ("toy::prefill",)  # /flush_cache
    assert not found["ToyEngine.evict"].ran
    assert [f.name for f in final.changes.unreached] == ["toyengine.engine:ToyEngine.evict"]
    assert final.changes.lines_why_not == ""
    admit = found["ToyEngine.admit"]
    assert admit.lines_run == admit.changed_lines and admit.lines_not_run == ()
    evict = found["ToyEngine.evict"]
    assert evict.lines_run == () and evict.lines_not_run == evict.changed_lines


def test_changed_lines_of_a_diff_and_the_functions_holding_them():
    text = "\n".join(
        [
            "diff --git a/p/m.py b/p/m.py",
            "--- a/p/m.py",
            "+++ b/p/m.py",
            "@@ -3,0 +4,2 @@ def f():",
            "@@ -10 +12 @@",
            "@@ -20,3 +21,0 @@",
            "+++ /dev/null",
            "@@ -1 +0,0 @@",
            "+++ b/README.md",
            "@@ -1 +1 @@",
        ]
    )
    assert diff.changed_lines(text) == {"p/m.py": {4, 5, 12, 21}}
    source = "\n".join(
        [
            "import x",  # 1
            "",
            "@decorate",  # 3
            "def f():",
            "    def inner():",  # 5: a nested function's change is f's
            "        return 1",
            "    return inner",
            "class C:",  # 8
            "    class D:",
            "        async def g(self):",  # 10
            "            pass",
            "    def h(self):",  # 12
            "        pass",
        ]
    )
    found = diff.functions(source, "p.m", "p/m.py", {3, 6, 11, 13, 1})
    assert [(f.name, f.line, f.changed) for f in found] == [
        ("p.m:f", 3, (3, 6)),
        ("p.m:C.D.g", 10, (11,)),
        ("p.m:C.h", 12, (13,)),
    ]


def test_the_module_a_file_is_imported_as():
    packages = {"python/sglang", "python/sglang/srt", "python/sglang/test", "pkg"}
    name = lambda path: diff.module_name(path, packages.__contains__)  # noqa: E731
    assert name("python/sglang/srt/cache.py") == "sglang.srt.cache"
    assert name("python/sglang/srt/__init__.py") == "sglang.srt"
    assert name("python/sglang/test/kl_test_utils.py") is None  # a test helper
    assert name("pkg/test_thing.py") is None
    assert name("scripts/tool.py") is None  # outside a package
    assert name("setup.py") is None


@pytest.mark.parametrize(("fail_on", "code"), [("regression", 0), ("regression,unreached", 1)])
def test_the_comment_lists_the_changes_reach_and_unreached_gates_only_when_asked(
    cli, tmp_path, fail_on, code
):
    repo = tmp_path / "engine"
    base = toy_engine_repo.make(repo)
    command = toy_engine_repo.server_command("--enable-deterministic-inference")
    suite = tmp_path / "toy.yaml"
    suite.write_text(SUITE.format(command=json.dumps(command)))
    out = tmp_path / "out"
    args = ["run", str(suite), "--out", str(out), "--reach-diff", base, "--fail-on", fail_on]
    done = cli(args, cwd=repo)
    assert done.returncode == code, done.stdout + done.stderr
    assert "probing 3 changed function(s) in 1 file(s)" in done.stderr + done.stdout
    report = (out / "report.md").read_text()
    section = report.split("### The PR's change under the bit-exact suites", 1)[1]
    assert "3 changed functions in the engine's Python code" in section
    assert "2 executed by the bit-exact suites, **1 never executed**" in section
    assert (
        "- 🚫 <code>toyengine.engine:ToyEngine.evict</code> (toyengine/engine.py:23): "
        "**never executed**; changed lines run 0/1 (not run: line 24)"
    ) in section
    assert (
        "- ✅ <code>toyengine.engine:ToyEngine.admit</code> (toyengine/engine.py:12): by "
        "<code>toy::prefill</code>; changed lines run 1/1"
    ) in section
    if code:
        assert "1 changed function not shown to run under the bit-exact suites" in report


def test_shards_join_what_each_saw_of_the_change():
    from kl_bitexact.results import io as results_io
    from kl_bitexact.results.model import ChangedFunction, Changes, Results

    def part(tests, run, not_run, startup=False):
        f = ChangedFunction("p:f", "p.py", 1, (2, 3, 4), tests, startup, run, not_run)
        never = ChangedFunction("p:g", "p.py", 9, (10,), (), False, (), (10,))
        return Results(changes=Changes("b" * 40, "h" * 40, (f, never)))

    merged = results_io.merge(
        [
            ("a", part(("s::one",), (2,), (3, 4))),
            ("b", part(("s::two",), (3,), (2, 4), startup=True)),
            ("c", Results()),  # a part that probed nothing (a pytest session)
        ]
    )
    assert merged.changes is not None and merged.changes.measured
    joined, _ = merged.changes.functions
    assert joined.tests == ("s::one", "s::two") and joined.at_startup
    assert joined.lines_run == (2, 3) and joined.lines_not_run == (4,)
    assert [f.name for f in merged.changes.unreached] == ["p:g"]
    assert results_io.merge([("a", Results())]).changes is None
