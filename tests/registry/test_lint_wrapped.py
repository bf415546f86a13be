"""`lint-ci` follows a command as the shell would (issue 25): wrapper scripts that run their
arguments in a container, `docker exec -w DIR ... bash -c "..."`, `env`, `timeout`, `cd`;
and a dispatch counts only for the backend it runs (`--hw`)."""

from __future__ import annotations

import json

import pytest

from kl_bitexact.cli import main as kl_bitexact_main
from kl_bitexact.registry import shell, wrappers


def lint(root, capsys):
    code = kl_bitexact_main(["lint-ci", "--root", str(root), "--format", "json"])
    return code, json.loads(capsys.readouterr().out)["findings"]


def test_suites_run_through_a_wrapper_a_container_and_bash_c_are_dispatched(make_repo, capsys):
    # Before: the ROCm, CPU-box and XPU suites were "dispatched by no workflow" (3 errors):
    # the wrapper script, `docker exec ... bash -c "cd ./test && ..."` and the image's own
    # copy of the repository (/opt/src/project/test) hid the runner.
    code, findings = lint(make_repo("wrapped-dispatch"), capsys)
    assert (code, findings) == (0, [])


def test_the_wrappers_directory_option_and_the_run_arguments_are_followed(make_repo):
    from kl_bitexact.registry import config, repo

    root = make_repo("wrapped-dispatch")
    state = repo.read(root, config.load(root, None))
    rocm = state.workflows.by_suite["stage-a-test-rocm"]
    assert {(d.backend, d.nightly, d.timeout, d.runner_line) for d in rocm} == {
        ("amd", False, 900.0, 16)
    }
    assert {d.backend for d in state.workflows.by_suite["stage-a-test-xpu"]} == {"xpu"}


def test_a_registration_for_a_backend_no_job_runs_the_suite_for_is_an_error(make_repo, capsys):
    # Before: a warning saying the AMD file "still runs" because a `--hw cuda` job runs the
    # same suite name; run_suite.py selects by backend, so it runs nowhere.
    code, findings = lint(make_repo("hw-mismatch"), capsys)
    assert code == 1
    assert [(f["code"], f["severity"], f["line"]) for f in findings] == [
        ("suite-not-allowlisted", "error", 7)
    ]
    assert "no workflow dispatches it for amd" in findings[0]["message"]
    assert "silently never runs" in findings[0]["message"]


def test_a_wrapper_that_cannot_be_read_is_named_once_never_taken_as_not_run(make_repo, capsys):
    code, findings = lint(make_repo("opaque-wrapper"), capsys)
    assert code == 0
    assert [(f["code"], f["severity"], f["line"]) for f in findings] == [
        ("unresolved-dispatch", "warning", 11)
    ]
    message = findings[0]["message"]
    assert "scripts/ci/box/run_in_box.sh" in message
    assert "1 other place" in message


class _Files:
    def __init__(self, files: dict[str, str]) -> None:
        self.files = files

    def text(self, path: str) -> str | None:
        return self.files.get(path)

    def is_file(self, path: str) -> bool:
        return path in self.files


RUNNER = {"test/run_suite.py": ""}


@pytest.mark.parametrize(
    ("script", "args"),
    [
        ("cd test && env A=1 B=2 timeout -k 10 600 python3 run_suite.py --suite s", ["--suite"]),
        ("docker exec -it -w /src/test -e X=1 box python3 -u run_suite.py --suite s", ["--suite"]),
        ('bash -lc "cd test; nohup python3 run_suite.py --suite s"', ["--suite"]),
        ("docker exec box sh -c 'cd /image/repo/test && python3 run_suite.py --suite s'", []),
        ('bash -c "\n  cd test\n  python3 run_suite.py --suite s\n"', []),
        ("env -C test python3 run_suite.py --suite s", []),
    ],
)
def test_commands_that_run_commands_are_followed_to_the_runner(script, args):
    found = shell.follow(script, {}, "", _Files(RUNNER), ["test/run_suite.py"])
    assert [i.script for i in found.invocations] == ["test/run_suite.py"]
    assert found.invocations[0].args[-2:] == ("--suite", "s")
    assert found.opaque == []


def test_another_script_of_the_same_name_in_a_container_is_not_the_runner():
    files = _Files({**RUNNER, "python/pkg/test/run_suite.py": ""})
    found = shell.follow(
        "docker exec -w /ck/python/pkg/test box python3 run_suite.py --suite s", {}, "", files
    )
    assert [i.script for i in found.invocations] == ["python/pkg/test/run_suite.py"]


def test_a_wrapper_without_a_command_passing_its_arguments_on_says_why():
    assert "no command" in str(wrappers.read("#!/bin/sh\necho hello\n"))
    assert "getopts" in str(wrappers.read('while getopts "w:" o; do :; done\n"$@"\n'))
    files = _Files({**RUNNER, "ci/run.sh": "#!/bin/sh\necho hello\n"})
    found = shell.follow("ci/run.sh python3 run_suite.py --suite s", {}, "", files, ["x"])
    assert found.invocations == []  # not a runner for `x`: nothing to report
    found = shell.follow(
        "ci/run.sh python3 run_suite.py --suite s", {}, "", files, ["test/run_suite.py"]
    )
    assert [(o.wrapper, o.why) for o in found.opaque] == [
        ("ci/run.sh", 'no command in it runs its arguments ("$@")')
    ]


def test_wrapper_options_attached_values_and_the_end_of_options():
    wrapper = wrappers.read(
        'D=/x\nwhile true; do case "$1" in\n  --dir=*) D="${1#*=}"; shift ;;\n'
        "  -q) shift ;;\n  --) shift; break ;;\n  *) break ;;\nesac; done\n"
        'cd "$D" && exec "$@"\n'
    )
    assert isinstance(wrapper, wrappers.Wrapper)
    assert wrapper.apply(["--dir=/y", "-q", "--", "-q", "python3"]) == (
        {"D": "/y"},
        ["-q", "python3"],
    )


# --- --fix only with evidence ---------------------------------------------------------------


def _fix(cli, root):
    return cli(["lint-ci", "--root", str(root), "--fix"])


def test_fix_never_allowlists_a_suite_no_job_of_its_backend_runs(cli, make_repo, snapshot):
    # Before: the AMD registration's suite was "dispatched" by the `--hw cuda` job, so
    # --fix added it to PER_COMMIT_SUITES[AMD], hiding that it runs nowhere.
    root = make_repo("hw-mismatch")
    before = snapshot(root)
    result = _fix(cli, root)
    assert snapshot(root) == before
    assert "not fixed: 'base-b-test-1-gpu-large': no job's `suite` axis runs amd" in result.stderr
    assert result.returncode == 1


def test_fix_allowlists_a_suite_a_wrapped_job_of_its_backend_runs(cli, make_repo, snapshot):
    root = make_repo("wrapped-dispatch")
    runner = root / "test/run_suite.py"
    runner.write_text(runner.read_text().replace('    HWBackend.AMD: ["stage-a-test-rocm"],\n', ""))
    first = _fix(cli, root)
    assert "fixed: added 'stage-a-test-rocm' to PER_COMMIT_SUITES[amd]" in first.stderr
    assert '    HWBackend.AMD: ["stage-a-test-rocm"],' in runner.read_text()
    assert first.returncode == 0
    again = snapshot(root)
    assert _fix(cli, root).returncode == 0 and snapshot(root) == again
