"""The hostile-input corpus: every input that once crashed (exit 3) or hung a command.

Each case builds its files in a directory and names the command line to run on them.
Large inputs (a 50 MB source, JSON nested 100,000 deep) are generated, not committed;
the small ones also live in tests/fixtures/hostile/ (named by case) for reading.
`tests/test_hostile_inputs.py` runs every case as a user would and requires exit 2 (or
lint-ci's findings exit 1) with one line naming the file, never exit 3, never a hang.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).parents[1] / "fixtures" / "hostile"

TEST = {
    "id": "s::t",
    "check": "match",
    "status": "failed",
    "kl_div": 0.1,
    "kl_threshold": 0.01,
    "kl_per_sample": [0.1, 0.2],
    "exact": None,
    "cache_hits": None,
    "first_divergence": [],
    "blocked_by": ["o/r#1"],
    "duration_s": 0.0,
    "message": "",
    "warnings": [],
}


def results(**test: object) -> str:
    document = {
        "run": {"commit": None, "ref": None, "shard": None, "started_at": None},
        "suites": [
            {
                "name": "s",
                "server": {"engine": "sglang", "args": ["x"], "launch_s": 1.0},
                "tests": [{**TEST, **test}],
            }
        ],
        "tool": {"name": "kl-bitexact", "version": "0.1.0"},
        "schema_version": 1,
    }
    return json.dumps(document)


# Python cannot even write it (over 4,300 digits): spliced in as text.
HUGE_INT_RESULTS = results(duration_s="@").replace('"@"', "9" * 5000)


def deep_json(depth: int = 100_000) -> str:
    return "[" * depth + "]" * depth


# Deep inside a test, under a key the schema does not know: the decoder that skips it
# recursed past Python's limit (exit 3, issue 30).
DEEP_IN_A_TEST = results(extra="@").replace('"@"', deep_json())


@dataclass(frozen=True)
class Case:
    name: str
    # Writes the inputs under the directory; returns the command's arguments.
    build: Callable[[Path], list[str]]
    # What the one line on standard error must say (besides the file's name).
    says: str
    exit_codes: tuple[int, ...] = (2,)


def _write(directory: Path, name: str, text: str | bytes) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _report(name: str, text: str, says: str, *extra: str) -> Case:
    def build(d: Path) -> list[str]:
        return ["report", str(_write(d, "results.json", text)), *extra]

    return Case(name, build, says)


def _fifo_suite(d: Path) -> list[str]:
    os.mkfifo(d / "suite.yaml")
    return ["run", str(d / "suite.yaml")]


def _report_with(
    option: str, filename: str, text: str, says: str, codes: tuple[int, ...] = (2,)
) -> Case:
    def build(d: Path) -> list[str]:
        good = _write(d, "results.json", results())
        return ["report", str(good), option, str(_write(d, filename, text))]

    return Case(f"report {option} {filename}", build, says, codes)


def _fifo(d: Path) -> list[str]:
    os.mkfifo(d / "results.json")
    return ["report", str(d / "results.json")]


def _dev_zero(d: Path) -> list[str]:
    (d / "results.json").symlink_to("/dev/zero")
    return ["report", str(d / "results.json")]


def _device(d: Path) -> list[str]:
    return ["report", "/dev/zero"]


CASES: tuple[Case, ...] = (
    _report("results nested 100k deep", deep_json(), "results.json: "),
    _report("results integer of 5000 digits", HUGE_INT_RESULTS, "out of range"),
    _report("results nested 100k deep in a test", DEEP_IN_A_TEST, "nested more than 64 levels"),
    Case("results is a FIFO", _fifo, "not a regular file (a FIFO)"),
    # A results file is never read through a symlink (issue 14, case 9), wherever it points.
    Case("results links to /dev/zero", _dev_zero, "a symbolic link, not a results file"),
    Case("results is /dev/zero", _device, "not a regular file (a character device)"),
    # `import-junit --out DIR` writes DIR/results.json: DIR itself was an internal error.
    Case(
        "results is a directory", lambda d: ["report", str(d)], "not a regular file (a directory)"
    ),
    _report_with("--findings", "findings.json", deep_json(), "nested more than"),
    _report_with("--blockers", "deep.json", deep_json(), "nested more than"),
    _report_with("--blockers", "list.json", "[]", "blocker states"),
    _report_with("--blockers", "dict-value.json", '{"o/r#1": {"a": 1}}', "is not one of"),
    _report_with("--blockers", "list-value.json", '{"o/r#1": [1]}', "is not one of"),
)

# Inputs that are not errors at all but once crashed the report: the gate decides.
GATE = (0, 1)

CASES += (
    Case(
        "chart of a subnormal KL and a zero",
        lambda d: ["report", str(_write(d, "results.json", results(kl_per_sample=[5e-324, 0])))],
        "",
        GATE,
    ),
    _report_with("--baseline", "deep-base.json", deep_json(), "baseline unavailable", GATE),
    _report_with("--baseline", "int-base.json", HUGE_INT_RESULTS, "out of range", GATE),
    _report_with("--baseline", "deep-in-a-test.json", DEEP_IN_A_TEST, "nested more than", GATE),
)


# --- suite files (run) ---------------------------------------------------------------

SUITE = "name: s\nserver: {engine: reference}\ntests: [{name: a, check: match}]\n"


def _suite(name: str, text: str | bytes, says: str) -> Case:
    def build(d: Path) -> list[str]:
        return ["run", str(_write(d, "suite.yaml", text)), "--out", str(d / "out")]

    return Case(f"suite {name}", build, says)


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    lines = ["a0: &a0 [x]"]
    for level in range(1, levels + 1):
        refs = ", ".join([f"*a{level - 1}"] * width)
        lines.append(f"a{level}: &a{level} [{refs}]")
    return "\n".join(lines) + "\n"


CASES += (
    _suite("nested 10k deep", "a: " + "[" * 10_000 + "]" * 10_000, "nested more than"),
    _suite("alias bomb", alias_bomb() + SUITE, "nodes once its aliases are expanded"),
    _suite("merge-key loop", "base: &b\n  <<: *b\n" + SUITE, "inside the node it names"),
    _suite(
        "6000-digit integer",
        SUITE.replace("match}", "match, samples: " + "9" * 6000 + "}"),
        "digits",
    ),
    _suite("not UTF-8", SUITE.encode() + b"# caf\xe9\n", "not UTF-8 text (line 4)"),
    Case(
        "suite is a FIFO",
        _fifo_suite,
        "not a regular file (a FIFO)",
    ),
    Case(
        "run --out is a file",
        lambda d: ["run", str(_write(d, "suite.yaml", SUITE)), "--out", str(_write(d, "f", "x"))],
        "is a file, not a directory",
    ),
    Case(
        "run --out under a file",
        lambda d: ["run", str(_write(d, "s.yaml", SUITE)), "--out", str(_write(d, "f", "x") / "o")],
        "cannot write there",
    ),
    Case(
        "run --base-url not a URL",
        lambda d: [
            "run",
            str(_write(d, "s.yaml", SUITE)),
            "--base-url",
            "notaurl",
            "--out",
            str(d),
        ],
        "--base-url notaurl: not an http(s) URL",
    ),
)


# --- JUnit XML (import-junit) ----------------------------------------------------------

CASES += (
    Case(
        "junit unknown encoding",
        lambda d: [
            "import-junit",
            str(_write(d, "j.xml", '<?xml version="1.0" encoding="x-nonexistent"?><testsuites/>')),
            "--out",
            str(d / "out"),
        ],
        "unknown encoding",
    ),
)


# --- lint-ci on a repository laid out like sglang's ------------------------------------

BASE_REPO = Path(__file__).parents[1] / "fixtures" / "registry" / "base"


def _lint(
    name: str, relative: str, text: str | bytes, says: str, codes: tuple[int, ...] = (2,)
) -> Case:
    def build(d: Path) -> list[str]:
        import shutil

        repo = d / "repo"
        shutil.copytree(BASE_REPO, repo)
        _write(repo, relative, text)
        return ["lint-ci", "--root", str(repo)]

    return Case(f"lint-ci {name}", build, says, codes)


WORKFLOW = ".github/workflows/hostile.yml"
REGISTERED = "test/registered/cpu/test_hostile.py"
# A finding (exit 1), not an error: the rest of the repository is still checked.
FINDING = (1,)


def matrix_workflow(keys: int = 8, values: int = 40) -> str:
    axes = "\n".join(
        f"        k{k}: [{', '.join(str(v) for v in range(values))}]" for k in range(keys)
    )
    return (
        "on: push\njobs:\n  j:\n    runs-on: x\n    strategy:\n      matrix:\n"
        f"{axes}\n    steps:\n      - run: python3 test/run_suite.py --suite ${{{{ matrix.k0 }}}}\n"
    )


CASES += (
    _lint(
        "attribute chain of 200k", REGISTERED, "x = a" + ".b" * 200_000 + "\n", "too deep", FINDING
    ),
    _lint(
        "operator chain of 200k", REGISTERED, "x = 1" + " + 1" * 200_000 + "\n", "too deep", FINDING
    ),
    _lint("a 50 MB test file", REGISTERED, "#" * (50 * 1024 * 1024), "too large to read", FINDING),
    _lint(
        "workflow nested 10k deep",
        WORKFLOW,
        "a: " + "[" * 10_000 + "]" * 10_000,
        "nested more than",
    ),
    _lint("workflow alias bomb", WORKFLOW, alias_bomb(), "aliases are expanded"),
    _lint("workflow merge-key loop", WORKFLOW, "a: &a\n  <<: *a\n", "inside the node it names"),
    _lint("workflow 6000-digit integer", WORKFLOW, "on: " + "9" * 6000 + "\n", "digits"),
    _lint("workflow matrix 8 keys x 40 values", WORKFLOW, matrix_workflow(), "at most 256 jobs"),
)
