"""The register_ci marker's fields, validated as sglang's register_*_ci would be."""

from __future__ import annotations

import pytest

from kl_bitexact.errors import ConfigError
from kl_bitexact.pytest_plugin.registration import RegisterMarker, from_marker


def test_suite_or_stage_with_runner_config():
    assert from_marker(("cuda", 100), {"suite": "stage-b-test-large-1-gpu"}) == RegisterMarker(
        "cuda", 100.0, "stage-b-test-large-1-gpu"
    )
    pair = from_marker(("amd",), {"est_time": 5, "stage": "extra-b", "runner_config": "4-gpu-b200"})
    assert pair.suite_name == "extra-b-test-4-gpu-b200"
    disabled = from_marker(("cuda", 1, "s", True, "see #14021"), {})
    assert (disabled.nightly, disabled.disabled) == (True, "see #14021")


@pytest.mark.parametrize(
    ("args", "kwargs", "problem"),
    [
        (("gpu", 1), {"suite": "s"}, "backend 'gpu'"),
        (("cuda", 0), {"suite": "s"}, "est_time 0"),
        (("cuda", True), {"suite": "s"}, "est_time True"),
        (("cuda", 1), {"suite": "s", "stage": "x"}, "not both"),
        (("cuda", 1), {"stage": "x"}, "name the suite"),
        (("cuda", 1), {"suite": "s", "disabled": ""}, "disabled must be a reason"),
        (("cuda", 1), {"suite": "s", "colour": "red"}, "unexpected or repeated argument 'colour'"),
        (("cuda", 1, "s"), {"suite": "t"}, "repeated argument 'suite'"),
        (("cuda", 1, "s", False, None, "x"), {}, "too many positional"),
    ],
)
def test_mistakes_are_named(args, kwargs, problem):
    with pytest.raises(ConfigError, match=problem):
        from_marker(args, kwargs)
