"""Re-render the golden comments in tests/golden/ and show what changed.

    python tests/golden/refresh.py          # rewrite changed files, print their diffs
    python tests/golden/refresh.py --check  # only report differences (exit 1 if any)

Review every printed diff before committing: a golden file is the comment maintainers
will read, so a change to it is a change to the product.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))

from golden_scenarios import all_scenarios, golden_path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="do not write, exit 1 on a change")
    args = parser.parse_args()
    changed = 0
    for scenario in all_scenarios():
        path = golden_path(scenario)
        new = scenario.render()
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        if new == old:
            continue
        changed += 1
        diff = difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), str(path), "rendered"
        )
        sys.stdout.writelines(diff)
        if not args.check:
            path.write_text(new, encoding="utf-8")
    print(f"{changed} golden file(s) {'differ' if args.check else 'updated'}", file=sys.stderr)
    return 1 if changed and args.check else 0


if __name__ == "__main__":
    raise SystemExit(main())
