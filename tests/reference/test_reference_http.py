"""The reference server as a client meets it: a real process speaking sglang's protocol."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

PROMPT = list(range(10, 60))


@pytest.fixture
def server(reference_server):
    return reference_server("--enable-deterministic-inference")


def generate(url: str, body: object) -> requests.Response:
    return requests.post(url + "/generate", json=body, timeout=60)


def test_announces_its_address_and_answers_health(server):
    assert server.url.startswith("http://127.0.0.1:")
    assert requests.get(server.url + "/health", timeout=10).status_code == 200
    assert requests.get(server.url + "/health_generate", timeout=30).status_code == 200


def test_server_info_reports_effective_settings(reference_server):
    server = reference_server(
        "--page-size", "8", "--mamba-track-interval", "16", "--speculative-algorithm", "EAGLE",
        "--fault", "checkpoint-off-by-one",
    )  # fmt: skip
    info = requests.get(server.url + "/get_server_info", timeout=10).json()
    assert info["page_size"] == 8
    assert info["mamba_track_interval"] == 16
    assert info["disable_radix_cache"] is False
    assert info["speculative_algorithm"] == "EAGLE"
    assert info["speculative_num_draft_tokens"] == 4
    assert info["enable_deterministic_inference"] is False
    assert info["faults"] == ["checkpoint-off-by-one"]
    assert info["inactive_faults"] == []


def test_an_inactive_fault_is_a_warning_at_start_and_in_server_info(reference_server):
    server = reference_server("--fault", "hicache-lossy")
    info = requests.get(server.url + "/server_info", timeout=10).json()
    [said] = info["inactive_faults"]
    assert "add --enable-hierarchical-cache" in said
    assert f"serve-reference: warning: {said}\n" in server.stderr()


def test_single_prompt_answer_has_sglang_shape(server):
    body = {
        "input_ids": PROMPT,
        "sampling_params": {"max_new_tokens": 5, "temperature": 1, "sampling_seed": 3},
        "return_logprob": True,
        "logprob_start_len": 0,
    }
    answer = generate(server.url, body).json()
    assert isinstance(answer, dict)
    meta = answer["meta_info"]
    assert len(answer["output_ids"]) == 5
    assert [entry[1] for entry in meta["output_token_logprobs"]] == answer["output_ids"]
    assert all(entry[0] < 0 and entry[2] is None for entry in meta["output_token_logprobs"])
    inputs = meta["input_token_logprobs"]
    assert len(inputs) == len(PROMPT) and inputs[0][0] is None
    assert [entry[1] for entry in inputs] == PROMPT
    assert meta["prompt_tokens"] == len(PROMPT) and meta["completion_tokens"] == 5
    assert meta["cached_tokens"] == 0
    assert meta["finish_reason"] == {"type": "length", "length": 5}


def test_batch_answers_in_order_and_default_logprob_start(server):
    prompts = [PROMPT, PROMPT[:20], [7] * 33]
    body = {
        "input_ids": prompts,
        "sampling_params": {"max_new_tokens": 3, "sampling_seed": 1},
        "return_logprob": True,
    }
    answers = generate(server.url, body).json()
    assert [a["meta_info"]["prompt_tokens"] for a in answers] == [50, 20, 33]
    for prompt, answer in zip(prompts, answers, strict=True):
        # logprob_start_len defaults to -1: only the last prompt token, with no logprob.
        assert answer["meta_info"]["input_token_logprobs"] == [[None, prompt[-1], None]]


def test_replay_scores_decoded_tokens_identically(server):
    params = {"max_new_tokens": 8, "sampling_seed": 5, "ignore_eos": True}
    first = generate(
        server.url,
        {"input_ids": [PROMPT], "sampling_params": params, "return_logprob": True},
    ).json()[0]
    requests.post(server.url + "/flush_cache", timeout=10)
    replay = generate(
        server.url,
        {
            "input_ids": [PROMPT + first["output_ids"]],
            "sampling_params": {"max_new_tokens": 0},
            "return_logprob": True,
            "logprob_start_len": 0,
        },
    ).json()[0]
    decoded = [entry[0] for entry in first["meta_info"]["output_token_logprobs"]]
    replayed = [entry[0] for entry in replay["meta_info"]["input_token_logprobs"][-8:]]
    assert replayed == decoded


def test_prefill_cache_hit_is_reported(server):
    prompt = list(range(100))
    body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": 0}}
    assert generate(server.url, body).json()["meta_info"]["cached_tokens"] == 0
    assert (
        generate(server.url, body).json()["meta_info"]["cached_tokens"] == 96
    )  # the last track point below 100
    requests.post(server.url + "/flush_cache", timeout=10)
    assert generate(server.url, body).json()["meta_info"]["cached_tokens"] == 0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"text": "hello"}, "input_ids is required"),
        ({"input_ids": []}, "non-empty list"),
        ({"input_ids": [1, "2"]}, "input_ids[1] must be an integer"),
        ({"input_ids": [[1, 2], [3, 320]]}, "input_ids[1][1] = 320 is out of range"),
        ({"input_ids": [1, -1]}, "out of range"),
        ({"input_ids": [1], "sampling_params": {"max_new_tokens": -1}}, "max_new_tokens"),
        ({"input_ids": [1], "sampling_params": {"temperature": "hot"}}, "temperature"),
        ({"input_ids": [1], "sampling_params": []}, "sampling_params must be an object"),
        ({"input_ids": [1], "return_logprob": "yes"}, "return_logprob must be true or false"),
        ({"input_ids": [1, 2], "logprob_start_len": 2}, "logprob_start_len (2) must be less"),
        ({"input_ids": [1] * 4000, "sampling_params": {"max_new_tokens": 97}}, "context length"),
        ([1, 2, 3], "must be a JSON object"),
        ({"input_ids": [1], "stream": "yes"}, "stream must be true or false"),
    ],
)
def test_bad_requests_get_400_and_the_server_keeps_serving(server, body, message):
    response = generate(server.url, body)
    assert response.status_code == 400
    assert message in response.json()["error"]["message"]
    assert requests.get(server.url + "/health", timeout=10).status_code == 200


def _events(response: requests.Response) -> list[str]:
    lines = [line for line in response.iter_lines(decode_unicode=True) if line]
    assert all(line.startswith("data: ") for line in lines), lines
    return [line.removeprefix("data: ") for line in lines]


def test_streamed_answers_grow_to_the_plain_answer_as_sglang_streams(server):
    """`"stream": true` (sglang's cache_hit_kit streams): server-sent events, each chunk the
    answer so far, a batch's chunks tagged with their prompt's index, then [DONE]; the final
    chunk of each prompt is the non-streamed answer."""
    body = {
        "input_ids": [PROMPT, PROMPT[:20]],
        "sampling_params": [
            {"max_new_tokens": 6, "sampling_seed": 2, "ignore_eos": True},
            {"max_new_tokens": 3, "sampling_seed": 2, "ignore_eos": True},
        ],
        "return_logprob": True,
    }
    plain = generate(server.url, body).json()
    requests.post(server.url + "/flush_cache", timeout=10)
    with requests.Session() as session:
        response = session.post(server.url + "/generate", json={**body, "stream": True}, timeout=60)
        assert response.headers["Content-Type"] == "text/event-stream"
        events = _events(response)
        # the chunked answer ended cleanly: the same connection serves the next request
        assert session.get(server.url + "/health", timeout=10).status_code == 200
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    indexes = [chunk.pop("index") for chunk in chunks]
    assert indexes == [0, 1, 0, 1, 0, 1, 0, 0, 0]  # step by step, as a batch decodes
    for index, expected in enumerate(plain):
        mine = [chunk for chunk, of in zip(chunks, indexes, strict=True) if of == index]
        assert [len(chunk["output_ids"]) for chunk in mine] == list(range(1, len(mine) + 1))
        assert all(chunk["meta_info"]["finish_reason"] is None for chunk in mine[:-1])
        for chunk in mine:
            count = len(chunk["output_ids"])
            assert chunk["output_ids"] == expected["output_ids"][:count]
            assert chunk["meta_info"]["completion_tokens"] == count
            logprobs = chunk["meta_info"]["output_token_logprobs"]
            assert logprobs == expected["meta_info"]["output_token_logprobs"][:count]
        del mine[-1]["meta_info"]["id"], expected["meta_info"]["id"]
        assert mine[-1] == expected


def test_a_single_streamed_prompt_has_no_index_and_long_outputs_are_chunked(server):
    from kl_bitexact.reference.protocol import MAX_STREAM_CHUNKS

    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 300, "ignore_eos": True}}
    events = _events(generate(server.url, {**body, "stream": True}))
    chunks = [json.loads(event) for event in events[:-1]]
    assert len(chunks) <= MAX_STREAM_CHUNKS + 1
    assert all("index" not in chunk for chunk in chunks)
    assert len(chunks[-1]["output_ids"]) == 300
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 300}


def test_a_vocabulary_of_32k_ids_serves_sglang_s_random_ids(reference_server):
    """sglang's files draw token ids up to 30000: with --vocab-size they are served, the
    logprobs stay a distribution over every id, and a replay is bit-exact (deterministic)."""
    server = reference_server("--enable-deterministic-inference", "--vocab-size", "32768")
    info = requests.get(server.url + "/server_info", timeout=10).json()
    assert info["vocab_size"] == 32768
    prompt = [29999, 32767, 5, 320, 12345] * 8
    over = generate(server.url, {"input_ids": [1, 32768]})
    assert over.status_code == 400 and "token ids are 0..32767" in over.json()["error"]["message"]
    first = generate(
        server.url,
        {
            "input_ids": [prompt],
            "sampling_params": {"max_new_tokens": 24, "temperature": 1, "ignore_eos": True},
            "return_logprob": True,
        },
    ).json()[0]
    assert max(first["output_ids"]) >= 320  # sampled among all ids, not only the head's
    requests.post(server.url + "/flush_cache", timeout=10)
    replay = generate(
        server.url,
        {
            "input_ids": [prompt + first["output_ids"]],
            "sampling_params": {"max_new_tokens": 0},
            "return_logprob": True,
            "logprob_start_len": 0,
        },
    ).json()[0]
    decoded = [entry[0] for entry in first["meta_info"]["output_token_logprobs"]]
    assert [entry[0] for entry in replay["meta_info"]["input_token_logprobs"][-24:]] == decoded


def test_malformed_json_is_400(server):
    response = requests.post(server.url + "/generate", data=b"{nope", timeout=10)
    assert response.status_code == 400
    assert "not valid JSON" in response.json()["error"]["message"]


def test_unknown_path_and_wrong_method(server):
    assert requests.get(server.url + "/nothing", timeout=10).status_code == 404
    assert requests.get(server.url + "/generate", timeout=10).status_code == 405


def test_concurrent_requests_are_served_and_agree(server):
    bodies = [
        {
            "input_ids": [[(i * 7 + j) % 300 for j in range(40 + i)]],
            "sampling_params": {"max_new_tokens": 4, "sampling_seed": i},
            "return_logprob": True,
            "logprob_start_len": 0,
        }
        for i in range(8)
    ]
    with ThreadPoolExecutor(max_workers=8) as pool:
        together = list(pool.map(lambda b: generate(server.url, b).json(), bodies))
    alone = [generate(server.url, body).json() for body in bodies]
    assert _logprobs(together) == _logprobs(alone)


def _logprobs(answers: list[list[dict]]) -> str:
    return json.dumps([answer[0]["meta_info"]["output_token_logprobs"] for answer in answers])


def test_bad_flag_is_exit_2_without_traceback(cli):
    result = cli(["serve-reference", "--port", "0", "--page-size", "0"])
    assert result.returncode == 2
    assert "--page-size must be at least 1" in result.stderr
    assert "Traceback" not in result.stderr
    result = cli(["serve-reference", "--port", "0", "--vocab-size", "100"])
    assert result.returncode == 2 and "--vocab-size must be between 320 and" in result.stderr
    result = cli(["serve-reference", "--port", "0", "--fault", "no-such-fault"])
    assert result.returncode == 2 and "unknown fault" in result.stderr


def test_port_in_use_is_exit_2(server, cli):
    port = server.url.rsplit(":", 1)[1]
    result = cli(["serve-reference", "--port", port])
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_help_lists_every_fault_and_engine_flag(cli):
    from kl_bitexact.reference.faults import Fault

    result = cli(["serve-reference", "--help"])
    assert result.returncode == 0
    for fault in Fault:
        assert f"{fault.value}: " in result.stdout
    for flag in [
        "--page-size", "--mamba-track-interval", "--max-total-tokens", "--disable-radix-cache",
        "--enable-hierarchical-cache", "--hicache-write-policy", "--speculative-algorithm",
        "--speculative-num-draft-tokens", "--enable-deterministic-inference", "--context-length",
        "--vocab-size",
    ]:  # fmt: skip
        assert flag in result.stdout


def test_answers_leave_without_waiting_for_the_clients_ack(monkeypatch):
    """Headers and body are two writes: under Nagle's algorithm the body waits for the ACK of
    the headers, which a keep-alive client delays up to 40 ms, on every request after a
    connection's first (12 requests of a small run: half a second). TCP_NODELAY, as
    sglang's server (uvicorn, asyncio) sets it."""
    import socket
    import threading

    from kl_bitexact.reference.config import EngineConfig
    from kl_bitexact.reference.engine import ReferenceEngine
    from kl_bitexact.reference.http import Handler, ReferenceServer

    nodelay: list[int] = []
    handle = Handler.handle

    def spy(self: Handler) -> None:
        nodelay.append(self.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        handle(self)

    monkeypatch.setattr(Handler, "handle", spy)
    with ReferenceServer(("127.0.0.1", 0), ReferenceEngine(EngineConfig())) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        with requests.Session() as session:
            for _ in range(2):
                assert session.post(server.url + "/flush_cache", timeout=10).ok
        server.shutdown()
    assert nodelay == [1]  # one keep-alive connection, Nagle off
