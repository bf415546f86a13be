"""Where a repository keeps its registrations, allowlists and workflows.

Defaults follow sglang's layout; a repository overrides them in `.kl-bitexact.yaml`
under `registry:` (keys below, kebab-case), or points `--config` at another file.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kl_bitexact.errors import ConfigError, did_you_mean
from kl_bitexact.registry import paths, yamlio

CONFIG_FILE = ".kl-bitexact.yaml"
SECTION = "registry"


@dataclass(frozen=True)
class RegistryConfig:
    # sglang-style test files holding register_*_ci() calls
    registered: tuple[str, ...] = ("test/registered/**/*.py",)
    exclude: tuple[str, ...] = ("**/conftest.py", "**/__init__.py")
    # kl-bitexact suite files (YAML)
    suite_files: tuple[str, ...] = ("test/bitexact/**/*.yaml", "test/bitexact/**/*.yml")
    # sglang's allowlist dicts (PER_COMMIT_SUITES, NIGHTLY_SUITES, OTHER_SUITES)
    python_allowlist: str = "test/run_suite.py"
    # kl-bitexact's own allowlist (`suites:` and `nightly:` lists)
    allowlist: str = ".github/kl-bitexact-allowlist.yaml"
    workflows: tuple[str, ...] = (".github/workflows/*.yml", ".github/workflows/*.yaml")
    # the runner table: a YAML mapping whose `runner_configs:` keys are the known
    # runner_configs (sglang's scripts/ci/runner_configs.yml); without it, the
    # runner_configs the workflows use are the known ones
    runner_table: str = "scripts/ci/runner_configs.yml"
    # runner_configs known in addition to the table
    runners: tuple[str, ...] = ()
    # the scripts whose `--suite NAME` dispatches a registered suite, by repository path
    # (another script of the same name elsewhere is not one)
    suite_runners: tuple[str, ...] = ("test/run_suite.py",)
    # backends whose suite names the suite runner validates (a registration to an unknown
    # suite fails every run); empty: read `_SUITE_CHECKED_BACKENDS` from the python
    # allowlist file, and without it, every backend
    checked_backends: tuple[str, ...] = ()
    # --timeout-per-file when a dispatch gives none; 0: read the runner's argparse default
    default_timeout_per_file: str = "0"
    # backends whose runner_configs the runner table lists (sglang's is CUDA's); other
    # backends' runner_configs are checked only against a table that covers them
    runner_table_backends: tuple[str, ...] = ("cuda",)
    # the keys the configuration file set (not a key itself): a set `registered` /
    # `exclude` replaces what the suite runner's own globs say
    given: frozenset[str] = frozenset()


_FIELDS = {
    field.name.replace("_", "-"): field
    for field in dataclasses.fields(RegistryConfig)
    if field.name != "given"
}


def load(root: Path, config_file: Path | None) -> RegistryConfig:
    """The configuration from `config_file`, else ROOT/.kl-bitexact.yaml, else defaults."""
    path = config_file or root / CONFIG_FILE
    if not path.is_file():
        if config_file is not None:
            raise ConfigError(f"{path}: config file not found", hint="check the --config path")
        return RegistryConfig()
    if config_file is None and paths.outside_root(root, CONFIG_FILE):
        # Read as YAML, a file outside the repository could be echoed by a parse error.
        raise ConfigError(
            f"{path}: resolves outside the repository root (a symlink); not read",
            hint="replace the symlink with the file, or name it with --config FILE",
        )
    document = yamlio.load(path.read_text(encoding="utf-8"), str(path))
    section = document.get(SECTION) if isinstance(document, dict) else None
    if section is None:
        return RegistryConfig()
    if not isinstance(section, dict):
        raise ConfigError(
            f"{path}: `{SECTION}` must be a mapping", hint="see docs/lint-ci.md, 'What is read'"
        )
    values = {_field(path, key).name: _value(path, section, key) for key in section}
    return RegistryConfig(**values, given=frozenset(values))


def _field(path: Path, key: Any) -> dataclasses.Field[Any]:
    if key not in _FIELDS:
        close = did_you_mean(str(key), _FIELDS, quote=lambda name: f"`{name}`")
        hint = close or f"known keys: {', '.join(_FIELDS)}"
        raise ConfigError(f"{path}: unknown key `{SECTION}.{key}`", hint=hint)
    return _FIELDS[key]


def _value(path: Path, section: Any, key: str) -> Any:
    value = section[key]
    where = f"{path}:{yamlio.key_line(section, key)}: `{SECTION}.{key}`"
    if _FIELDS[key].type == "str":
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a path (a string)")
        return value
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise ConfigError(f"{where} must be a string or a list of strings")
    return tuple(str(item) for item in items)
