"""What a clean restart removes, keeps and says (issue 14, case 7; the processes themselves
are in tests/action/test_token_out_of_reach.py)."""

from __future__ import annotations

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
