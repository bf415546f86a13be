"""Which event put the label that is on a pull request now (pure)."""

from __future__ import annotations

from kl_bitexact.publish.labeller import LabelEvent, _is_bot, latest_added


def test_the_latest_event_of_the_label_decides_in_whatever_order_they_come() -> None:
    added_by_author = LabelEvent(10, added=True, actor="alice")
    removed = LabelEvent(11, added=False, actor="alice")
    added_by_maintainer = LabelEvent(12, added=True, actor="maint")
    events = [added_by_maintainer, removed, added_by_author]
    assert latest_added(events) == added_by_maintainer
    assert latest_added([added_by_author, removed]) is None  # taken off last
    assert latest_added([]) is None


def test_a_bot_is_named_by_its_type_or_an_app_s_login() -> None:
    assert _is_bot("renovate[bot]", "Bot")
    assert _is_bot("some-app[bot]", None)  # no type given: the login says so
    assert _is_bot("machine-user", "Bot")
    assert not _is_bot("maintainer", "User")
    assert not _is_bot(None, None)
