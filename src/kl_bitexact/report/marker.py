"""The hidden marker's default key: what finds the sticky comment again (`render`), and
what `--key` defaults to (a name only, so `report --help` imports no renderer)."""

from __future__ import annotations

DEFAULT_KEY = "kl-bitexact"
