"""action.yml and the workflows, read as YAML: what must hold for them to be safe and usable.

The executed proof is tests/action/test_act_e2e.py; these checks are the fast, exact ones.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from kl_bitexact import cli
from kl_bitexact.action.inputs import ActionInputs, env_name

ROOT = Path(__file__).resolve().parents[2]
ACTION = ROOT / "action.yml"
REUSABLE = ROOT / ".github" / "workflows" / "kl-bitexact.yml"
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml")) + sorted(
    (ROOT / "examples").glob("**/*.yml")
)
ACTION_DOC = ROOT / "docs" / "action.md"
WORKFLOW_DOC = ROOT / "docs" / "workflow.md"
WRITE_SCOPES = {"pull-requests": "write", "statuses": "write"}


def load(path: Path) -> dict[str, Any]:
    # PyYAML reads the key `on` as True (YAML 1.1); map it back.
    document: dict[Any, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    if True in document:
        document["on"] = document.pop(True)
    return document


def action_steps() -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = load(ACTION)["runs"]["steps"]
    return steps


def workflow_steps(workflow: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (job_id, step) for job_id, job in workflow["jobs"].items() for step in job.get("steps", ())
    ]


def table_names(doc: Path, heading: str) -> set[str]:
    """Names in the first column of the table under `heading` (a Markdown heading line)."""
    text = doc.read_text(encoding="utf-8")
    assert f"\n{heading}\n" in text, f"{doc.name} has no heading {heading!r}"
    section = text.split(f"\n{heading}\n", 1)[1]
    rows = re.findall(r"^\| `([^`]+)` \|", section.split("\n#", 1)[0], flags=re.MULTILINE)
    return set(rows)


ACTION_INPUTS = load(ACTION)["inputs"]
ACTION_OUTPUTS = load(ACTION)["outputs"]


@pytest.mark.parametrize("name", sorted(ACTION_INPUTS))
def test_every_action_input_is_forwarded_through_env(name):
    expected = GATED_INPUTS.get(name, "${{ inputs." + name + " }}")
    forwarded = [
        step for step in action_steps() if step.get("env", {}).get(env_name(name)) == expected
    ]
    assert forwarded, f"input {name} is not passed as {env_name(name)} in any step's env"


# The write token reaches the step only for publish: `run` executes PR code, and a child
# process can read its parent's environment.
GATED_INPUTS = {
    "github-token": "${{ inputs.command == 'publish' && inputs.github-token || '' }}",
}


@pytest.mark.parametrize("name", sorted(ACTION_INPUTS))
def test_every_action_input_is_read_by_the_step(name):
    fields = set(ActionInputs.__dataclass_fields__)
    assert name.replace("-", "_") in fields


def test_action_inputs_and_outputs_are_documented():
    assert table_names(ACTION_DOC, "## Inputs") == set(ACTION_INPUTS)
    assert table_names(ACTION_DOC, "## Outputs") == set(ACTION_OUTPUTS)


def test_reusable_workflow_inputs_and_outputs_are_documented():
    call = load(REUSABLE)["on"]["workflow_call"]
    assert table_names(WORKFLOW_DOC, "## Inputs") == set(call["inputs"])
    assert table_names(WORKFLOW_DOC, "## Outputs") == set(call["outputs"])


def cli_options() -> set[str]:
    """Every option string of every kl-bitexact command."""
    parser = cli.build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {
        option
        for command in commands.choices.values()
        for action in command._actions
        for option in action.option_strings
    }


def test_every_action_input_is_a_cli_option_of_the_same_name_or_the_actions_own():
    # A workflow that calls `kl-bitexact` itself must be able to do what the action does.
    own = dict(re.findall(r"^\| `([^`]+)` \| (.+) \|$", ACTION_ONLY_SECTION, flags=re.MULTILINE))
    options = cli_options()
    for name in ACTION_INPUTS:
        as_option, as_own = f"--{name}" in options, name in own
        assert as_option or as_own, (
            f"action input {name}: add --{name} to its command, or list it in docs/action.md "
            "under 'Inputs that are the action's own' with the reason"
        )
        assert not (as_option and as_own), f"{name} is an option; drop it from the own list"
    assert set(own) <= set(ACTION_INPUTS), set(own) - set(ACTION_INPUTS)
    assert all(reason.strip() for reason in own.values())


ACTION_ONLY_SECTION = (
    ACTION_DOC.read_text(encoding="utf-8")
    .split("\n## Inputs that are the action's own\n", 1)[1]
    .split("\n## ", 1)[0]
)


def test_action_inputs_are_kebab_case_and_described():
    for name, spec in ACTION_INPUTS.items():
        assert re.fullmatch(r"[a-z]+(-[a-z]+)*", name), name
        assert spec.get("description"), name


def test_action_has_marketplace_branding():
    branding = load(ACTION)["branding"]
    assert branding["icon"] and branding["color"]


@pytest.mark.parametrize("path", [ACTION, *WORKFLOWS], ids=lambda path: path.name)
def test_no_expression_inside_any_run_script(path):
    document = load(path)
    steps = action_steps() if path == ACTION else [s for _, s in workflow_steps(document)]
    for step in steps:
        assert "${{" not in step.get("run", ""), f"{path.name}: expression in run: {step}"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda path: path.name)
def test_the_base_checkout_never_lands_on_a_path_the_head_tree_holds(path):
    # actions/checkout empties (or follows) whatever is at its path: a PR shipping a
    # directory or link named like the base checkout must stop the job first.
    for job in load(path).get("jobs", {}).values():
        steps = job.get("steps", [])
        for index, step in enumerate(steps):
            if step.get("with", {}).get("path") != "kl-bitexact-base":
                continue
            guard = steps[index - 1].get("run", "") if index else ""
            assert "[ -L kl-bitexact-base ]" in guard and "exit 1" in guard, (
                f"{path.name}: no guard before the base checkout"
            )
            assert steps[index - 1].get("if") == step.get("if"), path.name


def test_reusable_workflow_gives_write_scopes_to_publish_only():
    workflow = load(REUSABLE)
    assert workflow["permissions"] == {}
    for job_id, job in workflow["jobs"].items():
        permissions = job.get("permissions", {})
        writes = {scope for scope, level in permissions.items() if level == "write"}
        if job_id == "publish":
            assert permissions.items() >= WRITE_SCOPES.items()
            assert writes == set(WRITE_SCOPES)
        else:
            assert not writes, f"job {job_id} must not write: {permissions}"


def test_no_token_reaches_jobs_other_than_publish():
    for job_id, step in workflow_steps(load(REUSABLE)):
        if job_id != "publish" and step.get("uses", "").startswith("org/kl-bitexact@"):
            assert step["with"].get("github-token") == "", f"{job_id}: pass github-token: ''"


def test_run_job_waits_for_the_trust_decision():
    jobs = load(REUSABLE)["jobs"]
    assert jobs["shards"]["if"] == "needs.plan.outputs.trusted == 'true'"
    assert jobs["plan"]["steps"][0]["with"]["command"] == "trust"
    checkout = jobs["shards"]["steps"][0]
    assert checkout["uses"].startswith("actions/checkout@")
    # The approved head the trust step named, never the default (the base branch under
    # pull_request_target, the default branch's head under workflow_run: issue 30).
    assert checkout["with"]["ref"] == "${{ needs.plan.outputs.head-sha }}"
    assert jobs["plan"]["outputs"]["head-sha"] == "${{ steps.trust.outputs.head-sha }}"
    for job_id, step in workflow_steps(load(REUSABLE)):
        ref = step.get("with", {}).get("ref", "")
        if step.get("uses", "").startswith("actions/checkout@") and "base.sha" not in ref:
            assert "head-sha" in ref, f"{job_id}: a checkout of the head not by head-sha: {ref}"
    assert checkout["with"]["persist-credentials"] is False


def test_publish_runs_always_and_expects_every_shard():
    publish = load(REUSABLE)["jobs"]["publish"]
    assert publish["if"] == "always() && needs.plan.outputs.head-sha != ''"
    step = next(s for s in publish["steps"] if s.get("id") == "publish")
    assert step["with"]["expected-shards"] == "${{ needs.plan.outputs.matrix }}"


def test_concurrency_is_per_pull_request_and_cancels_in_progress():
    concurrency = load(REUSABLE)["concurrency"]
    assert "github.event.pull_request.number" in concurrency["group"]
    assert "pull_request" in concurrency["cancel-in-progress"]


@pytest.mark.parametrize(
    "doc", [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name
)
def test_docs_never_pin_main(doc):
    assert "@main" not in doc.read_text(encoding="utf-8")


def engine_repository(target: Path, suites: str) -> Path:
    """tests/act/fixture with examples/sglang-caller.yml calling the workflow for `suites`."""
    shutil.copytree(ROOT / "tests" / "act" / "fixture", target)
    caller = (ROOT / "examples" / "sglang-caller.yml").read_text(encoding="utf-8")
    workflows = target / ".github" / "workflows"
    workflows.mkdir(parents=True)
    (workflows / "bitexact.yml").write_text(
        re.sub(r"(?m)^      suites: .*$", f"      suites: {suites}", caller), encoding="utf-8"
    )
    return target


def test_lint_ci_counts_suites_named_in_the_reusable_workflow_as_dispatched(cli, tmp_path):
    both = "extra-a-test-4-gpu-b200 extra-b-test-4-gpu-b200"
    clean = cli(["lint-ci", "--root", str(engine_repository(tmp_path / "both", both))])
    assert clean.returncode == 0, clean.stdout + clean.stderr
    one = engine_repository(tmp_path / "one", "extra-a-test-4-gpu-b200")
    missing = cli(["lint-ci", "--root", str(one), "--format", "json"])
    assert missing.returncode == 1
    [finding] = json.loads(missing.stdout)["findings"]
    assert "extra-b-test-4-gpu-b200" in finding["message"]
