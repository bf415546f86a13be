"""Which event put the label that is on a pull request now (pure)."""

from __future__ import annotations

from kl_bitexact.publish.labeller import LabelEvent, latest_added


def test_the_latest_event_of_the_label_decides_in_whatever_order_they_come() -> None:
    added_by_author = LabelEvent(10, added=True, actor="alice")
    removed = LabelEvent(11, added=False, actor="alice")
    added_by_maintainer = LabelEvent(12, added=True, actor="maint")
    events = [added_by_maintainer, removed, added_by_author]
    assert latest_added(events) == added_by_maintainer
    assert latest_added([added_by_author, removed]) is None  # taken off last
    assert latest_added([]) is None
