"""Bounded-time fuzzing of every reader of untrusted input (issue 20): `report` (results,
baseline, blockers, findings), suite files, JUnit import, `lint-ci` on generated
repositories, and the engine answer parsers. Each starts from valid input and bends it
(tests/helpers/fuzzing.py); whatever comes out, the command ends with its own exit code
(0, 1 or 2) and never an internal error (3), a traceback or a hang.

The crash corpus is kept twice: tests/test_hostile_inputs.py runs it as a user would
(subprocesses, the large inputs), and each crash a fuzzer found is an `@example` here.
`KL_BITEXACT_FUZZ_EXAMPLES=N` runs N examples per target instead of the CI's budget (about
a minute for the whole file on a 2-core machine), for a longer hunt.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import threading
from importlib import resources
from pathlib import Path
from urllib.parse import urlsplit
from xml.sax.saxutils import escape as xml_escape
from xml.sax.saxutils import quoteattr

import fake_sglang_server
import fake_vllm
import requests
import yaml
from fake_engine import FakeEngine
from fuzzing import (
    Mutation,
    at,
    cli,
    edit,
    environment,
    json_values,
    mutate,
    mutations,
    text_edits,
)
from golden_scenarios import BLOCKER, check_result, red_hicache, results
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from kl_bitexact.errors import FatalError
from kl_bitexact.ingest import properties as prop
from kl_bitexact.results import io as results_io
from kl_bitexact.results import model as r
from kl_bitexact.run.checks import run_check
from kl_bitexact.run.engines import transport
from kl_bitexact.run.engines.http import JsonClient
from kl_bitexact.run.engines.openai import DIALECTS, OpenAIEngine, served_model
from kl_bitexact.run.engines.sglang import SglangEngine
from kl_bitexact.suite.model import NOT_BUNDLED, CheckName, DialectName, TestSpec

EXAMPLES = int(os.environ.get("KL_BITEXACT_FUZZ_EXAMPLES", "0")) or None
# What a command may end with: the gate's verdict (0, 1) or a clear error (2).
CLEAN = (0, 1, 2)


def budget(examples: int) -> settings:
    """`examples` per target in CI (deterministic there: hypothesis's CI profile), more on
    request; no per-example deadline (a loaded machine is slow), the suite's timeout
    stands for a hang."""
    return settings(
        max_examples=EXAMPLES or examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def assert_clean(code: int, stderr: str, argv: list[str], files: dict[str, str]) -> None:
    shown = "\n".join(f"--- {name}\n{text[:2000]}" for name, text in files.items())
    assert code in CLEAN and "internal error" not in stderr, (
        f"kl-bitexact {' '.join(argv)} exited {code}\n{stderr[-2000:]}\n{shown}"
    )


# --- report: results, baseline, blockers, findings ---------------------------------------

_DIVERGED = red_hicache("t::red", blocked_by=(BLOCKER,))
_FLAKY = check_result(
    "t::flaky",
    r.Status.FLAKY,
    repeats=r.Repeats(
        count=3,
        positions=10,
        changed=2,
        kl=(0.0, 1e-9, None),
        cache_hits=(32, 32, None),
        statuses=(r.Status.PASSED, r.Status.FAILED, r.Status.ERROR),
        first_change="sample 3, token 7",
    ),
)
HEAD = results_io.to_json(results(check_result("t::ok"), _DIVERGED, _FLAKY))
BASE = results_io.to_json(results(check_result("t::ok"), red_hicache("t::red")))
BLOCKERS = {BLOCKER: "open", "o/r#2": "merged"}
FINDINGS = {
    "findings": [
        {"file": "test/x.py", "line": 3, "code": "unlisted-suite", "severity": "error",
         "message": "m", "fix": "f"},
    ]
}  # fmt: skip


def _report(
    head: object, base: object, blockers: object, findings: object, raw: str | None
) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        files = {
            "head.json": raw if raw is not None else json.dumps(head),
            "base.json": json.dumps(base),
            "blockers.json": json.dumps(blockers),
            "findings.json": json.dumps(findings),
        }
        for name, text in files.items():
            (directory / name).write_text(text, encoding="utf-8", errors="surrogatepass")
        argv = ["report", str(directory / "head.json"), "--out", str(directory / "out.md")]
        argv += ["--baseline", str(directory / "base.json")]
        argv += ["--blockers", str(directory / "blockers.json")]
        argv += ["--findings", str(directory / "findings.json"), "--json"]
        with environment(KL_BITEXACT_LOG_DIR=scratch, GITHUB_ACTIONS="false"):
            code, stderr = cli(argv)
        event(f"exit {code}")
        assert_clean(code, stderr, argv, files)


@budget(300)
@given(
    head=mutations(),
    base=mutations(min_count=0),
    blockers=mutations(max_count=1, min_count=0),
    findings=mutations(max_count=1, min_count=0),
    raw=st.none() | st.none() | text_edits(),
)
# The crashes of issue 20's fuzz of `report`, kept: a subnormal and a zero in a KL chart.
@example(
    head=(Mutation(at(HEAD, "suites", 0, "tests", 0, "kl_per_sample"), "replace", [5e-324, 0]),),
    base=(),
    blockers=(),
    findings=(),
    raw=None,
)
# A list, or a list where a state belongs, in the blocker states.
@example(head=(), base=(), blockers=(Mutation((), "replace", []),), findings=(), raw=None)
@example(head=(), base=(), blockers=(Mutation((0,), "replace", [1]),), findings=(), raw=None)
def test_report_ends_cleanly_whatever_its_files_hold(head, base, blockers, findings, raw):
    mutated = mutate(HEAD, head, focus=at(HEAD, "suites", 0, "tests"))
    text = None
    if raw is not None:  # the same document bent as text: broken syntax, odd characters
        text = edit(json.dumps(mutated), raw)
    _report(
        mutated, mutate(BASE, base), mutate(BLOCKERS, blockers), mutate(FINDINGS, findings), text
    )


# --- suite files --------------------------------------------------------------------------

SUITES = yaml.safe_load(resources.files("kl_bitexact.suites").joinpath("example.yaml").read_text())
SUITES[0]["tests"][0].update(blocked_by=[BLOCKER], exact=True, min_cache_hit_ratio=0.5)
SUITES.append(
    {
        "stage": "extra-b",
        "runner_config": "4-gpu-b200",
        "est_time": 60,
        "server": {"engine": "openai", "dialect": "vllm", "base_url": "http://127.0.0.1:1"},
        "tests": [
            {"name": "p", "check": "match", "prompts": "prompts.json"},
            {"name": "m", "check": "multiturn", "flow": "sglang", "cache_assert": "exact"},
        ],
    }
)
PROMPTS = [[1, 2, 3], [4, 5, 6, 7]]


@budget(300)
@given(
    changes=mutations(),
    prompts=mutations(max_count=2, min_count=0),
    raw=st.none() | st.none() | text_edits(),
)
def test_suite_files_load_or_say_what_is_wrong(changes, prompts, raw):
    from kl_bitexact.commands.run import load_suites

    document = mutate(SUITES, changes, focus=(0,))
    text = yaml.safe_dump(document, allow_unicode=True)
    if raw is not None:
        text = edit(text, raw)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "suite.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        (Path(scratch) / "prompts.json").write_text(json.dumps(mutate(PROMPTS, prompts)))
        try:
            loaded = load_suites([path])
        except FatalError as error:
            event("refused")
            assert error.message.startswith(str(path)), error.message  # names the file
        else:
            event("loaded")
            assert loaded


# --- JUnit XML and console logs (import-junit) ---------------------------------------------

KL_LINES = st.sampled_from(
    [
        "kl_divs=[np.float64(0.0), np.float64(1e-9)]",
        "kl_divs=[0.0, nan, inf]",
        "kl_divs=[",
        "avg_kl_div=0.0",
        "avg_kl_div=nan",
        "avg_kl_div=1e999",
        "ACC_THRESHOLDS={'kl_div': 0.002}",
        "ACC_THRESHOLDS={'kl_div': x}",
        "avg_kl_div=0.11 > threshold=0.002 for MODEL HELPER",
        "Prefill cache miss for prompt 3, skipping",
        "Decode cache miss for prompt 99999999999999999999, skipping",
        "Too few decode cache hits: 16/32",
        "Too few decode cache hits: 16/0",
        "Radix cache is disabled, skipping",
        "t/test_kl.py::TestKL::test_ok PASSED",
        "t/test_kl.py::TestKL::test_red FAILED",
    ]
)
ATTRIBUTES = st.sampled_from(["name", "classname", "file", "line", "time", "tests", "message"])
PROPERTY_NAMES = st.sampled_from(
    [prop.NODEID, prop.OUTCOME, prop.XFAIL_REASON, prop.BLOCKED_BY, prop.RESULT, prop.SUITE,
     prop.SERVER, "other"]
)  # fmt: skip
RESULT_PROPERTY = results_io.to_json(results(_DIVERGED))["suites"][0]["tests"][0]


# Text XML can carry (no controls, no lone surrogates): a document that is not XML at all
# is the raw edits' job, and would hide everything after the parser.
XML_TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=10)
XML_NAME = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zs")), min_size=1, max_size=10)


def _attribute_value() -> st.SearchStrategy[str]:
    return (
        st.sampled_from(["", "t.test_kl.TestKL", "test_a", "1.5", "nan", "-1", "1e999", "a::b"])
        | XML_TEXT
    )


@st.composite
def _property(draw: st.DrawFn) -> str:
    name = draw(PROPERTY_NAMES)
    if name == prop.RESULT:
        value = json.dumps(mutate(RESULT_PROPERTY, draw(mutations(min_count=0))))
    elif name in (prop.BLOCKED_BY, prop.SERVER):
        value = json.dumps(draw(json_values()))
    else:
        value = draw(_attribute_value())
    return f"<property name={quoteattr(name)} value={quoteattr(value)}/>"


@st.composite
def _testcase(draw: st.DrawFn) -> str:
    keys = draw(st.lists(ATTRIBUTES, unique=True, max_size=5))
    named = draw(st.integers(0, 9)) > 0  # mostly a test pytest could have written
    values = {key: draw(_attribute_value()) for key in keys}
    if named:
        values["name"] = draw(st.sampled_from(["test_a", "test_b[1.5]", "a::b"]) | XML_NAME)
        values["classname"] = draw(st.sampled_from(["t.test_kl.TestKL", "t.test_kl", ""]))
    attributes = " ".join(f"{key}={quoteattr(value)}" for key, value in values.items())
    children = [f"<properties>{''.join(draw(st.lists(_property(), max_size=3)))}</properties>"]
    for tag in draw(st.lists(st.sampled_from(["failure", "error", "skipped"]), max_size=2)):
        kind = draw(st.sampled_from(["", ' type="pytest.xfail"', ' type="pytest.skip"']))
        children.append(f"<{tag}{kind} message={quoteattr(draw(_attribute_value()))}/>")
    lines = "\n".join(draw(st.lists(KL_LINES | XML_TEXT, max_size=5)))
    children.append(f"<system-out>{xml_escape(lines)}</system-out>")
    return f"<testcase {attributes}>{''.join(children)}</testcase>"


@st.composite
def junit_documents(draw: st.DrawFn) -> str:
    cases = "".join(draw(st.lists(_testcase(), max_size=4)))
    encoding = draw(st.sampled_from(["utf-8", "utf-8", "utf-8", "UTF-8", "x-nonexistent"]))
    head = f'<?xml version="1.0" encoding="{encoding}"?>'
    return f"{head}<testsuites><testsuite>{cases}</testsuite></testsuites>"


@budget(200)
@given(
    xml=junit_documents(),
    log=st.lists(KL_LINES | st.text(max_size=20), max_size=8),
    raw=st.none() | text_edits(),
)
def test_junit_and_console_logs_import_cleanly(xml, log, raw):
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        files = {"junit.xml": xml if raw is None else edit(xml, raw), "console.log": "\n".join(log)}
        for name, text in files.items():
            (directory / name).write_text(text, encoding="utf-8", errors="surrogatepass")
        argv = [
            "import-junit",
            str(directory / "junit.xml"),
            "--log",
            str(directory / "console.log"),
        ]
        argv += ["--out", str(directory / "out")]
        with environment(KL_BITEXACT_LOG_DIR=scratch, GITHUB_ACTIONS="false"):
            code, stderr = cli(argv)
        event(f"exit {code}")
        assert_clean(code, stderr, argv, files)


# --- lint-ci on generated repositories ------------------------------------------------------

REGISTRY = Path(__file__).parent / "fixtures" / "registry"
OVERLAYS = sorted(p.name for p in REGISTRY.iterdir() if p.is_dir() and p.name != "base")
PY_PIECES = st.sampled_from(
    ["register_cuda_ci(", "register_cpu_ci(", "register_amd_ci(", "est_time=", "suite=",
     "nightly=True", "disabled=", "'x'", "\"stage-a\"", "1e999", "-1", "None", ")", "(", ",",
     "\n", "    ", "[", "]", "{", "}", ":", "PER_COMMIT_SUITES", "NIGHTLY_SUITES", "import ",
     "if __name__ == '__main__':", "*", "**k", "lambda: 0", "#"]
)  # fmt: skip


@st.composite
def _python_edits(draw: st.DrawFn) -> tuple[tuple[int, int, str], ...]:
    count = draw(st.integers(1, 4))
    return tuple(
        (
            draw(st.integers(0, 10_000)),
            draw(st.integers(0, 12)),
            draw(PY_PIECES | st.text(max_size=4)),
        )
        for _ in range(count)
    )


@budget(100)
@given(
    overlay=st.none() | st.sampled_from(OVERLAYS),
    picks=st.lists(st.integers(0, 1000), min_size=1, max_size=3),
    python=_python_edits(),
    changes=mutations(),
    fix=st.sampled_from([False, False, True]),
)
def test_lint_ci_on_a_generated_repository_ends_cleanly(overlay, picks, python, changes, fix):
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "repo"
        shutil.copytree(REGISTRY / "base", root)
        if overlay is not None:
            shutil.copytree(REGISTRY / overlay, root, dirs_exist_ok=True)
        files = sorted(p for p in root.rglob("*") if p.is_file())
        for pick in picks:  # bend a few files: YAML by its data, Python by its text
            path = files[pick % len(files)]
            text = path.read_text(encoding="utf-8")
            if path.suffix in (".yml", ".yaml"):
                try:
                    bent = yaml.safe_dump(mutate(yaml.safe_load(text), changes), allow_unicode=True)
                except (yaml.YAMLError, RecursionError):  # PyYAML's dumper recurses per level
                    bent = edit(text, python)
            else:
                bent = edit(text, python)
            path.write_text(bent, encoding="utf-8", errors="surrogatepass")
        argv = ["lint-ci", "--root", str(root), "--format", "json"] + (["--fix"] if fix else [])
        with environment(
            KL_BITEXACT_LOG_DIR=scratch, KL_BITEXACT_CACHE_DIR=scratch, GITHUB_ACTIONS="false"
        ):
            code, stderr = cli(argv)
        event(f"exit {code}")
        assert_clean(code, stderr, argv, {str(p.relative_to(root)): "" for p in files[:0]})


# --- engine answers: sglang, vLLM, llama.cpp ------------------------------------------------


class Answering(requests.adapters.BaseAdapter):
    """A transport that answers each request in this process (a fake server's logic) and
    bends the answers the mutations name by their order: the `n`-th answer is mutated
    by every (n, mutation) given, or sent with another status or as broken text."""

    def __init__(self, answer, bends) -> None:
        super().__init__()
        self.answer = answer
        self.bends = bends
        self.count = 0
        self.lock = threading.Lock()  # vLLM requests go out in parallel

    def respond(self, method, url, body):
        """The fake server's answer to one request, bent as the mutations say: (status, text)."""
        with self.lock:
            index, self.count = self.count, self.count + 1
        split = urlsplit(url)
        path = split.path + (f"?{split.query}" if split.query else "")
        status, payload = self.answer(method, path, body)
        mine = [bend for bend in self.bends if bend[0] == index]
        payload = mutate(payload, [change for _, change, _, _ in mine if change])
        text = json.dumps(payload)
        for _, _, garble, other_status in mine:
            text = edit(text, garble) if garble else text
            status = other_status or status
        return status, text

    def send(self, request, stream=False, timeout=None, verify=True, cert=None, proxies=None):
        body = json.loads(request.body) if request.body else None
        status, text = self.respond(request.method, request.url, body)
        response = requests.Response()
        response.status_code = status
        response.raw = io.BytesIO(text.encode("utf-8", errors="surrogatepass"))
        response.headers["Content-Type"] = "application/json"
        response.url, response.request, response.encoding = request.url, request, "utf-8"
        return response

    def close(self) -> None:
        pass


class AnsweringConnection(transport.Connection):
    """The sglang adapter's connection, answered by an `Answering` in this process."""

    def __init__(self, answering: Answering) -> None:
        super().__init__()
        self.answering = answering

    def request(self, method, url, body=None, *, total_s, max_bytes=0):
        # The body as the wire carries it, so the fake reads what a server would.
        sent = json.loads(json.dumps(body, allow_nan=False)) if body is not None else None
        status, text = self.answering.respond(method, url, sent)
        return transport.Answer(status, text.encode("utf-8", errors="surrogatepass"))


def _sglang_answers():
    engine = FakeEngine(page_size=4, track_interval=4)

    def answer(method, path, body):
        if path in ("/server_info", "/get_server_info"):
            return 200, engine.server_info()
        if path == "/flush_cache":
            engine.flush()
            return 200, {}
        return 200, fake_sglang_server.answer(engine, body)

    return answer


def _vllm_answers():
    state = fake_vllm.FakeVllmState()

    def answer(method, path, body):
        if path == "/v1/models":
            return 200, {"object": "list", "data": [{"id": fake_vllm.MODEL, "max_model_len": 4096}]}
        if path == "/version":
            return 200, {"version": "0.11.0"}
        if path == "/reset_prefix_cache":
            state.cache.clear()
            return 200, {}
        return 200, fake_vllm._complete(state, body)

    return answer


def _llamacpp_answers():
    """llama-server's answers as recorded in tests/run/test_openai_engine.py, over the same
    pure "model" as the other fakes: each token's logprob a function of its prefix."""

    seen: list[list[int]] = []  # the slot's cache: every sequence it has held

    def completion(body):
        prompt = list(body["prompt"])
        forced = list(body.get("logit_bias") or {})
        tokens = [int(forced[0])] if forced else []
        while len(tokens) < body["n_predict"]:
            tokens.append(fake_vllm.next_token(prompt + tokens, body.get("seed")))
        cached = 0
        if body.get("cache_prompt"):  # the longest cached prefix, one token left to compute
            shared = (_common_prefix(prompt, old) for old in seen)
            cached = min(max(shared, default=0), len(prompt) - 1)
        seen.append(prompt + tokens)
        return {
            "tokens": tokens,
            "tokens_evaluated": len(prompt),
            "stop_type": "limit",
            "timings": {"cache_n": cached, "prompt_n": len(prompt) - cached},
            "completion_probabilities": [
                {"id": t, "logprob": fake_vllm.logprob(prompt + tokens[: i + 1])}
                for i, t in enumerate(tokens)
            ],
        }

    def answer(method, path, body):
        if path == "/props":
            return 200, {"model_path": "m.gguf", "total_slots": 1, "build_info": "b1",
                         "default_generation_settings": {"n_ctx": 4096}}  # fmt: skip
        if path == "/v1/models":
            return 200, {"data": [{"id": "m.gguf", "meta": {"n_vocab": fake_vllm.VOCAB}}]}
        if path == "/slots":
            return 200, [{"id": 0}]
        if path.startswith("/slots/"):
            seen.clear()
            return 200, {"id_slot": 0, "n_erased": 1}
        if path == "/tokenize":
            return 200, {"tokens": [{"id": t, "piece": f" w{t}"} for t in body["content"]]}
        return 200, completion(body)

    return answer


def _common_prefix(a: list[int], b: list[int]) -> int:
    shorter = min(len(a), len(b))
    return next((i for i in range(shorter) if a[i] != b[i]), shorter)


def _engine(kind: str, adapter: Answering):
    url = "http://fuzz.invalid"
    if kind == "sglang":
        engine = SglangEngine(url, request_timeout=30)
        engine._connection = AnsweringConnection(adapter)  # its only way out
        return engine
    client = JsonClient(url, timeout_s=30)
    client.session.mount("http://", adapter)
    dialect = DialectName.VLLM if kind == "vllm" else DialectName.LLAMACPP
    return OpenAIEngine(client, DIALECTS[dialect](served_model(client)))


ANSWERS = {"sglang": _sglang_answers, "vllm": _vllm_answers, "llamacpp": _llamacpp_answers}
CHECK_SPECS = {
    name: TestSpec(name=name, check=name, samples=2, prompt_tokens=(8, 12), max_new_tokens=8,
                   vocab_size=500, groups=1, branches=2, prefix_tokens=8,
                   turn_suffix_tokens=(4, 4), min_cache_hit_ratio=0.0)
    for name in CheckName
    if name not in NOT_BUNDLED  # they need a host tier, a socket: tests/run runs each for real
}  # fmt: skip


@st.composite
def _bends(draw: st.DrawFn) -> tuple:
    count = draw(st.integers(1, 4))
    return tuple(
        (
            draw(st.integers(0, 30)),
            draw(st.none() | _one_mutation()),
            draw(st.none() | st.none() | st.none() | text_edits(max_count=1)),
            draw(st.none() | st.none() | st.none() | st.sampled_from([404, 500, 501, 204])),
        )
        for _ in range(count)
    )


def _one_mutation() -> st.SearchStrategy[Mutation]:
    return mutations(max_count=1).map(lambda found: found[0])


@budget(300)
@given(
    kind=st.sampled_from(sorted(ANSWERS)),
    check=st.sampled_from(sorted(CHECK_SPECS)),
    bends=_bends(),
)
# Found by this fuzzer: a null among llama-server's token ids (int(None), a TypeError that
# ended the whole run).
@example(
    kind="llamacpp",
    check=CheckName.DECODE_CACHE_HIT,
    bends=((3, Mutation((0, 0, 0, 0), "replace", None, focused=True), None, None),),
)
def test_engine_answers_error_the_test_never_the_run(kind, check, bends):
    adapter = Answering(ANSWERS[kind](), bends)
    spec = CHECK_SPECS[check]
    try:
        result = run_check(_engine(kind, adapter), spec, f"fuzz::{check}")
    except FatalError as error:  # what the runner turns into this test's error
        event(f"{kind}: {type(error).__name__}")
        assert error.message
    else:
        event(f"{kind}: {result.status.value}")


def test_every_fuzzer_starts_from_valid_input(tmp_path):
    # A seed the reader refuses would make every mutation of it a refusal, and the fuzzer
    # would test nothing past validation.
    from kl_bitexact.commands.run import load_suites

    for name, document in {"head.json": HEAD, "base.json": BASE}.items():
        (tmp_path / name).write_text(json.dumps(document))
    (tmp_path / "blockers.json").write_text(json.dumps(BLOCKERS))
    (tmp_path / "findings.json").write_text(json.dumps(FINDINGS))
    code, stderr = cli(
        ["report", str(tmp_path / "head.json"), "--baseline", str(tmp_path / "base.json"),
         "--blockers", str(tmp_path / "blockers.json"), "--findings",
         str(tmp_path / "findings.json"), "--out", str(tmp_path / "out.md")]
    )  # fmt: skip
    assert code == 1, stderr  # t::flaky has a red repeat: it gates
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(SUITES))
    (tmp_path / "prompts.json").write_text(json.dumps(PROMPTS))
    assert len(load_suites([tmp_path / "suite.yaml"])) == len(SUITES)
    with environment(KL_BITEXACT_CACHE_DIR=str(tmp_path)):
        assert cli(["lint-ci", "--root", str(REGISTRY / "base")])[0] == 0
    for kind, answers in ANSWERS.items():
        for check, spec in CHECK_SPECS.items():
            # Every check measures (the fakes' cache geometry may fail some, which is fine).
            result = run_check(_engine(kind, Answering(answers(), ())), spec, check)
            assert result.exact is not None and result.exact.tokens, (kind, check, result)
