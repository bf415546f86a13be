"""Names of the JUnit properties the pytest plugin writes and the importer reads.

The plugin adds them to `item.user_properties`; pytest's --junitxml writes them as
<property name=... value=...> in each <testcase>, so they survive a run on another machine
and reach `kl-bitexact import-junit` as well as `kl-bitexact pytest`.
"""

from __future__ import annotations

PREFIX = "kl_bitexact."
NODEID = PREFIX + "nodeid"
# pytest's rootdir as seen from the directory pytest started in ("." when they are one): a
# node id names the test as an argument to pytest only from its rootdir.
ROOTDIR = PREFIX + "rootdir"
# "xpass" when a test marked xfail passed (JUnit cannot tell it from a plain pass).
OUTCOME = PREFIX + "outcome"
XFAIL_REASON = PREFIX + "xfail_reason"
BLOCKED_BY = PREFIX + "blocked_by"  # JSON list of "owner/repo#N"
RESULT = PREFIX + "result"  # JSON of one results.json test, as `kl-bitexact run` writes it
SUITE = PREFIX + "suite"  # the registered suite name
SERVER = PREFIX + "server"  # JSON {"engine", "args", "launch_s"} of the server the test used
# JSON {"exact", "first_divergence", "samples", "warnings"}: the logprobs the test's server
# answered, paired decode vs replay by the plugin's observer (`kl-bitexact pytest`).
OBSERVED = PREFIX + "observed"
# JSON of a results.json `reach`: which functions the test names ran (pytest_plugin/reach.py).
REACH = PREFIX + "reach"
# JSON list of results.json facts: each `kl_expect` fact against what the test's server
# reported (pytest_plugin/facts.py).
FACTS = PREFIX + "facts"
# `pytest --prove-base`: the new or changed unit (node id prefix) the test was run for.
PROVE_UNIT = PREFIX + "prove_unit"
