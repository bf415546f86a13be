"""Reach under `kl-bitexact pytest`: a test file written the way sglang writes its KL tests
(a unittest class whose setUpClass launches the server, here one laid out like sglang's:
HTTP in one process, the engine in a spawned one) names its functions with
`@pytest.mark.reach`; results.json says, per test, which ran and when."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
IN_CHILD = "kl_bitexact.reference.engine:ReferenceEngine.generate"
IN_PARENT = "kl_bitexact.reference.http:Handler._generate"
AT_START = "kl_bitexact.reference.engine:ReferenceEngine.__init__"
NEVER = "kl_bitexact.reference.speculative:decode"

TEST_FILE = f"""
import subprocess, sys, time, unittest

import pytest
import requests

SERVER = {str(HELPERS / "spawned_engine_server.py")!r}


@pytest.mark.reach({AT_START!r}, {IN_PARENT!r})
class TestSpawned(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.url = "http://127.0.0.1:%d" % PORT
        cls.process = subprocess.Popen([sys.executable, SERVER, "--port", str(PORT)])
        for _ in range(300):
            try:
                if requests.get(cls.url + "/health", timeout=1).ok:
                    return
            except requests.ConnectionError:
                time.sleep(0.1)
        raise RuntimeError("the server did not start")

    @classmethod
    def tearDownClass(cls):
        cls.process.terminate()
        cls.process.wait(timeout=30)

    def generate(self):
        body = {{"input_ids": [1, 2, 3, 4], "sampling_params": {{"max_new_tokens": 2}}}}
        requests.post(self.url + "/generate", json=body, timeout=60).raise_for_status()

    @pytest.mark.reach({IN_CHILD!r})
    def test_generates(self):
        self.generate()

    @pytest.mark.reach({NEVER!r})
    def test_asks_for_what_never_runs(self):
        requests.get(self.url + "/server_info", timeout=60).raise_for_status()

    def test_names_nothing_of_its_own(self):
        pass
"""


def test_each_pytest_test_records_which_named_functions_ran(cli, tmp_path):
    from kl_bitexact.run.server import free_port

    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    port = free_port()
    source = textwrap.dedent(TEST_FILE).replace("PORT", str(port))
    (tmp_path / "test_spawned_kl.py").write_text(source)
    out = tmp_path / "out"
    done = cli(["pytest", "--out", str(out), "--", "test_spawned_kl.py"], cwd=tmp_path)
    # The test naming a function that never ran is not exercised, and that gates.
    assert done.returncode == 1, done.stdout + done.stderr
    results = json.loads((out / "results.json").read_text())
    statuses = {
        test["id"].rsplit("::", 1)[1]: (test["status"], test["message"])
        for suite in results["suites"]
        for test in suite["tests"]
    }
    assert statuses["test_generates"][0] == "passed"
    assert statuses["test_asks_for_what_never_runs"] == (
        "not_exercised",
        f"not exercised (the test did not test what it claims): {IN_PARENT} never ran; "
        f"{NEVER} never ran",
    )
    reach = {
        test["id"].rsplit("::", 1)[1]: {f["name"]: f["when"] for f in test["reach"]["functions"]}
        for suite in results["suites"]
        for test in suite["tests"]
    }
    # The class's first test's setup launched the server: for the others it is startup.
    assert reach == {
        "test_asks_for_what_never_runs": {AT_START: "test", IN_PARENT: "", NEVER: ""},
        "test_generates": {AT_START: "startup", IN_PARENT: "test", IN_CHILD: "test"},
        "test_names_nothing_of_its_own": {AT_START: "startup", IN_PARENT: ""},
    }
