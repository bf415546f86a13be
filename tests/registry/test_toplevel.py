"""The fast scan (top-level slices only) agrees with a full parse, and the scan cache."""

from __future__ import annotations

import ast
import json
import os

import pytest

from kl_bitexact.errors import ConfigError
from kl_bitexact.registry import repo, scan, scancache, toplevel

HEAD = '"""Module docstring."""\nimport unittest\n\n'
MAIN = '\n\nif __name__ == "__main__":\n    unittest.main()\n'
CLASS = '\nclass T(unittest.TestCase):\n    def test_x(self):\n        """Doc."""\n        pass\n'

SOURCES = {
    "plain": HEAD + 'register_cuda_ci(est_time=60, suite="s")\n' + CLASS + MAIN,
    "multi-line call": HEAD
    + 'register_cuda_ci(\n    est_time=60,  # )\n    suite="s)",\n)\n'
    + CLASS
    + MAIN,
    "two backends": HEAD + 'register_cuda_ci(60, "s")\nregister_amd_ci(30, "t")\n' + CLASS + MAIN,
    "call in a docstring": HEAD
    + '"""\nregister_cuda_ci(60, "ghost")\n"""\n'
    + 'register_cuda_ci(60, "s")\n'
    + CLASS
    + MAIN,
    "call in a comment": HEAD
    + '# register_cuda_ci(60, "ghost")\nregister_cuda_ci(60, "s")\n'
    + MAIN,
    "nested call": HEAD
    + 'register_cuda_ci(60, "s")\ndef f():\n    register_cuda_ci(1, "n")\n'
    + MAIN,
    "assigned call": HEAD + 'x = register_cuda_ci(60, "s")\n' + MAIN,
    "attribute call": HEAD + 'register_cuda_ci(60, "s")\nci.register_cuda_ci(1, "n")\n' + MAIN,
    "main in a docstring": HEAD + 'register_cuda_ci(60, "s")\nX = """\nif __name__ == "x":\n'
    '    f()\n"""\n',
    "main with else": HEAD + 'register_cuda_ci(60, "s")\nif __name__ == "__main__":\n'
    "    pass\nelse:\n    f()\n",
    "main that only passes": HEAD + 'register_cuda_ci(60, "s")\nif __name__ == "__main__":\n'
    "    pass\n",
    "no registration": HEAD + CLASS + MAIN,
    "call and more on the line": HEAD + 'register_cuda_ci(60, "s"); y = 1\n' + MAIN,
}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_fast_scan_equals_the_full_parse(name):
    source = SOURCES[name]
    full = scan._scan_tree(ast.parse(source), "t.py")
    assert scan.scan_source(source, "t.py") == full


def test_the_fast_path_is_taken_for_ordinary_files():
    located = toplevel.locate(SOURCES["multi-line call"], frozenset(scan.REGISTER_FUNCTIONS))
    assert located is not None
    assert [call.lineno for call in located.calls] == [4]
    # main blocks are parsed once per distinct text and shared: only what they do counts
    assert [type(block).__name__ for block in located.main_blocks] == ["If"]
    assert scan._is_main_block(located.main_blocks[0])


@pytest.mark.parametrize("name", ["call in a docstring", "nested call", "no registration"])
def test_unusual_files_fall_back_to_the_full_parse(name):
    assert toplevel.locate(SOURCES[name], frozenset(scan.REGISTER_FUNCTIONS)) is None


def _write(root, files):
    for name, text in files.items():
        (root / name).write_text(text)
    return sorted(files)


def _read(root):
    return lambda path: (root / path).read_bytes()


def test_cache_returns_the_same_scan_and_rescans_changed_files(tmp_path, monkeypatch):
    monkeypatch.setenv("KL_BITEXACT_CACHE_DIR", str(tmp_path / "cache"))
    reads = []

    def reading(path):
        reads.append(path)
        return (tmp_path / path).read_bytes()

    paths = _write(tmp_path, {"a.py": SOURCES["plain"], "b.py": SOURCES["nested call"]})
    first = scancache.scan_all(tmp_path, paths, reading, repo.scan_bytes)
    second = scancache.scan_all(tmp_path, paths, reading, repo.scan_bytes)
    assert first == second
    assert reads == ["a.py", "b.py", "a.py", "b.py"]  # just written: read again, not trusted
    (tmp_path / "a.py").write_text(SOURCES["two backends"])
    third = scancache.scan_all(tmp_path, paths, reading, repo.scan_bytes)
    assert len(third[0].registrations) == 2
    assert third[1] == first[1]


def test_an_old_unchanged_file_is_not_read_again(tmp_path, monkeypatch):
    monkeypatch.setenv("KL_BITEXACT_CACHE_DIR", str(tmp_path / "cache"))
    paths = _write(tmp_path, {"a.py": SOURCES["plain"]})
    old = 1_000_000_000
    os.utime(tmp_path / "a.py", ns=(old, old))
    expected = scancache.scan_all(tmp_path, paths, _read(tmp_path), repo.scan_bytes)

    def refuse(path):
        raise AssertionError(f"{path} was read")

    assert scancache.scan_all(tmp_path, paths, refuse, repo.scan_bytes) == expected
    # Same size and mtime, other content: only a stat change makes it read again.
    (tmp_path / "a.py").write_text(SOURCES["plain"].replace('"s"', '"t"'))
    os.utime(tmp_path / "a.py", ns=(old + 1, old + 1))
    [changed] = scancache.scan_all(tmp_path, paths, _read(tmp_path), repo.scan_bytes)
    assert changed.registrations[0].suite == "t"


def test_a_damaged_cache_is_rescanned(tmp_path, monkeypatch):
    monkeypatch.setenv("KL_BITEXACT_CACHE_DIR", str(tmp_path / "cache"))
    paths = _write(tmp_path, {"a.py": SOURCES["plain"]})
    expected = scancache.scan_all(tmp_path, paths, _read(tmp_path), repo.scan_bytes)
    [store] = (tmp_path / "cache" / "lint").iterdir()
    document = json.loads(store.read_text())
    for entry in document["entries"].values():
        entry["registrations"] = [{"nonsense": 1}]
    store.write_text(json.dumps(document))
    assert scancache.scan_all(tmp_path, paths, _read(tmp_path), repo.scan_bytes) == expected
    store.write_text("{not json")
    assert scancache.scan_all(tmp_path, paths, _read(tmp_path), repo.scan_bytes) == expected


def test_parallel_scan_matches_and_carries_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("KL_BITEXACT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(scancache, "PARALLEL_MIN_FILES", 2)
    monkeypatch.setattr(scancache, "_cpus", lambda: 3)
    sources = [(f"t{i}.py", SOURCES["plain"].encode()) for i in range(450)]
    parallel = scancache._scan(sources, repo.scan_bytes)
    assert parallel == {path: repo.scan_bytes(content, path) for path, content in sources}
    broken = [*sources, ("bad.py", b"x = (\n")]
    with pytest.raises(ConfigError, match=r"bad\.py:1: not valid Python"):
        scancache._scan(broken, repo.scan_bytes)
    latin = [*sources, ("latin.py", b"# caf\xe9\n")]
    with pytest.raises(ConfigError, match=r"latin\.py: not UTF-8 text"):
        scancache._scan(latin, repo.scan_bytes)


def test_crlf_files_read_as_text_mode_reads_them():
    crlf = SOURCES["multi-line call"].replace("\n", "\r\n").encode()
    assert repo.scan_bytes(crlf, "t.py") == scan.scan_source(SOURCES["multi-line call"], "t.py")
