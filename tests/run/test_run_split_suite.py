"""One suite name across several files, as a `shard` of a suite's files runs them:
`kl-bitexact run fileA.yaml fileB.yaml`, both registering suite `split`."""

from __future__ import annotations

from pathlib import Path

from kl_bitexact.results import io as results_io
from kl_bitexact.results.model import Status

TEST = (
    "  - {name: %s, check: %s, samples: 2, prompt_tokens: [40, 60], max_new_tokens: 24,"
    " vocab_size: 256}\n"
)


def part(tmp_path: Path, file: str, page_size: str, *tests: tuple[str, str]) -> Path:
    path = tmp_path / file
    path.write_text(
        "name: split\n"
        "server: {engine: reference, args: [--enable-deterministic-inference, "
        f'--page-size, "{page_size}", --mamba-track-interval, "{page_size}"]}}\n'
        "tests:\n" + "".join(TEST % test for test in tests)
    )
    return path


def test_two_files_of_one_suite_name_make_one_suite_result(cli, tmp_path):
    # Different servers: two launches of one suite name, each with its own log.
    first = part(tmp_path, "a.yaml", "16", ("match", "match"))
    second = part(tmp_path, "b.yaml", "8", ("decode", "decode_cache_hit"))
    out = tmp_path / "out"
    result = cli(["run", str(first), str(second), "--out", str(out)])
    assert result.returncode == 0, result.stdout + result.stderr
    [suite] = results_io.load(out / "results.json").suites
    assert suite.name == "split"
    assert [(t.id, t.status) for t in suite.tests] == [
        ("split::match", Status.PASSED),
        ("split::decode", Status.PASSED),
    ]
    logs = sorted(p.name for p in (out / "logs").iterdir())
    assert logs == ["split.2.log", "split.log"]
    assert "--page-size 16" in (out / "logs" / "split.log").read_text()
    assert "--page-size 8" in (out / "logs" / "split.2.log").read_text()


def test_a_test_id_in_two_files_is_refused_naming_both(cli, tmp_path):
    first = part(tmp_path, "a.yaml", "16", ("match", "match"))
    second = part(tmp_path, "b.yaml", "16", ("match", "decode_cache_hit"))
    result = cli(["run", str(first), str(second), "--out", str(tmp_path / "out")])
    assert result.returncode == 2
    assert f"test 'split::match' is defined in both {first} and {second}" in result.stderr
    assert "Traceback" not in result.stderr
