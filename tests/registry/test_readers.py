"""The pure readers: register_*_ci calls, workflow dispatch, findings renderings."""

from __future__ import annotations

import json

import pytest

from kl_bitexact.errors import ConfigError
from kl_bitexact.registry import findings, scan, suitefiles, workflows
from kl_bitexact.registry.findings import Code, Finding, Severity

MAIN = '\nif __name__ == "__main__":\n    main()\n'


def codes(source: str) -> list[str]:
    return [finding.code for finding in scan.scan_source(source + MAIN, "t.py").findings]


def test_positional_and_keyword_forms_match_sglang():
    scanned = scan.scan_source(
        'register_cpu_ci(5, "base-a-test-cpu", True, "flaky, #1")\n'
        'register_amd_ci(est_time=60.5, stage="s", runner_config="1-gpu", in_process_group="g")\n'
        + MAIN,
        "t.py",
    )
    first, second = scanned.registrations
    assert (first.backend, first.suite, first.nightly, first.disabled) == (
        "cpu",
        "base-a-test-cpu",
        True,
        "flaky, #1",
    )
    assert (second.suite, second.est_time, second.in_process_group) == ("s-test-1-gpu", 60.5, "g")
    assert scanned.findings == ()


@pytest.mark.parametrize(
    ("call", "code"),
    [
        ("register_cuda_ci(300)", "missing-suite"),
        ('register_cuda_ci(300, stage="s")', "missing-suite"),
        ('register_cuda_ci(suite="s")', "bad-est-time"),
        ('register_cuda_ci(-5, "s")', "bad-est-time"),
        ('register_cuda_ci("300", "s")', "bad-est-time"),
        ('register_cuda_ci(300, "s", False, None, 1)', "unknown-argument"),
        ('register_cuda_ci(300, "s", suite="t")', "unknown-argument"),
        ('register_cuda_ci(300, "s", **extra)', "non-literal-argument"),
        ('register_cuda_ci(300, f"{x}")', "non-literal-argument"),
        ('register_cuda_ci(300, "s", disabled=True)', "disabled-without-reason"),
        ('register_cuda_ci(300, "s", disabled="  ")', "disabled-without-reason"),
        ('x = register_cuda_ci(300, "s")', "not-top-level"),
    ],
)
def test_malformed_calls(call, code):
    assert code in codes(call)


def test_unknown_argument_suggests_the_right_name():
    scanned = scan.scan_source('register_cuda_ci(300, "s", runner_confg="x")\n' + MAIN, "t.py")
    assert "did you mean 'runner_config'?" in scanned.findings[0].message


def test_main_block_must_call_something():
    source = 'register_cuda_ci(300, "s")\nif __name__ == "__main__":\n    pass\n'
    assert [f.code for f in scan.scan_source(source, "t.py").findings] == ["missing-main"]
    disabled = 'register_cuda_ci(300, "s", disabled="see #3")\n'
    assert scan.scan_source(disabled, "t.py").findings == ()


def test_syntax_error_names_file_and_line():
    with pytest.raises(ConfigError, match=r"t\.py:2: not valid Python"):
        scan.scan_source("x = 1\ndef (\n", "t.py")


def test_suite_file_forms():
    scanned = suitefiles.scan_suite_file(
        "- stage: extra-b\n  runner_config: 4-gpu-b200\n  est_time: 10\n"
        "- name: a\n  stage: s\n  est_time: 0\n"
        "- est_time: 5\n  tests:\n    - name: t\n      blocked_by: '#12'\n"
        "    - name: u\n      blocked_by: [owner/repo#3, 7]\n",
        "s.yaml",
    )
    assert [r.suite for r in scanned.registrations] == ["extra-b-test-4-gpu-b200"]
    assert sorted((f.code, f.line) for f in scanned.findings) == [
        ("bad-blocked-by", 12),
        ("bad-est-time", 6),
        ("missing-suite", 7),
        ("suite-and-stage", 4),
    ]


WORKFLOW = """
jobs:
  stage:
    strategy:
      matrix:
        hw: [cuda]
        suite: [a, b]
        include:
          - {stage: extra, runner_config: 8-gpu}
    runs-on: x
    steps:
      - run: |
          cd test
          python3 run_suite.py --hw ${{ matrix.hw }} --suite=${{ matrix.suite }}
          python3 run_suite.py --suite "${{ inputs.dynamic }}"
      - uses: org/kl-bitexact@v1
        with:
          suites: suites/a.yaml suites/b*.yaml
      - run: kl-bitexact run suites/c.yaml --out r
  reuse:
    uses: ./.github/workflows/_stage.yml
    with:
      self_name: base-test
      runner_config: 1-gpu
  called:
    uses: org/kl-bitexact/.github/workflows/kl-bitexact.yml@v1
    with:
      suites: bitexact-b200 bitexact-gb300
  shard-only:
    runs-on: x
    steps:
      - uses: org/kl-bitexact@v1
        with:
          command: shard
          suites: sharded
  dynamic:
    strategy:
      matrix: ${{ fromJson(needs.plan.outputs.matrix) }}
    uses: ./x.yml
    with:
      suite: ${{ matrix.suite }}
"""


def test_workflow_dispatch_sources():
    found = workflows.read_workflow(WORKFLOW, "w.yml")
    dispatches = {(d.suite, d.line) for d in found.dispatches}
    # The include entry merges into both combinations: it adds no job, so no suite.
    assert dispatches == {
        ("a", 7),
        ("b", 7),
        ("base-test", 23),
        ("bitexact-b200", 28),
        ("bitexact-gb300", 28),
        ("sharded", 35),
    }
    assert {(d.suite, d.backend) for d in found.dispatches if d.backend} == {
        ("a", "cuda"),
        ("b", "cuda"),
    }
    assert [(g.pattern, g.line) for g in found.globs] == [
        ("suites/a.yaml", 18),
        ("suites/b*.yaml", 18),
        ("suites/c.yaml", 19),
    ]
    assert found.runner_configs == {"8-gpu", "1-gpu"}
    assert [(t.job, t.kind, sorted(t.suites)) for t in found.targets] == [
        ("stage", "suite", ["a", "b"]),
        ("called", "suites-input", ["bitexact-b200", "bitexact-gb300"]),
    ]
    assert {(u.line, u.expression) for u in found.unresolved} == {
        (15, "the suite: ${{ inputs.dynamic }}"),
        (41, "the `suite` input: ${{ matrix.suite }}"),
    }


def test_github_annotations_escape_pr_controlled_text():
    finding = Finding(
        "test/a,b:c%.py", 3, Code.EMPTY_SUITE.value, Severity.ERROR, "bad\n::error::x", "fix 100%"
    )
    line = findings.to_github([finding])
    assert line == (
        "::error file=test/a%2Cb%3Ac%25.py,line=3,title=kl-bitexact empty-suite::"
        "bad%0A::error::x Fix: fix 100%25\n"
    )


def test_json_rendering_is_the_contract():
    finding = Finding("f", None, "c", Severity.WARNING, "m", "x")
    assert json.loads(findings.to_json([finding])) == {
        "findings": [
            {
                "file": "f",
                "line": None,
                "code": "c",
                "severity": "warning",
                "message": "m",
                "fix": "x",
            }
        ]
    }
