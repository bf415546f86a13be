"""Every input of the hostile corpus (tests/helpers/hostile_inputs.py), run as a user
would: a clear error (exit 2, the file named) or the gate's own verdict, never an
internal error (exit 3), never a hang."""

from __future__ import annotations

import pytest
from hostile_inputs import CASES, Case

# A minute: the slowest case (a 50 MB source) is refused by its size before it is read.
TIMEOUT_S = 60


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_input_is_a_clear_error_not_a_crash(cli, tmp_path, case: Case):
    args = case.build(tmp_path)
    result = cli(args, cwd=tmp_path, timeout=TIMEOUT_S, env={"KL_BITEXACT_LOG_DIR": str(tmp_path)})
    output = result.stdout + result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in output, output[-3000:]
    assert result.returncode in case.exit_codes, output[-3000:]
    assert case.says in output, output[-3000:]
