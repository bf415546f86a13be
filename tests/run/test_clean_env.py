"""What a clean restart removes, keeps and says (issue 14, case 7; the processes themselves
are in tests/action/test_token_out_of_reach.py)."""

from __future__ import annotations

import os

import pytest

from kl_bitexact.errors import FatalError
from kl_bitexact.run import clean_env


def test_github_credentials_and_inputs_are_removed_and_the_rest_kept():
    environ = {
        "GITHUB_TOKEN": "t",
        "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "o",
        "INPUT_SUITES": "a.yaml",
        "INPUT_GITHUB_TOKEN": "",
        "PATH": "/usr/bin",
        "HF_TOKEN": "hf",
        "GITHUB_OUTPUT": "/tmp/out",
    }
    assert clean_env.removed(environ) == [
        "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
        "GITHUB_TOKEN",
        "INPUT_GITHUB_TOKEN",
        "INPUT_SUITES",
    ]
    assert clean_env.clean(environ) == {
        "PATH": "/usr/bin",
        "HF_TOKEN": "hf",
        "GITHUB_OUTPUT": "/tmp/out",
    }


def test_the_warning_names_removed_credentials_and_secrets_passed_on():
    text = clean_env.warning({"GITHUB_TOKEN": "t", "HF_TOKEN": "hf", "MY_API_KEY": "k"})
    assert text is not None
    assert text.startswith("GITHUB_TOKEN in this step's environment: kl-bitexact restarts")
    assert "HF_TOKEN, MY_API_KEY reach the suite's processes" in text
    assert text.endswith("Keep tokens and secrets out of the job that runs the PR's code.")


def test_no_warning_without_secrets_or_for_empty_ones():
    # action.yml passes INPUT_GITHUB_TOKEN empty to every command but publish.
    assert clean_env.warning({"INPUT_GITHUB_TOKEN": "", "GITHUB_TOKEN": "", "PATH": "/"}) is None


def test_the_restarted_process_does_not_warn_again(capsys):
    clean_env.warn({"HF_TOKEN": "hf", clean_env.RESTARTED: "1"})
    clean_env.warn({"HF_TOKEN": "hf", "GITHUB_ACTIONS": "true"})
    out, err = capsys.readouterr()
    assert out.startswith("::warning title=kl-bitexact::HF_TOKEN reach") and err == ""


def test_names_and_values_that_hold_a_secret():
    # Issue 30, item 5: MY_CI_GITHUB_PAT passed on without a word.
    assert clean_env.secret_like("MY_CI_GITHUB_PAT") and clean_env.secret_like("PAT")
    assert clean_env.secret_like("AWS_SECRET_ACCESS_KEY")
    assert not clean_env.secret_like("PATH") and not clean_env.secret_like("PATTERN")
    token = "github_pat_11ABCDEFG0123456789_abcdefghijklmnop"
    assert clean_env.github_credential("ANY_NAME", token)
    assert clean_env.github_credential("GH_TOKEN", "x")
    assert not clean_env.github_credential("HF_TOKEN", "hf_abcdefghijklmnopqrstuvwxyz")


def _process(proc, pid: int, parent: int, command: str, environ: dict[str, str]) -> None:
    directory = proc / str(pid)
    directory.mkdir()
    (directory / "stat").write_text(f"{pid} ({command}) S {parent} 1 1 0 -1\n")
    (directory / "comm").write_text(command + "\n")
    (directory / "environ").write_bytes(
        b"".join(f"{name}={value}\0".encode() for name, value in environ.items())
    )


def test_the_ancestors_are_read_as_the_suite_would_read_them(tmp_path):
    # The step's shell (a command name with spaces and parentheses), a runner above it
    # whose environment this user cannot read, and init.
    proc = tmp_path / "proc"
    proc.mkdir()
    _process(proc, 30, 20, "bash) S 1 (x", {"GITHUB_TOKEN": "t", "HF_TOKEN": "hf", "PATH": "/"})
    _process(proc, 20, 1, "Runner.Worker", {"ACTIONS_RUNTIME_TOKEN": "r"})
    (proc / "20" / "environ").chmod(0)
    _process(proc, 1, 0, "init", {"DEPLOY_KEY_PASSWORD": "p"})
    readable = os.access(proc / "20" / "environ", os.R_OK)  # root reads anything
    found = clean_env.exposed_in_ancestors({"HF_TOKEN": "hf"}, proc=proc, start=30)
    expected = [clean_env.Exposed(30, "bash) S 1 (x", ("GITHUB_TOKEN",))]
    if readable:
        expected.append(clean_env.Exposed(20, "Runner.Worker", ("ACTIONS_RUNTIME_TOKEN",)))
    expected.append(clean_env.Exposed(1, "init", ("DEPLOY_KEY_PASSWORD",)))
    assert found == expected  # HF_TOKEN: this process passes it on itself, named there
    text = clean_env.warning({"GITHUB_TOKEN": "t"}, found[:1])
    assert text is not None and "cannot read" not in text
    assert text.startswith("GITHUB_TOKEN in process 30 (bash) S 1 (x), above this kl-bitexact")


def test_under_actions_an_exposed_ancestor_is_a_refusal_elsewhere_a_warning(capsys):
    exposed = [clean_env.Exposed(7, "bash", ("GH_TOKEN",))]
    with pytest.raises(FatalError, match=r"refusing to run the suite: GH_TOKEN in process 7"):
        clean_env.warn({"GITHUB_ACTIONS": "true"}, exposed)
    clean_env.warn({}, exposed)
    assert "kl-bitexact: warning: GH_TOKEN in process 7 (bash)" in capsys.readouterr().err


def test_names_known_not_to_hold_secrets_are_not_named():
    environ = {
        "TIKTOKEN_CACHE_DIR": "/cache",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_TOKEN_PATH": "/secrets/hf",
        "HF_TOKEN": "hf",
    }
    assert clean_env.kept_secrets(environ) == ["HF_TOKEN"]
    assert not clean_env.secret_like("tiktoken_cache_dir")
    assert clean_env.secret_like("MY_SECRET") and clean_env.secret_like("HF_TOKEN")
