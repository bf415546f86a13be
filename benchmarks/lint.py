"""`kl-bitexact lint-ci` on a generated repository the size of sglang's, cold and warm.

    python benchmarks/lint.py [--files 3600] [--workflows 83] [--runs 3] [--keep DIR]
    python benchmarks/lint.py --root CHECKOUT [--root CHECKOUT2 ...]  # real checkouts

Generates a tree laid out like sglang's (test/registered/<area>/test_*.py with one or two
register_*_ci calls near the top, a unittest class of realistic length and a main block;
test/run_suite.py with the allowlist dicts and its glob collection; a reusable stage
workflow and its callers, and as many other workflows as sglang has, of its sizes: 83
files, 820 KB, 20,000 lines, two of 1,800 lines, most steps installing or uploading and
some starting the runner directly, through a wrapper script or `docker exec ... bash -c`)
and times whole `python -m kl_bitexact lint-ci` processes: cold (empty cache directory) and
warm (the cache the cold run left), wall and CPU (the child's user + system time). The
processes run with bytecode caching on, as an installed package does, after one untimed
run that writes it. File sizes follow sglang's: lognormal around 9 KB, from 1 KB to 60 KB.
Targets (issue 25): cold < 1.5 s CPU and warm < 0.3 s CPU on a 2-core machine; issue 40:
cold <= 1.0 s CPU on every sglang snapshot (`--root` each; runs interleaved between them).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
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
        "import glob\nimport os\n\n"
        "PER_COMMIT_SUITES = {\n    HWBackend.CUDA: [\n" + listed + "    ],\n"
        '    HWBackend.AMD: ["stage-b-test-amd"],\n}\n'
        "NIGHTLY_SUITES = {HWBackend.CUDA: []}\n"
        "_SUITE_CHECKED_BACKENDS = {HWBackend.CUDA, HWBackend.CPU}\n\n\n"
        "def files():\n"
        "    here = os.path.dirname(os.path.abspath(__file__))\n"
        "    pattern = os.path.join(here, 'registered', '**', '*.py')\n"
        "    return [\n"
        "        f\n"
        "        for f in glob.glob(pattern, recursive=True)\n"
        "        if not f.endswith('/conftest.py') and not f.endswith('/__init__.py')\n"
        "    ]\n"
    )


WRAPPER = """#!/bin/bash
WORKDIR="/checkout/test/legacy"
while [[ $# -gt 0 ]]; do
  case "$1" in
    -w|--workdir) WORKDIR="$2"; shift 2 ;;
    -e) shift 2 ;;
    *) break ;;
  esac
done
docker exec -w "$WORKDIR" ci_box "$@"
"""

STEP_KINDS = (
    "      - name: Install dependencies {n}\n        run: |\n"
    "          bash scripts/ci/install.sh --extra {n}\n"
    "          pip install -e 'python[dev]' --no-deps\n          pip list | grep torch\n",
    "      - name: Upload artifacts {n}\n        if: always()\n"
    "        uses: actions/upload-artifact@v4\n        with:\n"
    "          name: logs-{n}-${{{{ github.run_id }}}}\n          path: |\n"
    "            test/*.log\n            /tmp/*.json\n",
    "      - name: Show environment {n}\n        env:\n          STEP: '{n}'\n"
    '        run: |\n          echo "step $STEP"\n          nvidia-smi || true\n'
    "          df -h && free -g\n          ls -la ${{{{ github.workspace }}}}\n",
    "      - name: Run suite {n}\n        timeout-minutes: 60\n        run: |\n"
    "          cd test\n          python3 run_suite.py --hw cuda --suite {suite} "
    "--timeout-per-file 1800\n",
    "      - name: Run suite in the container {n}\n        run: |\n"
    "          bash scripts/ci/exec.sh -w /checkout/test -e K=V \\\n"
    "            python3 run_suite.py --hw amd --suite stage-b-test-amd || STATUS=$?\n"
    "          exit ${{STATUS:-0}}\n",
    "      - name: Run in the box {n}\n        run: |\n"
    '          docker exec -w /checkout/ box bash -c "cd ./test && python3 run_suite.py '
    '--hw cuda --suite {suite}"\n',
)


def other_workflow(rng: random.Random, index: int, target: int) -> str:
    """A workflow of about `target` bytes: jobs of mostly install/upload/info steps."""
    text = f"name: Generated {index}\n\non:\n  pull_request:\n  workflow_dispatch:\n\njobs:\n"
    job = 0
    while len(text) < target:
        text += f"  job-{job}:\n    runs-on: linux-{rng.choice(RUNNERS)}\n"
        text += "    timeout-minutes: 90\n    steps:\n      - uses: actions/checkout@v4\n"
        for step in range(rng.randint(4, 12)):
            kind = rng.choices(range(len(STEP_KINDS)), weights=(30, 25, 30, 6, 4, 3))[0]
            suite = f"{rng.choice(STAGES)}-test-{rng.choice(RUNNERS)}"
            text += STEP_KINDS[kind].format(n=f"{job}-{step}", suite=suite)
        job += 1
    return text


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


def generate(root: Path, count: int, seed: int, workflow_count: int) -> int:
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
    # sglang's other workflows: two of ~75 KB, the rest lognormal around 7 KB (820 KB in all)
    for index in range(max(workflow_count - len(workflows()), 0)):
        target = 75_000 if index < 2 else int(min(rng.lognormvariate(8.8, 0.7), 40_000))
        path = root / ".github/workflows" / f"generated-{index}.yml"
        path.write_text(other_workflow(rng, index, target))
    (root / "scripts/ci").mkdir(parents=True)
    (root / "scripts/ci/exec.sh").write_text(WRAPPER)
    return total


def timed_lint(root: Path, cache: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one lint-ci process."""
    env = {**os.environ, "KL_BITEXACT_CACHE_DIR": str(cache), "XDG_CACHE_HOME": str(cache)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its bytecode
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "kl_bitexact", "lint-ci", "--root", str(root)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode not in (0, 1):
        sys.exit(f"lint-ci failed ({result.returncode}):\n{result.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=3600)
    parser.add_argument("--workflows", type=int, default=83)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="generate into DIR and keep it")
    parser.add_argument(
        "--root",
        type=Path,
        action="append",
        help="time this checkout instead of generating (repeat: several, interleaved)",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kl-lint-bench-"))
    roots = args.root or [args.keep or work / "repo"]
    if args.root is None and not (roots[0] / "test/registered").is_dir():
        size = generate(roots[0], args.files, seed=16, workflow_count=args.workflows)
        print(f"generated {args.files} files, {size / 1e6:.1f} MB (mean {size / args.files:.0f} B)")
    print(f"cpus: {os.cpu_count()}, load average before: {_load()}")
    timed_lint(roots[0], work / "bytecode")  # writes the bytecode; not timed
    cold: dict[Path, list[tuple[float, float]]] = {root: [] for root in roots}
    warm: dict[Path, list[tuple[float, float]]] = {root: [] for root in roots}
    for run in range(args.runs):  # interleaved, so load changes touch every checkout alike
        for index, root in enumerate(roots):
            cache = work / f"cache-{index}-{run}"
            cold[root].append(timed_lint(root, cache))
            warm[root].append(timed_lint(root, cache))
    for root in roots:
        _report(root, cold[root], warm[root])
    print(f"load average after: {_load()}")
    shutil.rmtree(work)


def _report(root: Path, cold: list[tuple[float, float]], warm: list[tuple[float, float]]) -> None:
    flows = sorted((root / ".github/workflows").glob("*.y*ml"))
    kb = sum(path.stat().st_size for path in flows) / 1e3
    tests = sum(1 for _ in (root / "test/registered").rglob("*.py"))
    print(f"{root}: {len(flows)} workflows, {kb:.0f} KB; {tests} files under test/registered")
    for name, runs in (("cold", cold), ("warm", warm)):
        cpu = [c for _, c in runs]
        wall = [w for w, _ in runs]
        print(
            f"  {name}: CPU median {statistics.median(cpu):.2f} s (runs: {_list(cpu)}), "
            f"wall median {statistics.median(wall):.2f} s"
        )


def _load() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def _list(values: list[float]) -> str:
    return ", ".join(f"{value:.2f}" for value in values)


if __name__ == "__main__":
    main()
