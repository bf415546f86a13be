"""pytest node ids against the units of a proof run (pure, no imports: `report` reads them
without loading the JUnit reader)."""

from __future__ import annotations

# The check of a proof entry standing for a whole unit (`file.py::Class`, `file.py`) that ran
# nothing on the base revision: compare/proof.py shows it against each head test under the
# unit, and drops it when there is none (a base class without tests is no test on either side).
UNIT_CHECK = "proof-unit"


def under(test_id: str, unit: str) -> bool:
    """Whether the node id `test_id` lies under `unit` (equal, or below it: `::` or a
    parameter `[`). Files compare by their trailing path: units are relative to the
    repository root, node ids to pytest's rootdir, which an ini file in a subdirectory moves."""
    file, _, rest = test_id.partition("::")
    unit_file, _, prefix = unit.partition("::")
    if not same_file(file, unit_file):
        return False
    return not prefix or rest == prefix or rest.startswith((f"{prefix}::", f"{prefix}["))


def same_file(node_file: str, unit_file: str) -> bool:
    """`node_file` (relative to pytest's rootdir) is `unit_file` (relative to the root)."""
    return bool(node_file) and (node_file == unit_file or unit_file.endswith("/" + node_file))
