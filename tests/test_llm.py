"""The LLM proposer and surrogate against recorded replies (tests/llm_recordings/): never the live service.

`RecordedAnthropic` speaks the SDK's interface (`.messages.create(**kwargs)`), returns real `anthropic.types.Message`
objects built from the recorded JSON, raises scripted exceptions, and keeps each request's kwargs.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

anthropic = pytest.importorskip("anthropic")
try:  # the SDK's own HTTP library: httpx2 in anthropic 2.x, httpx before
    import httpx2 as httpx
except ImportError:
    import httpx

from workbench.core.candidate import Candidate, content_hash
from workbench.core.outcomes import BINS, FAILS, Forecast, bin_index, outcome_index
from workbench.core.records import FAIL, PASS, STAGES, Evaluation, StageRecord
from workbench.harness.static import check_static
from workbench.llm import (
    CallRecorder,
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
from workbench.llm.client import NO_KEY
from workbench.llm.proposer import INSTRUCTIONS
from workbench.llm.retrieval import rank_families
from workbench.llm.surrogate import COMPILE_ANCHOR, forecast_prompts
from workbench.llm.surrogate import INSTRUCTIONS as FORECAST_INSTRUCTIONS
from workbench.problems import Problem
from workbench.store import Store
from workbench.surrogates.forecast import Surrogate, forecasts_for

RECORDINGS = Path(__file__).parent / "llm_recordings"


def recording(name: str) -> dict:
    d = json.loads((RECORDINGS / f"{name}.json").read_text())
    d.pop("_note", None)
    return d


class _Messages:
    def __init__(self, owner: "RecordedAnthropic"):
        self.owner = owner

    def create(self, **kwargs):
        self.owner.requests.append(kwargs)
        if not self.owner.script:
            raise AssertionError("RecordedAnthropic: no recorded reply left")
        item = self.owner.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        return anthropic.types.Message.model_validate(recording(item) if isinstance(item, str) else item)


class RecordedAnthropic:
    """Replies in order: a recording name, a Message dict, or an exception to raise."""

    def __init__(self, *script):
        self.script = list(script)
        self.requests: list[dict] = []
        self.messages = _Messages(self)


class _ByCandidate(_Messages):
    def create(self, **kwargs):
        self.owner.requests.append(kwargs)
        source = CANDIDATE_RE.search(kwargs["messages"][0]["content"]).group(1)
        name = self.owner.replies.get(content_hash(source))
        if name is None:
            raise AssertionError(f"ReplyByCandidate: no reply for candidate {content_hash(source)}")
        return anthropic.types.Message.model_validate(recording(name))


class ReplyByCandidate:
    """Forecast replies chosen by the candidate in the request (content hash -> recording name), not by call order:
    parallel calls get the same answers whatever order they arrive in."""

    def __init__(self, replies: dict[str, str]):
        self.replies = dict(replies)
        self.requests: list[dict] = []
        self.messages = _ByCandidate(self)


CANDIDATE_RE = re.compile(r"^## Candidate\n```python\n(.*)\n```\n\nForecast its outcome", re.DOTALL)


def rate_limit() -> Exception:
    response = httpx.Response(429, request=httpx.Request("POST", "https://api.anthropic.com/v1/messages"))
    return anthropic.RateLimitError("rate limited", response=response, body=None)


def make_client(*script, recorder=None, **config):
    client = LLMClient(LLMConfig(**config), client=RecordedAnthropic(*script), recorder=recorder)
    client.sleeps = []
    client.sleep = client.sleeps.append  # never wait in tests
    return client


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
    """The exact keyword arguments one proposer call sends to `messages.create`."""
    client = make_client("proposer_ok", model="claude-sonnet-4-5", temperature=0.7, max_tokens=8192)
    proposer = LLMProposer(problem, client)
    parent = (RECORDINGS.parent.parent / "workbench/examples/scale_shift_relu_triton.py").read_text()
    proposer.propose(parent_source=parent, measurements={"speedup_vs_eager": 1.1, "candidate_ms": 0.9},
                     findings_text="- HIGH DRAM at 91% of peak.", memory_text="3 attempts: 2 pass, 1 fail")
    [request] = client.client.requests
    assert request == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 8192,
        "temperature": 0.7,
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


def test_proposer_malformed_and_truncated(problem):
    client = make_client("proposer_malformed", "proposer_truncated")
    proposer = LLMProposer(problem, client)
    [bad] = proposer.propose()
    assert bad.candidate is None and bad.failure == "no code" and "single Triton kernel" in bad.reply
    [cut] = proposer.propose()
    assert cut.candidate is None and cut.failure == "truncated" and cut.reply.endswith("torch.empty_like(")
    assert cut.rationale == "one fused pass."


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
    user = client.client.requests[0]["messages"][0]["content"]
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
    stable = client.client.requests[0]["system"][0]
    assert stable["cache_control"] == {"type": "ephemeral"} and "## Anchor (eager)" in stable["text"]
    assert client.client.requests[0]["system"] == client.client.requests[1]["system"]  # cacheable prefix


def test_surrogate_repeats_average_and_unparsable(problem):
    f = LLMSurrogate(make_client("forecast_list", "forecast_dict"), repeats=2).forecast_one(problem, "anchor", "cand")
    assert f.probs[4] == pytest.approx((0.15 + 0.6) / 2) and len(f.call_ids) == 2
    recorder = CallRecorder()
    bad = LLMSurrogate(make_client("forecast_bad", recorder=recorder)).forecast_one(problem, "anchor", "cand")
    assert not bad.parsed and bad.confidence == 0 and bad.entropy_confidence == 0
    assert bad.probs == pytest.approx([1 / 9] * 9) and "expected 9 probabilities" in bad.failure
    assert recorder.calls()[0]["reply"].startswith("I cannot tell")


def test_surrogate_request_shape(problem):
    """The exact keyword arguments one forecast sends to `messages.create`."""
    client = make_client("surrogate_fast", model="claude-sonnet-4-5", temperature=0.7, max_tokens=8192)
    cand = Candidate((RECORDINGS.parent.parent / "workbench/examples/scale_shift_relu_triton.py").read_text())
    [f] = LLMSurrogate(client).forecast(problem, [cand])
    [request] = client.client.requests
    stable = (f"{FORECAST_INSTRUCTIONS}\n\n## Reference problem\n```python\n{problem.source.strip()}\n```\n\n"
              f"## Anchor (eager)\n```python\n{problem.source.strip()}\n```")
    assert request == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 8192,
        "temperature": 0.7,
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
    client = LLMClient(LLMConfig(concurrency=4), client=sdk)
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
    two = LLMSurrogate(LLMClient(LLMConfig(concurrency=3), client=sdk), repeats=2).forecast(
        problem, [cands[0].source, cands[1]])
    assert len(sdk.requests) == 4 and [len(f.call_ids) for f in two] == [2, 2]
    assert two[0].probs == pytest.approx(out[0].probs) and two[1].probs == pytest.approx(out[1].probs)


def test_surrogate_anchors_and_bad_calls(problem):
    client = make_client("surrogate_slow")
    [f] = LLMSurrogate(client).forecast(problem, [Candidate("class ModelNew: pass\n")], anchor="compile")
    system = client.client.requests[0]["system"][0]["text"]
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
    assert not surrogate.client.client.requests  # nothing was sent for bad input


def test_forecast_bins():
    assert [bin_index(x) for x in (-5, -2, -1.5, -0.5, 0, 0.49, 1, 2, 9)] == [0, 1, 1, 3, 4, 4, 6, 7, 7]
    assert outcome_index(None) == FAILS == 8 and outcome_index(2.0) == 6 and BINS[outcome_index(1.0)] == "[0,0.5)"
    with pytest.raises(ValueError, match="negative"):
        Forecast((1, -1, 0, 0, 0, 0, 0, 0, 1))
    assert Forecast((0,) * 8 + (1,)).point is None


# ---- client: retries, cost, redaction, no key ----
def test_rate_limit_retries_then_succeeds(problem):
    client = make_client(rate_limit(), rate_limit(), "forecast_list", backoff_s=1.0)
    f = LLMSurrogate(client).forecast_one(problem, None, "cand")
    assert f.parsed and client.retries == 2 and len(client.client.requests) == 3
    assert len(client.sleeps) == 2 and 0.5 <= client.sleeps[0] <= 1.5 and 1.0 <= client.sleeps[1] <= 3.0


def test_retries_give_up_and_connection_errors(problem):
    recorder = CallRecorder()
    client = make_client(*[rate_limit()] * 3, recorder=recorder, max_retries=2)
    [p] = LLMProposer(problem, client).propose()
    assert p.candidate is None and p.failure.startswith("RateLimitError")
    assert recorder.calls()[0]["ok"] == 0 and recorder.calls()[0]["retries"] == 2
    conn = anthropic.APIConnectionError(request=httpx.Request("POST", "https://api.anthropic.com/v1/messages"))
    client = make_client(conn, "forecast_list")
    assert LLMSurrogate(client).forecast_one(problem, None, "cand").parsed and client.retries == 1
    bad_request = anthropic.BadRequestError("bad", response=httpx.Response(
        400, request=httpx.Request("POST", "https://api.anthropic.com/v1/messages")), body=None)
    client = make_client(bad_request, "forecast_list")
    assert not LLMSurrogate(client).forecast_one(problem, None, "cand").parsed and client.retries == 0


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
