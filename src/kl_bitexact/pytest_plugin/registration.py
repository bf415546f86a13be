"""The `register_ci` pytest marker: sglang's CI registration fields, validated (pure).

sglang registers a file with `register_cuda_ci(est_time, suite=None, nightly=False,
disabled=None, *, stage=None, runner_config=None)`; either `suite` or the pair
`stage` + `runner_config` (suite name `{stage}-test-{runner_config}`) names its suite.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kl_bitexact.errors import ConfigError
from kl_bitexact.registry.model import suite_name
from kl_bitexact.registry.scan import BACKENDS

_USAGE = "write @pytest.mark.register_ci('cuda', est_time=100, suite='stage-b-test-large-1-gpu')"


@dataclass(frozen=True)
class RegisterMarker:
    """What a `register_ci` marker says (lint-ci's `registry.Registration` is the AST twin)."""

    backend: str
    est_time: float
    suite_name: str
    nightly: bool = False
    disabled: str | None = None


def from_marker(args: Sequence[Any], kwargs: Mapping[str, Any]) -> RegisterMarker:
    fields = _bind(args, kwargs)
    backend, est_time = fields.pop("backend", None), fields.pop("est_time", None)
    if backend not in BACKENDS:
        raise ConfigError(f"register_ci: backend {backend!r} is not one of {', '.join(BACKENDS)}")
    if isinstance(est_time, bool) or not isinstance(est_time, (int, float)) or est_time <= 0:
        raise ConfigError(f"register_ci: est_time {est_time!r} must be a positive number (seconds)")
    disabled = fields.get("disabled")
    if disabled is not None and (not isinstance(disabled, str) or not disabled.strip()):
        raise ConfigError("register_ci: disabled must be a reason, e.g. disabled='see #14021'")
    return RegisterMarker(
        backend=backend,
        est_time=float(est_time),
        suite_name=_suite_name(fields),
        nightly=bool(fields.get("nightly", False)),
        disabled=disabled,
    )


def _bind(args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    positional = ("backend", "est_time", "suite", "nightly", "disabled")
    if len(args) > len(positional):
        raise ConfigError(f"register_ci: too many positional arguments; {_USAGE}")
    fields = dict(zip(positional[: len(args)], args, strict=True))
    known = {*positional, "stage", "runner_config"}
    for key, value in kwargs.items():
        if key not in known or key in fields:
            raise ConfigError(f"register_ci: unexpected or repeated argument {key!r}; {_USAGE}")
        fields[key] = value
    return fields


def _suite_name(fields: Mapping[str, Any]) -> str:
    suite, stage, runner = fields.get("suite"), fields.get("stage"), fields.get("runner_config")
    if suite is not None and (stage is not None or runner is not None):
        raise ConfigError("register_ci: give suite= or stage= with runner_config=, not both")
    if suite is not None:
        if not isinstance(suite, str) or not suite:
            raise ConfigError(f"register_ci: suite {suite!r} must be a non-empty string")
        return suite
    if isinstance(stage, str) and stage and isinstance(runner, str) and runner:
        return suite_name(stage, runner)
    raise ConfigError(f"register_ci: name the suite; {_USAGE}")
