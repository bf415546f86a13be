"""Constants shared by the GitHub tests (a plain module: conftest is not importable)."""

from __future__ import annotations

from kl_bitexact.publish.client import ClientSettings

TOKEN = "ghs_kl_bitexact_test_token_0123456789abcdef"
REPO = "octo/engine"
# Retries with waits of milliseconds, no pacing: the scenarios stay fast.
FAST = ClientSettings(
    timeout_s=10,
    retries=3,
    backoff_factor=0.01,
    max_rate_limit_wait_s=5,
    secondary_rate_wait_s=0.01,
    seconds_between_requests=0,
    seconds_between_writes=0,
)
FAST_ENV = {
    "KL_BITEXACT_GITHUB_TIMEOUT": "10",
    "KL_BITEXACT_GITHUB_RETRIES": "3",
    "KL_BITEXACT_GITHUB_BACKOFF": "0.01",
    "KL_BITEXACT_GITHUB_MAX_RATE_WAIT": "5",
    "KL_BITEXACT_GITHUB_SECONDARY_WAIT": "0.01",
    "KL_BITEXACT_GITHUB_REQUEST_INTERVAL": "0",
    "KL_BITEXACT_GITHUB_WRITE_INTERVAL": "0",
}
