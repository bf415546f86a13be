"""`did_you_mean`: the one wording of a suggestion for an unknown name."""

from __future__ import annotations

from kl_bitexact.errors import did_you_mean


def test_names_the_closest_known_word_quoted() -> None:
    assert did_you_mean("sampels", ["seed", "samples", "prompts"]) == "did you mean 'samples'?"


def test_nothing_close_is_no_suggestion() -> None:
    assert did_you_mean("zzz", ["samples", "seed"]) is None
    assert did_you_mean("samples", []) is None


def test_the_caller_may_quote_as_its_message_does() -> None:
    close = did_you_mean("shard_cach", {"shard_cache"}, quote=lambda name: f"`{name}`")
    assert close == "did you mean `shard_cache`?"
