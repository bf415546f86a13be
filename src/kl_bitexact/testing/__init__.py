"""Test doubles that ship with the package, so other projects' CI (and `act` runs) can use them.

`python -m kl_bitexact.testing.fake_github --port 0` serves a local GitHub REST API whose
every request and response is checked against GitHub's own OpenAPI description.
"""
