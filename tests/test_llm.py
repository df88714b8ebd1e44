"""The LLM proposer and surrogate against recorded replies (tests/llm_recordings/): never the live service.

Every call goes through the real SDK client: `LLMClient` builds `anthropic.Anthropic(api_key=..., max_retries=0,
http_client=httpx2.Client(transport=httpx2.MockTransport(api.handler)))` exactly as it does for a live call, and
`RecordedAPI.handler` answers each HTTP POST /v1/messages from recorded JSON bodies (a Messages API reply, or an error
reply with its status and headers) or raises a transport error (the network is down). So a change of the SDK's
signature or wire format fails these tests instead of passing a double that accepts any keyword.
"""
from __future__ import annotations

import json
import math
import re
import threading
import time
from pathlib import Path

import pytest

anthropic = pytest.importorskip("anthropic")
import httpx2 as httpx  # noqa: E402  the SDK's own HTTP library (anthropic 2.x)

from workbench.core.candidate import Candidate, content_hash
from workbench.core.outcomes import BINS, FAILS, Forecast, bin_index, outcome_index
from workbench.core.records import FAIL, PASS, STAGES, Evaluation, StageRecord
from workbench.harness.static import check_static
from workbench.llm import (
    CallRecorder,
    LLMCallError,
    LLMClient,
    LLMConfig,
    LLMProposer,
    LLMSurrogate,
    LLMUnavailable,
    extract_forecast,
    extract_module,
    extract_rationale,
    redact,
    rewards,
)
from workbench.llm.client import NO_KEY, SDK_RANGE, check_request, sdk_parameters
from workbench.llm.proposer import INSTRUCTIONS
from workbench.llm.retrieval import rank_families
from workbench.llm.surrogate import COMPILE_ANCHOR, forecast_prompts
from workbench.llm.surrogate import INSTRUCTIONS as FORECAST_INSTRUCTIONS
from workbench.problems import Problem
from workbench.store import Store
from workbench.surrogates.forecast import Surrogate, forecasts_for

RECORDINGS = Path(__file__).parent / "llm_recordings"
TEST_KEY = "sk-ant-test-0123456789"
DOWN = httpx.ConnectError("[Errno 111] Connection refused")  # what the transport raises with the network down
CANDIDATE_RE = re.compile(r"^## Candidate\n```python\n(.*)\n```\n\nForecast its outcome", re.DOTALL)


def recording(name: str) -> dict:
    d = json.loads((RECORDINGS / f"{name}.json").read_text())
    d.pop("_note", None)
    return d


def response(name: str, request: httpx.Request) -> httpx.Response:
    """A recording as the HTTP response the service would send: a reply (200), or an error reply with its status,
    headers and body (`http_*.json`)."""
    d = recording(name)
    if "status" in d:
        return httpx.Response(d["status"], headers=d.get("headers", {}), json=d["body"], request=request)
    return httpx.Response(200, headers={"request-id": f"req_{d['id']}"}, json=d, request=request)


class RecordedAPI:
    """The Messages API over HTTP for the real SDK client. Each POST /v1/messages is answered in order from `script`
    (a recording name, or an exception the transport raises), or with `by_candidate` by the candidate in the request
    (content hash -> recording name: parallel calls get the same answers whatever order they arrive in). Keeps each
    request's JSON body (`requests`) and headers. A request beyond the script gets a 418, never a recorded reply."""

    def __init__(self, *script, by_candidate: dict[str, str] | None = None):
        self.script = list(script)
        self.replies = dict(by_candidate) if by_candidate is not None else None
        self.requests: list[dict] = []
        self.headers: list[httpx.Headers] = []
        self._lock = threading.Lock()

    def handler(self, request: httpx.Request) -> httpx.Response:
        assert request.method == "POST" and request.url.path == "/v1/messages"
        body = json.loads(request.content)
        with self._lock:
            self.requests.append(body)
            self.headers.append(request.headers)
            if self.replies is not None:
                source = CANDIDATE_RE.search(body["messages"][0]["content"]).group(1)
                item = self.replies.get(content_hash(source), "no reply for this candidate")
            else:
                item = self.script.pop(0) if self.script else "no recorded reply left"
        if isinstance(item, BaseException):
            raise item
        if item.startswith("no "):
            return httpx.Response(418, json={"type": "error", "error": {"type": "test", "message": item}})
        return response(item, request)

    def http_client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self.handler))


def client_on(api: RecordedAPI, recorder=None, wait: bool = False, **config) -> LLMClient:
    """An `LLMClient` on the real SDK, its HTTP answered by `api`; unless `wait`, retries record their waits in
    `client.sleeps` instead of sleeping."""
    client = LLMClient(LLMConfig(**config), recorder=recorder, http_client=api.http_client(), api_key=TEST_KEY)
    client.api = api
    if not wait:
        client.sleeps = []
        client.sleep = client.sleeps.append
    return client


def make_client(*script, recorder=None, **config) -> LLMClient:
    return client_on(RecordedAPI(*script), recorder=recorder, **config)


def ReplyByCandidate(replies: dict[str, str]) -> RecordedAPI:  # noqa: N802  (reads as the class it replaced)
    return RecordedAPI(by_candidate=replies)


@pytest.fixture(scope="module")
def problem():
    return Problem.load("scale_shift_relu", ["batch_size=8", "dim=16"])


# ---- proposer ----
def test_proposer_round_trip(problem, tmp_path):
    recorder = CallRecorder(Store(tmp_path / "store.sqlite"))
    client = make_client("proposer_ok", recorder=recorder)
    [p] = LLMProposer(problem, client).propose(parent_source=None)
    assert p.ok and p.failure is None and p.call_id
    assert "class ModelNew" in p.candidate.source
    record = check_static(p.candidate.source, problem.source)
    assert record.verdict == PASS and record.data["has_model_new"] and record.data["errors"] == 0
    assert p.rationale.startswith("fuse scale, shift and relu")
    assert dict(p.candidate.origin)["call_id"] == p.call_id and dict(p.candidate.origin)["kind"] == "llm"
    [row] = recorder.calls()
    assert row["id"] == p.call_id and row["purpose"] == "propose:scale_shift_relu" and row["ok"] == 1
    assert row["input_tokens"] == 412 and row["cache_write_tokens"] == 5120 and "class ModelNew" in row["reply"]


def test_proposer_request_shape(problem, tmp_path):
    """The exact JSON body one proposer call posts: what `LLMClient.request` builds, nothing the SDK added or lost."""
    client = make_client("proposer_ok", model="claude-sonnet-4-6", max_tokens=8192)
    proposer = LLMProposer(problem, client)
    parent = (RECORDINGS.parent.parent / "workbench/examples/scale_shift_relu_triton.py").read_text()
    proposer.propose(parent_source=parent, measurements={"speedup_vs_eager": 1.1, "candidate_ms": 0.9},
                     findings_text="- HIGH DRAM at 91% of peak.", memory_text="3 attempts: 2 pass, 1 fail")
    [request] = client.api.requests
    assert request == {
        "model": "claude-sonnet-4-6",
        "max_tokens": 8192,
        "system": [{"type": "text", "text": proposer.stable_prompt(), "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": proposer.user_prompt(
            parent, {"speedup_vs_eager": 1.1, "candidate_ms": 0.9}, "- HIGH DRAM at 91% of peak.",
            "3 attempts: 2 pass, 1 fail")}],
    }
    system, user = request["system"][0]["text"], request["messages"][0]["content"]
    assert system.startswith(INSTRUCTIONS) and problem.source.strip() in system
    assert "### Family `elementwise`" in system and "@triton.jit" in system  # retrieval with a rendered example
    assert "## Parent candidate (improve on it)" in user and '"speedup_vs_eager": 1.1' in user
    assert "DRAM at 91%" in user and "3 attempts" in user


def test_the_prompt_states_the_precision_the_harness_judges(problem, tmp_path):
    from workbench.llm.proposer import precision_text

    client = make_client()
    strict = LLMProposer(problem, client).stable_prompt()
    assert "## Precision\nstrict fp32" in strict and 'input_precision="tf32x3"' in strict
    conv = tmp_path / "conv_relu.py"
    conv.write_text("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n"
                    "        super().__init__()\n        self.conv = nn.Conv2d(4, 8, 3)\n\n    def forward(self, x):\n"
                    "        return torch.relu(self.conv(x))\n\ndef get_inputs():\n"
                    "    return [torch.randn(2, 4, 8, 8)]\n\ndef get_init_inputs():\n    return []\n")
    conv_problem = Problem.load(conv)
    assert conv_problem.effective_precision == "cudnn_tf32"
    text = LLMProposer(conv_problem, client).stable_prompt()
    assert "cuDNN in tf32, its matmuls in full fp32" in text and "## Precision\nPyTorch's defaults" in text
    assert precision_text(Problem.load(conv, precision="tf32")).startswith("tf32 accepted")


def test_proposer_malformed_and_truncated(problem):
    client = make_client("proposer_malformed", "proposer_truncated", "proposer_bad_python")
    proposer = LLMProposer(problem, client)
    [bad] = proposer.propose()
    assert bad.candidate is None and bad.failure == "no code" and "single Triton kernel" in bad.reply
    [cut] = proposer.propose()
    assert cut.candidate is None and cut.failure == "truncated" and cut.reply.endswith("torch.empty_like(")
    assert cut.rationale == "one fused pass."
    [bad_python] = proposer.propose()
    assert bad_python.candidate is None and bad_python.failure == "syntax error at line 15: expected ':'"
    assert client.failed == 0 and client.calls == 3  # the calls worked: the replies were unusable


def test_proposer_several_modules_takes_last_model_new(problem):
    [p] = LLMProposer(problem, make_client("proposer_several")).propose()
    assert p.ok and "BLOCK=4096" in p.candidate.source and "BLOCK=1024" not in p.candidate.source
    assert "m = ModelNew(1.5, 0.25)" not in p.candidate.source
    assert p.rationale == "larger blocks amortise the index arithmetic."


def test_proposer_n_and_past_winners(problem, tmp_path):
    store = Store(tmp_path / "store.sqlite")
    store.put_problem(problem)
    src = (RECORDINGS.parent.parent / "workbench/examples/scale_shift_relu_triton.py").read_text()
    cand = Candidate(src)
    store.put_candidate(cand)
    store.put_evaluation(evaluation(problem.key, cand.hash, speedup=1.7))
    client = make_client("proposer_ok", "proposer_ok", concurrency=2)
    proposals = LLMProposer(problem, client, store=store).propose(
        parent_source=src, measurements=evaluation(problem.key, cand.hash, fail_at="correctness"), n=2)
    assert len(proposals) == 2 and all(p.ok for p in proposals)
    assert len({p.call_id for p in proposals}) == 2 and proposals[0].candidate.parent == cand.hash
    user = client.api.requests[0]["messages"][0]["content"]
    assert "past winner on the similar problem `scale_shift_relu` (1.7x eager)" in user
    assert "correctness: fail (wrong answer)" in user
    store.close()


def test_family_ranking():
    assert rank_families("torch.matmul(a, b)", "matmul_bf16")[0][0] == "gemm"
    assert rank_families("torch.softmax(x, dim=-1)", "softmax_rows")[0][0] == "reduce"
    assert rank_families("x.permute(0, 2, 1).contiguous()", "permute_copy")[0][0] == "memory"
    assert rank_families("F.scaled_dot_product_attention(q, k, v)", "attn")[0][0] == "attention"
    assert rank_families("torch.relu(x * s)", "scale_relu")[0][0] == "elementwise"


# ---- parsing ----
def test_parsing_edge_cases():
    assert extract_module("import torch\nclass ModelNew(torch.nn.Module):\n    pass\n\nRationale: bare\n").ok
    assert extract_module("```python\nclass ModelNew(:\n    x = 1\n    y = 2\n```").failure.startswith("syntax error")
    assert extract_module("```python\nimport torch\nx = 1\n```").failure == "no class ModelNew"
    assert extract_rationale("**Rationale:** fewer launches\n") == "fewer launches"
    assert extract_forecast('{"probabilities": [0,0,0,0,1,0,0,0,"x"]}').probs is None
    assert "finite" in extract_forecast('{"probabilities": [0,0,0,0,NaN,0,0,0,1]}').failure
    assert "unknown bin" in extract_forecast('{"probabilities": {"fast": 1}}').failure


# ---- surrogate and forecasts ----
def test_surrogate_round_trip_list_and_dict(problem):
    client = make_client("forecast_list", "forecast_dict")
    surrogate = LLMSurrogate(client)
    f = surrogate.forecast_one(problem, None, "class ModelNew: ...")
    assert f.parsed and f.probs[5] == pytest.approx(0.35) and f.confidence == pytest.approx(0.35)
    assert f.point == pytest.approx(sum(p * m for p, m in zip(f.probs, (-3, -1.5, -.75, -.25, .25, .75, 1.5, 3))) / 0.9)
    assert 0 < f.entropy_confidence < 1 and f.reasoning.startswith("Memory-bound")
    g = surrogate.forecast_one(problem, None, "class ModelNew: ...")
    assert g.probs == pytest.approx((0, 0, 0, 0.1, 0.6, 0.1, 0, 0, 0.2)) and g.p_fail == pytest.approx(0.2)
    assert g.point == pytest.approx((0.1 * -0.25 + 0.6 * 0.25 + 0.1 * 0.75) / 0.8)
    stable = client.api.requests[0]["system"][0]
    assert stable["cache_control"] == {"type": "ephemeral"} and "## Anchor (eager)" in stable["text"]
    assert client.api.requests[0]["system"] == client.api.requests[1]["system"]  # cacheable prefix


def test_surrogate_repeats_average_and_unparsable(problem):
    f = LLMSurrogate(make_client("forecast_list", "forecast_dict"), repeats=2).forecast_one(problem, "anchor", "cand")
    assert f.probs[4] == pytest.approx((0.15 + 0.6) / 2) and len(f.call_ids) == 2
    recorder = CallRecorder()
    bad = LLMSurrogate(make_client("forecast_bad", recorder=recorder)).forecast_one(problem, "anchor", "cand")
    assert not bad.parsed and bad.confidence == 0 and bad.entropy_confidence == 0
    assert bad.probs == pytest.approx([1 / 9] * 9) and "expected 9 probabilities" in bad.failure
    assert recorder.calls()[0]["reply"].startswith("I cannot tell")


def test_surrogate_request_shape(problem):
    """The exact JSON body one forecast posts."""
    client = make_client("surrogate_fast", model="claude-sonnet-4-6", max_tokens=8192)
    cand = Candidate((RECORDINGS.parent.parent / "workbench/examples/scale_shift_relu_triton.py").read_text())
    [f] = LLMSurrogate(client).forecast(problem, [cand])
    [request] = client.api.requests
    stable = (f"{FORECAST_INSTRUCTIONS}\n\n## Reference problem\n```python\n{problem.source.strip()}\n```\n\n"
              f"## Anchor (eager)\n```python\n{problem.source.strip()}\n```")
    assert request == {
        "model": "claude-sonnet-4-6",
        "max_tokens": 8192,
        "system": [{"type": "text", "text": stable, "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": f"## Candidate\n```python\n{cand.source.strip()}\n```\n\n"
                                                 "Forecast its outcome as the JSON object."}],
    }
    assert f.parsed and f.most_likely == "[1,2)" and f.probs[6] == pytest.approx(0.45)
    assert f.call_ids and f.reasoning.startswith("One fused multiply-add")


def test_surrogate_protocol_keeps_order_under_concurrency(problem):
    """forecast(problem, candidates) answers one Forecast per candidate in their order, calls in parallel."""
    cands = [Candidate(f"class ModelNew:  # variant {i}\n    pass\n") for i in range(6)]
    names = ["surrogate_fast", "surrogate_slow", "surrogate_fails", "forecast_bad", "surrogate_slow", "surrogate_fast"]
    sdk = ReplyByCandidate({c.hash: n for c, n in zip(cands, names)})
    client = client_on(sdk, concurrency=4)
    surrogate = LLMSurrogate(client)
    assert isinstance(surrogate, Surrogate)
    out = forecasts_for(surrogate, problem, cands)
    assert [f.most_likely if f.parsed else None for f in out] == \
        ["[1,2)", "[-1,-0.5)", "fails", None, "[-1,-0.5)", "[1,2)"]
    assert out[2].p_fail == pytest.approx(0.7) and out[3].confidence == 0 and "expected 9" in out[3].failure
    assert client.calls == 6 and len({f.call_ids[0] for f in out}) == 6
    assert len({r["system"][0]["text"] for r in sdk.requests}) == 1  # one cached prefix for the whole batch
    assert surrogate.forecast(problem, []) == []

    # repeats: each candidate asked twice, averaged; the sources may be plain text too
    sdk = ReplyByCandidate({cands[0].hash: "surrogate_fast", cands[1].hash: "surrogate_slow"})
    two = LLMSurrogate(client_on(sdk, concurrency=3), repeats=2).forecast(
        problem, [cands[0].source, cands[1]])
    assert len(sdk.requests) == 4 and [len(f.call_ids) for f in two] == [2, 2]
    assert two[0].probs == pytest.approx(out[0].probs) and two[1].probs == pytest.approx(out[1].probs)


def test_surrogate_anchors_and_bad_calls(problem):
    client = make_client("surrogate_slow")
    [f] = LLMSurrogate(client).forecast(problem, [Candidate("class ModelNew: pass\n")], anchor="compile")
    system = client.api.requests[0]["system"][0]["text"]
    assert f.parsed and f"## Anchor (compile)\n```python\n{COMPILE_ANCHOR}\n```" in system
    assert system == forecast_prompts(problem.source, "compile", COMPILE_ANCHOR, "x")[0]
    surrogate = LLMSurrogate(make_client())
    with pytest.raises(ValueError, match="anchor must be one of"):
        surrogate.forecast(problem, [Candidate("class ModelNew: pass\n")], anchor="cublas")
    with pytest.raises(TypeError, match="forecast_one"):
        surrogate.forecast(problem, None, "class ModelNew: pass")  # the old one-source signature
    with pytest.raises(TypeError, match="Candidate or its source"):
        surrogate.forecast(problem, [42])
    with pytest.raises(ValueError, match="repeats"):
        LLMSurrogate(make_client(), repeats=0)
    assert not surrogate.client.api.requests  # nothing was sent for bad input


def test_forecast_bins():
    assert [bin_index(x) for x in (-5, -2, -1.5, -0.5, 0, 0.49, 1, 2, 9)] == [0, 1, 1, 3, 4, 4, 6, 7, 7]
    assert outcome_index(None) == FAILS == 8 and outcome_index(2.0) == 6 and BINS[outcome_index(1.0)] == "[0,0.5)"
    with pytest.raises(ValueError, match="negative"):
        Forecast((1, -1, 0, 0, 0, 0, 0, 0, 1))
    assert Forecast((0,) * 8 + (1,)).point is None


# ---- client: the SDK's signature, retries, failures in words, cost, redaction, no key ----
def test_request_fits_the_installed_sdk():
    """What `LLMClient.request` sends is what the installed SDK's `messages.create` takes (checked once, at
    construction), and an SDK that does not take it is refused in words before any call."""
    create = anthropic.Anthropic(api_key=TEST_KEY).messages.create  # the bound method, as the client calls it
    names, required = sdk_parameters(create)
    kwargs = make_client().request("stable", "user")
    assert set(kwargs) <= names and required <= set(kwargs)
    check_request(create, kwargs)

    def older(*, model, max_tokens, messages, temperature):  # a required keyword we do not send
        raise AssertionError("never called")

    def newer(*, model, messages, max_tokens):  # no system block any more
        raise AssertionError("never called")

    for create, words in ((older, "requires ['temperature']"), (newer, "does not accept ['system']")):
        with pytest.raises(LLMUnavailable, match=re.escape(words)) as info:
            LLMClient(client=type("SDK", (), {"messages": type("M", (), {"create": staticmethod(create)})})())
        assert SDK_RANGE in str(info.value) and anthropic.__version__ in str(info.value)


def test_key_from_the_environment(monkeypatch):
    """The live construction: the key read from ANTHROPIC_API_KEY, sent by the SDK, never recorded."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env-key-42")
    api, recorder = RecordedAPI("forecast_list"), CallRecorder()
    client = LLMClient(LLMConfig(), recorder=recorder, http_client=api.http_client())
    assert LLMSurrogate(client).forecast_one("problem", None, "cand").parsed
    [headers] = api.headers
    assert "sk-ant-env-key-42" in headers.get("authorization", "") + headers.get("x-api-key", "")
    assert "sk-ant-env-key-42" not in json.dumps(recorder.calls())


def test_server_error_then_success(problem):
    client = make_client("http_500", "http_529", "forecast_list", backoff_s=1.0)
    f = LLMSurrogate(client).forecast_one(problem, None, "cand")
    assert f.parsed and client.retries == 2 and len(client.api.requests) == 3 and client.failed == 0
    assert len(client.sleeps) == 2 and 0.5 <= client.sleeps[0] <= 1.5 and 1.0 <= client.sleeps[1] <= 3.0
    assert client.api.requests[0] == client.api.requests[2]  # the same request again


def test_server_errors_give_up_within_bounds(problem):
    recorder = CallRecorder()
    client = make_client(*["http_500"] * 3, recorder=recorder, max_retries=2)
    [p] = LLMProposer(problem, client).propose()
    assert p.candidate is None and len(client.api.requests) == 3
    assert p.failure.startswith("InternalServerError (HTTP 500): Internal server error -- the service kept failing "
                                "after 3 attempts over")
    assert recorder.calls()[0]["ok"] == 0 and recorder.calls()[0]["retries"] == 2
    assert client.summary()["failed"] == 1 and client.summary()["last_error"] == p.failure
    # the waits of one call stop at retry_budget_s: a retry that would pass it is not made
    client = make_client(*["http_500"] * 10, max_retries=9, backoff_s=4.0, max_backoff_s=8.0, retry_budget_s=10.0)
    with pytest.raises(LLMCallError, match="the service kept failing"):
        client.complete("s", "u", "test")
    assert sum(client.sleeps) <= 10.0 and len(client.api.requests) == len(client.sleeps) + 1 < 10


def test_rate_limit_waits_as_asked(problem):
    client = make_client("http_429", "forecast_list", backoff_s=0.1)
    assert LLMSurrogate(client).forecast_one(problem, None, "cand").parsed
    assert client.sleeps == [2.0] and client.retries == 1  # retry-after: 2, more than our own backoff
    # asked to wait longer than max_backoff_s: no retry, and the message says why
    client = make_client("http_429_long", "forecast_list")
    [p] = LLMProposer(problem, client).propose()
    assert p.candidate is None and len(client.api.requests) == 1 and not client.sleeps
    assert p.failure.startswith("RateLimitError (HTTP 429): Number of request tokens") and \
        "the service asked to wait 120 s, more than max_backoff_s=30" in p.failure


def test_bad_key_is_not_retried_and_ends_the_calls(problem):
    recorder = CallRecorder()
    client = make_client("http_401", "forecast_list", recorder=recorder)
    [p] = LLMProposer(problem, client).propose()
    assert p.candidate is None and len(client.api.requests) == 1 and client.retries == 0
    assert p.failure == ("AuthenticationError (HTTP 401): invalid x-api-key -- the API key was refused: check "
                         "ANTHROPIC_API_KEY (not retried)")
    assert client.fatal == p.failure
    f = LLMSurrogate(client).forecast_one(problem, None, "cand")  # nothing is sent: it would fail the same way
    assert not f.parsed and f.failure == p.failure and len(client.api.requests) == 1
    assert [c["ok"] for c in recorder.calls()] == [0, 0] and TEST_KEY not in json.dumps(recorder.calls())
    client = make_client("http_400", "forecast_list")  # a refused request is not retried, but is not fatal
    assert not LLMSurrogate(client).forecast_one(problem, None, "cand").parsed and client.fatal is None
    assert LLMSurrogate(client).forecast_one(problem, None, "cand").parsed and client.retries == 0


def test_network_down(problem):
    """Bounded retries, then one clear message; later calls try once until one gets through. Real sleeps here
    (short backoff): the whole failure takes well under a second."""
    client = make_client(*[DOWN] * 5, "forecast_list", max_retries=2, backoff_s=0.01)
    client.sleep = time.sleep
    t0 = time.perf_counter()
    [p] = LLMProposer(problem, client).propose()
    first = time.perf_counter() - t0
    assert p.candidate is None and len(client.api.requests) == 3 and first < 1.0
    # the SDK's own words vary by version ("Connection error." in 2.16, "Connection to api.anthropic.com failed: ..."
    # in 2.17): ours follow them
    assert re.fullmatch(r"APIConnectionError: .+ -- could not reach the Anthropic API after 3 "
                        r"attempts over \d+\.\d s: check the network \(and ANTHROPIC_BASE_URL if set\)", p.failure)
    assert client.unreachable and client.fatal is None
    [q] = LLMProposer(problem, client).propose()  # still down: one attempt, no retries
    assert len(client.api.requests) == 4 and "after 1 attempt over" in q.failure and "tried once" in q.failure
    client.api.script = ["forecast_list"]  # back up: the next call gets through and the client retries again
    assert LLMSurrogate(client).forecast_one(problem, None, "cand").parsed and not client.unreachable
    assert client.summary()["failed"] == 2 and client.summary()["calls"] == 1


def test_config_is_checked():
    with pytest.raises(ValueError, match="max_retries"):
        LLMConfig(max_retries=-1)
    with pytest.raises(ValueError, match="non-negative"):
        LLMConfig(backoff_s=float("nan"))


def test_cost_accounting(problem, tmp_path):
    store = Store(tmp_path / "store.sqlite")  # the calls go into the store's own file, in a table of their own
    store.put_problem(problem)
    recorder = CallRecorder(store)
    client = make_client("proposer_ok", "proposer_truncated", recorder=recorder)
    LLMProposer(problem, client).propose()
    LLMProposer(problem, client).propose()
    first = (412 * 3.0 + 380 * 15.0 + 5120 * 3.75) / 1e6
    second = (412 * 3.0 + 8192 * 15.0 + 5120 * 0.30) / 1e6
    assert [c["cost_usd"] for c in recorder.calls()] == pytest.approx([first, second])
    assert client.total_cost == pytest.approx(first + second) and recorder.total_cost() == pytest.approx(first + second)
    assert client.summary()["cache_read_input_tokens"] == 5120 and client.summary()["calls"] == 2
    assert len(store.frame("problems")) == 1  # the store is untouched by the extra table
    store.close()


def test_redaction(monkeypatch):
    key = "sk-ant-api03-AbC_dEf-123456789"
    assert redact(f"key={key} end") == "key=sk-ant-[REDACTED] end"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "plainsecretvalue42")
    assert "plainsecretvalue42" not in redact("leaked plainsecretvalue42")
    recorder = CallRecorder()
    recorder.record({"id": "x", "prompt": f"use {key}", "reply": key, "error": f"401 for {key}"})
    assert "sk-ant-api03" not in json.dumps(recorder.calls())


def test_no_key_raises_unavailable(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(LLMUnavailable, match="no ANTHROPIC_API_KEY in the environment"):
        LLMClient()
    assert NO_KEY == "no ANTHROPIC_API_KEY in the environment: the offline proposer and surrogate carry on"


# ---- rewards and export ----
def test_scores_hand_computed():
    sure = [0] * 9
    sure[4] = 1
    assert rewards.brier(sure, 4) == 0 and rewards.rps(sure, 4) == 0 and rewards.log_score(sure, 4) == 0
    assert rewards.brier(sure, 5) == 2  # (1-0)^2 + (0-1)^2
    assert rewards.rps(sure, 5) == pytest.approx(1 / 8)  # one cut point between the bins differs by 1
    assert rewards.rps(sure, 8) == pytest.approx(5 / 8)  # fails sits below "<-2": cut points 0..4 differ
    half = [0, 0, 0, 0, 0.5, 0.5, 0, 0, 0]
    assert rewards.brier(half, 4) == pytest.approx(0.5) and rewards.log_score(half, 5) == pytest.approx(math.log(0.5))
    assert rewards.rps(half, 4) == pytest.approx(0.25 / 8)
    assert rewards.correctness_reward([0] * 8 + [0.3], failed=True) == pytest.approx(0.3)
    assert rewards.correctness_reward([0] * 8 + [0.3], failed=False) == pytest.approx(0.7)
    assert rewards.mean_scores([(sure, 4), (sure, 5)])["brier"] == pytest.approx(1.0)


def evaluation(problem_key, cand_hash, speedup=None, fail_at=None):
    stages = []
    for name in STAGES:
        if name == fail_at:
            stages.append(StageRecord(name, FAIL, reason="wrong answer"))
            break
        data = {"speedup_vs_eager": speedup, "speedup_vs_compile": speedup / 2, "candidate_ms": 1.0,
                "eager_ms": speedup} if name == "quick_timing" else {}
        stages.append(StageRecord(name, PASS, data=data))
        if name == "quick_timing":
            break
    return Evaluation(problem_key, cand_hash, "cuda:NVIDIA H200", stages, {"harness_version": "test"})


def test_export_pairs(problem, tmp_path):
    store = Store(tmp_path / "s.sqlite")
    store.put_problem(problem)
    fast, broken = Candidate("class ModelNew: 'fast'"), Candidate("class ModelNew: 'broken'")
    for c in (fast, broken):
        store.put_candidate(c)
    store.put_evaluation(evaluation(problem.key, fast.hash, speedup=3.0))
    store.put_evaluation(evaluation(problem.key, broken.hash, fail_at="correctness"))
    out = tmp_path / "pairs.jsonl"
    assert rewards.export_pairs(store, out) == 2
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [m["role"] for m in lines[0]["messages"]] == ["system", "user", "assistant"]
    answer = json.loads(lines[0]["messages"][2]["content"])
    assert answer["outcome"] == "[1,2)" and answer["log2_speedup"] == pytest.approx(math.log2(3))
    assert answer["probabilities"]["[1,2)"] == 1.0 and sum(answer["probabilities"].values()) == 1.0
    assert json.loads(lines[1]["messages"][2]["content"])["outcome"] == "fails"
    messages = lines[0]["messages"]
    assert "'fast'" in messages[1]["content"] and problem.source.strip() in messages[0]["content"]
    assert rewards.export_pairs(store, out, anchor="compile") == 2
    assert json.loads(json.loads(out.read_text().splitlines()[0])["messages"][2]["content"])["outcome"] == "[0.5,1)"
    with pytest.raises(ValueError, match="anchor"):
        rewards.export_pairs(store, out, anchor="cublas")
    store.close()
