"""`kl-bitexact lint-ci` on a generated repository the size of sglang's, cold and warm.

    python benchmarks/lint.py [--files 3600] [--runs 3] [--keep DIR]

Generates a tree laid out like sglang's (test/registered/<area>/test_*.py with one or two
register_*_ci calls near the top, a unittest class of realistic length and a main block;
test/run_suite.py with the allowlist dicts; a reusable stage workflow and its callers) and
times whole `python -m kl_bitexact lint-ci` processes: cold (empty cache directory) and
warm (the cache the cold run left). File sizes follow sglang's: lognormal around 9 KB,
from 1 KB to 60 KB. Targets (issue 16): cold < 2 s and warm < 0.5 s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

AREAS = ("kl", "spec", "lora", "quant", "sched", "models", "ep", "vlm", "openai", "cache")
RUNNERS = ("1-gpu-small", "1-gpu-large", "2-gpu-large", "4-gpu-h100", "8-gpu-h200")
STAGES = ("base-a", "base-b", "base-c")

METHOD = '''
    def test_case_{n}(self):
        """Check case {n} against the reference outputs."""
        response = self.client.generate(prompt="case {n}", max_new_tokens={tokens})
        self.assertEqual(response["meta_info"]["finish_reason"]["type"], "length")
        for index, logprob in enumerate(response["meta_info"]["output_token_logprobs"]):
            self.assertLess(abs(logprob[0] - self.expected[{n}][index]), 1e-6)  # bit-exact
'''


def test_file(rng: random.Random, index: int) -> str:
    stage, runner = rng.choice(STAGES), rng.choice(RUNNERS)
    target = rng.lognormvariate(9.0, 0.6)
    lines = [
        f'"""Generated test file {index} (benchmark input)."""',
        "",
        "import unittest",
        "",
        "from sglang.test.ci.ci_register import register_amd_ci, register_cuda_ci",
        "from sglang.test.test_utils import CustomTestCase, popen_launch_server",
        "",
        f'register_cuda_ci(est_time={rng.randint(30, 900)}, stage="{stage}", '
        f'runner_config="{runner}")',
    ]
    if rng.random() < 0.2:
        lines.append(f'register_amd_ci(est_time={rng.randint(30, 900)}, suite="stage-b-test-amd")')
    lines += ["", "", f"class TestGenerated{index}(CustomTestCase):"]
    lines += ["    @classmethod", "    def setUpClass(cls):", "        cls.process = None", ""]
    body = "\n".join(lines)
    n = 0
    while len(body) < min(max(target, 1000), 60000):
        body += METHOD.format(n=n, tokens=rng.randint(8, 256))
        n += 1
    return body + '\n\nif __name__ == "__main__":\n    unittest.main()\n'


def run_suite_py() -> str:
    cuda = [f"{stage}-test-{runner}" for stage in STAGES for runner in RUNNERS]
    listed = "".join(f'        "{suite}",\n' for suite in cuda)
    return (
        "PER_COMMIT_SUITES = {\n    HWBackend.CUDA: [\n" + listed + "    ],\n"
        '    HWBackend.AMD: ["stage-b-test-amd"],\n}\n'
        "NIGHTLY_SUITES = {HWBackend.CUDA: []}\n"
        "_SUITE_CHECKED_BACKENDS = {HWBackend.CUDA, HWBackend.CPU}\n"
    )


def workflows() -> dict[str, str]:
    include = "".join(
        f"          - {{ stage: {stage}, runner_config: {runner} }}\n"
        for stage in STAGES
        for runner in RUNNERS
    )
    return {
        "pr-test.yml": "on: pull_request\njobs:\n  stage-test:\n    strategy:\n      matrix:\n"
        "        include:\n" + include + "    uses: ./.github/workflows/_stage.yml\n"
        "    with:\n      self_name: ${{ matrix.stage }}-test-${{ matrix.runner_config }}\n"
        "      runner_config: ${{ matrix.runner_config }}\n",
        "_stage.yml": "on:\n  workflow_call:\n    inputs:\n      self_name: {type: string}\n"
        "      runner_config: {type: string}\njobs:\n  run:\n    runs-on: x\n    steps:\n"
        "      - run: |\n          cd test\n"
        "          python3 run_suite.py --hw cuda --suite ${{ inputs.self_name }}\n",
        "pr-test-amd.yml": "on: pull_request\njobs:\n  amd:\n    runs-on: x\n    steps:\n"
        "      - run: python3 test/run_suite.py --hw amd --suite stage-b-test-amd\n",
    }


def generate(root: Path, count: int, seed: int) -> int:
    rng = random.Random(seed)
    total = 0
    for index in range(count):
        path = root / "test/registered" / AREAS[index % len(AREAS)] / f"test_gen_{index}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        text = test_file(rng, index)
        path.write_text(text)
        total += len(text)
    (root / "test/run_suite.py").write_text(run_suite_py())
    (root / ".github/workflows").mkdir(parents=True)
    for name, text in workflows().items():
        (root / ".github/workflows" / name).write_text(text)
    return total


def timed_lint(root: Path, cache: Path) -> tuple[float, int]:
    env = {**os.environ, "KL_BITEXACT_CACHE_DIR": str(cache), "XDG_CACHE_HOME": str(cache)}
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "kl_bitexact", "lint-ci", "--root", str(root)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if result.returncode not in (0, 1):
        sys.exit(f"lint-ci failed ({result.returncode}):\n{result.stderr}")
    return elapsed, result.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=3600)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="generate into DIR and keep it")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kl-lint-bench-"))
    root = args.keep or work / "repo"
    if not (root / "test/registered").is_dir():
        size = generate(root, args.files, seed=16)
        print(f"generated {args.files} files, {size / 1e6:.1f} MB (mean {size / args.files:.0f} B)")
    cold, warm = [], []
    for run in range(args.runs):
        cache = work / f"cache-{run}"
        cold.append(timed_lint(root, cache)[0])
        warm.append(timed_lint(root, cache)[0])
    print(f"cold: median {statistics.median(cold):.2f} s  (runs: {_list(cold)})")
    print(f"warm: median {statistics.median(warm):.2f} s  (runs: {_list(warm)})")
    print(f"cpus: {os.cpu_count()}, load average: {os.getloadavg()[0]:.1f}")
    shutil.rmtree(work)


def _list(values: list[float]) -> str:
    return ", ".join(f"{value:.2f}" for value in values)


if __name__ == "__main__":
    main()
