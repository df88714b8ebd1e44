"""A search whose children are written by the LLM proposer (`make_search(..., proposer="llm")`), never the live service:
replies are recorded HTTP responses served to the real SDK client (`test_llm.RecordedAPI`; tests/llm_recordings/,
`search_llm_*` are hand-written for these tests) and timings from `RecordingGPU`, the test double standing in for the
H200 (tests/test_search.py).

With these sizes the test double passes the root (offline default, ~1.16x), `search_llm_block1024` (~1.71x) and
`search_llm_fma_where` (~1.76x), and fails `proposer_ok`'s module at correctness."""
from __future__ import annotations

import re

import pytest

pytest.importorskip("anthropic")

from test_llm import make_client  # noqa: E402
from test_search import RecordingGPU  # noqa: E402

from workbench.llm import LLMUnavailable  # noqa: E402
from workbench.problems import Problem  # noqa: E402
from workbench.proposers.offline import OfflineProposer  # noqa: E402
from workbench.search.search import make_search  # noqa: E402
from workbench.store import Store  # noqa: E402


@pytest.fixture(scope="module")
def problem():
    return Problem.load("scale_shift_relu", ["batch_size=8", "dim=32"])


@pytest.fixture(scope="module")
def offline(problem):
    return OfflineProposer(problem)


def llm_search(problem, offline, *script, **kwargs):
    client = make_client(*script, concurrency=1)  # one call at a time: replies are consumed in a fixed order
    return make_search(problem, RecordingGPU(), proposer="llm", llm_client=client, offline=offline, **kwargs), client


def test_llm_search_evaluates_written_candidates(problem, offline):
    s, client = llm_search(problem, offline, "search_llm_block1024", "proposer_malformed", "search_llm_fma_where",
                           "proposer_ok", per_step=2, seed=0)
    requests = client.api.requests
    s.step()  # the root: the offline proposer's default point, no LLM call
    root = s.tree.root
    assert root.move == "root" and root.choice == offline.default_choice() and root.source is None
    assert root.status == "measured" and not requests

    memory_before = s.memory.render()
    report = s.step()  # two calls on the root: one module, one unparsable reply
    assert report.stopped is None and len(report.nodes) == 1 and len(requests) == 2
    llm = s.llm_moves.llm
    root_source = offline.render(root.choice).source
    user = llm.user_prompt(root_source, s.summaries[0], "", memory_before)
    assert requests[0] == client.request(llm.stable_prompt(), user)  # the exact request, memory text included
    assert f"## What the search has tried so far\n{memory_before}" in requests[0]["messages"][0]["content"]
    assert '"speedup_vs_eager"' in user and "1 attempts: 1 measured" in user

    node = s.tree.nodes[1]
    assert node.move == "llm" and node.choice is None and "BLOCK=1024" in node.source
    assert node.status == "measured" and node.speedup > root.speedup
    [failed] = [a for a in s.memory.attempts if a.outcome == "failed"]
    assert failed.move == "llm" and failed.stage == "propose" and failed.reason == "unparsable reply: no code"
    assert s.memory.failures()["unparsable reply"] == 1
    assert [e["reason"] for e in s.events if e["type"] == "proposal_failed"] == ["unparsable reply: no code"]

    memory_before = s.memory.render()
    s.step()  # greedy expands the best node, the LLM-written one
    assert len(requests) == 4
    content = requests[2]["messages"][0]["content"]
    assert node.source.strip() in content and "unparsable reply x1" in content and memory_before in content
    assert [n.move for n in s.tree.nodes.values()] == ["root", "llm", "llm", "llm"]
    fma, bad = s.tree.nodes[2], s.tree.nodes[3]
    assert fma.parent == 1 and "tl.fma" in fma.source and fma.status == "measured"
    assert bad.status == "failed" and bad.stage == "correctness" and bad.reward < 0
    assert s.best is fma and s.best.speedup > node.speedup
    events = [e for e in s.events if e["type"] == "node"]
    assert events[0]["choice"] and "source" not in events[0]
    assert events[2]["choice"] is None and events[2]["source"] == fma.source
    assert events[2]["origin"]["kind"] == "llm" and events[2]["origin"]["rationale"].startswith("compute the affine")
    report = s.report()
    assert report["proposer"] == "llm" and report["candidates"] == 4
    assert report["by_status"] == {"failed": 1, "measured": 3}
    assert "source" not in s.table().columns


def test_failed_proposals_never_stop_the_search(problem, offline):
    s, client = llm_search(problem, offline, "proposer_malformed", "search_llm_block1024", per_step=1)
    s.step()
    report = s.step()  # the only reply is prose: no node, recorded, not "space exhausted"
    assert report.stopped is None and report.nodes == [] and s.steps == 2
    assert len(s.tree.nodes) == 1 and s.memory.failures() == {"unparsable reply": 1}
    report = s.step()
    assert report.stopped is None and [n["move"] for n in report.nodes] == ["llm"]

    # only steps that all fail, several in a row, end a headless run; a call error is a failure like a bad reply
    s, client = llm_search(problem, offline, "proposer_malformed", "http_400", "proposer_truncated",
                           per_step=1)
    s.run()
    assert s.steps == 4 and len(s.tree.nodes) == 1
    reasons = [a.reason for a in s.memory.attempts if a.stage == "propose"]
    assert reasons[0] == "unparsable reply: no code" and reasons[2] == "unparsable reply: truncated"
    assert reasons[1].startswith("llm call failed: BadRequestError (HTTP 400): prompt is too long")
    assert s.stopped().startswith("llm proposals failing: 3 steps in a row without a usable module; last: ")
    assert s.llm_failure() == s.stopped()


def test_llm_stop_reason(problem, offline):
    s, _ = llm_search(problem, offline, "proposer_malformed", "proposer_malformed", "proposer_malformed", per_step=1)
    reports = []
    s.run(progress=reports.append)
    assert [r.stopped for r in reports] == [None, None, None, "llm proposals failing: 3 steps in a row without a "
                                            "usable module; last: unparsable reply: no code"]


@pytest.mark.parametrize("strategy", ["beam", "evolutionary", "mcts"])
def test_other_strategies_use_llm_moves(problem, offline, strategy):
    s, _ = llm_search(problem, offline, "search_llm_block1024", "search_llm_fma_where", "proposer_ok",
                      "proposer_several", strategy=strategy, per_step=2, seed=1)
    s.run(steps=4)
    moves = [n.move for n in s.tree.nodes.values()]
    assert moves[0] == "root" and "crossover" not in moves and moves.count("llm") == 3
    # proposer_several's module is proposer_ok's: the same source is never a second node
    assert len({n.candidate for n in s.tree.nodes.values()}) == len(s.tree.nodes)


def test_resume_with_source_nodes(tmp_path, problem, offline):
    store = Store(tmp_path / "s.sqlite")
    gpu = RecordingGPU()
    first = make_search(problem, gpu, proposer="llm", offline=offline, store=store, search_id="llm1", per_step=2,
                        llm_client=make_client("search_llm_block1024", "proposer_malformed", concurrency=1))
    first.run(steps=2)
    calls, n_nodes = gpu.calls, len(first.tree.nodes)
    assert n_nodes == 2

    client = make_client("search_llm_fma_where", "search_llm_block1024", concurrency=1)
    again = make_search(problem, gpu, proposer="llm", offline=offline, store=store, search_id="llm1", per_step=2,
                        llm_client=client)
    assert again.steps == 2 and len(again.tree.nodes) == n_nodes and gpu.calls == calls
    node = again.tree.nodes[1]
    assert node.move == "llm" and node.choice is None and node.source == first.tree.nodes[1].source
    assert node.speedup == first.tree.nodes[1].speedup and again.best.nid == 1
    assert again.memory.render() == first.memory.render()  # the failed proposal came back from its event
    assert again.summaries[1] == first.summaries[1]

    again.run(steps=1)
    [request, _] = client.api.requests
    content = request["messages"][0]["content"]
    assert node.source.strip() in content and "unparsable reply x1" in content
    # block1024 again is a known source: not evaluated twice; fma_where is new
    assert [n.move for n in again.tree.nodes.values()] == ["root", "llm", "llm"]
    assert "tl.fma" in again.tree.nodes[2].source and gpu.calls > calls


def test_make_search_flavours(problem, offline, monkeypatch):
    s = make_search(problem, RecordingGPU(), offline=offline)
    assert s.llm_moves is None and s.supports_crossover and s.report()["proposer"] == "offline"
    with pytest.raises(ValueError, match="unknown proposer"):
        make_search(problem, RecordingGPU(), proposer="gpt", offline=offline)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(LLMUnavailable):
        make_search(problem, RecordingGPU(), proposer="llm", offline=offline)


# ---- both LLM parts: the proposer writes children, the surrogate screens them ----
def test_llm_proposer_and_llm_surrogate_screen_together(tmp_path, problem, offline):
    """One client for both (concurrency 1: replies in a fixed order). Step 2 over-generates 3 LLM children for one
    GPU slot; the LLM surrogate forecasts each, the policy measures the most promising and skips the rest, and the
    skipped ones are stored with their forecasts (and come back with them on resume)."""
    from workbench.llm import LLMSurrogate
    from workbench.llm.surrogate import forecast_prompts
    from workbench.search import ScreeningConfig
    from workbench.surrogates import SelectivePolicy

    store = Store(tmp_path / "s.sqlite")
    client = make_client("search_llm_block1024", "search_llm_fma_where", "proposer_ok",  # the proposer's 3 calls
                         "surrogate_slow", "surrogate_fast", "surrogate_fails",  # one forecast per child, in order
                         concurrency=1)
    s = make_search(problem, RecordingGPU(), proposer="llm", llm_client=client, offline=offline, store=store,
                    search_id="both", per_step=1,
                    screening=ScreeningConfig(LLMSurrogate(client), SelectivePolicy(tau=1.01, explore=0.0),
                                              overgenerate=3))
    s.step()
    assert s.tree.root.status == "measured" and not client.api.requests  # the root: no LLM, no screening
    report = s.step()
    requests = client.api.requests
    assert len(requests) == 6 and client.calls == 6

    block, fma, bad = (s.tree.nodes[i] for i in (1, 2, 3))
    assert "BLOCK=1024" in block.source and "tl.fma" in fma.source and bad.move == "llm"
    # the forecast requests: the surrogate's own prompt on each child's source, one cached prefix
    for request, node in zip(requests[3:], (block, fma, bad)):
        stable, user = forecast_prompts(problem.source, "eager", problem.source, node.source)
        assert request == client.request(stable, user)
    # screening used them: the fast forecast got the one slot, the slow and failing ones were skipped
    assert fma.status == "measured" and fma.forecast["decision"] == "defer"
    assert fma.forecast["probs"][6] == pytest.approx(0.45) and report.nodes[1]["status"] == "measured"
    assert block.status == bad.status == "skipped"
    assert block.forecast["probs"][2] == pytest.approx(0.45) and bad.forecast["probs"][8] == pytest.approx(0.7)
    assert "skipped by the surrogate" in block.reason and block.speedup is None
    skipped = [e for e in s.events if e.get("skipped")]
    assert [e["nid"] for e in skipped] == [1, 3] and skipped[0]["source"] == block.source
    assert skipped[1]["forecast"]["probs"] == bad.forecast["probs"]
    assert s.report()["skipped_by_surrogate"] == 2 and s.report()["surrogate"] == "LLMSurrogate"
    assert [a.outcome for a in s.memory.attempts][-3:] == ["skipped", "measured", "skipped"]

    again = make_search(problem, RecordingGPU(), proposer="llm", llm_client=make_client(concurrency=1),
                        offline=offline, store=store, search_id="both", per_step=1,
                        screening=ScreeningConfig(LLMSurrogate(make_client()), SelectivePolicy(tau=1.01, explore=0.0),
                                                  overgenerate=3))
    assert [n.status for n in again.tree.nodes.values()] == ["measured", "skipped", "measured", "skipped"]
    assert again.tree.nodes[3].forecast == bad.forecast and again.tree.nodes[1].source == block.source
    store.close()


def test_cli_search_with_llm_proposer_and_surrogate(capsys):
    """`workbench search --proposer llm --surrogate llm` on replay, the recorded client injected where the command
    builds its client: the root is a recorded measurement, the LLM's children are forecast and screened (replay
    answers "not measured" for sources it never saw), and the report counts the calls."""
    import json

    from workbench import cli

    client = make_client("search_llm_block1024", "search_llm_fma_where", "proposer_ok",
                         "surrogate_slow", "surrogate_fast", "surrogate_fails", concurrency=1)
    built = []
    rc = cli.main(["search", "scale_shift_relu", "--device", "replay", "--proposer", "llm", "--surrogate", "llm",
                   "--steps", "2", "--per-step", "1", "--no-store", "--json", "--llm-model", "claude-test"],
                  llm_client_factory=lambda store=None, model=None: built.append((store, model)) or client)
    assert rc == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert built == [(None, "claude-test")]  # one client for both parts
    assert report["proposer"] == "llm" and report["surrogate"] == "LLMSurrogate"
    assert report["candidates"] == 4 and report["skipped_by_surrogate"] == 2
    assert report["llm"]["calls"] == 6 and report["llm"]["cost_usd"] > 0
    assert report["replay"]["answered"] >= 1
    user = client.api.requests[4]["messages"][0]["content"]
    assert "tl.fma" in user and "## Candidate" in user


def test_cli_llm_surrogate_without_key(monkeypatch, capsys):
    from workbench import cli

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    rc = cli.main(["search", "scale_shift_relu", "--device", "replay", "--surrogate", "llm", "--steps", "1",
                   "--no-store"])
    assert rc == 2 and "no ANTHROPIC_API_KEY in the environment" in capsys.readouterr().err


# ---- every failure visible ----
def test_bad_key_stops_the_search_at_once(problem, offline):
    s, client = llm_search(problem, offline, "http_401", "search_llm_block1024", per_step=1)
    reports = []
    s.run(steps=10, progress=reports.append)
    assert len(reports) == 2 and len(client.api.requests) == 1  # the root, then one refused call: no more
    assert reports[-1].stopped == ("llm unusable: AuthenticationError (HTTP 401): invalid x-api-key -- the API key "
                                   "was refused: check ANTHROPIC_API_KEY (not retried)")
    assert s.llm_failure() == reports[-1].stopped


def test_one_failed_step_is_reported_too(problem, offline):
    """Fewer steps than max_failed_steps, every LLM proposal failed: not a stop, still a failure with its reason."""
    s, _ = llm_search(problem, offline, "proposer_malformed", per_step=1)
    s.run(steps=2)
    assert s.stopped() is None and s.llm_failure() == "every LLM proposal failed (1); last: unparsable reply: no code"
    s, _ = llm_search(problem, offline, "proposer_malformed", "search_llm_block1024", per_step=1)
    s.run(steps=3)
    assert s.llm_failure() is None  # one usable module: the LLM did its part


def test_cli_search_network_down_says_why_and_exits_nonzero(capsys):
    """`--proposer llm` with the network down: bounded retries on the first call, one try on the later ones, the
    search stops after max_failed_steps, the last error is printed and the exit status is 1, in well under a
    second of wall time (short backoff)."""
    import time

    from test_llm import DOWN

    from workbench import cli

    client = make_client(*[DOWN] * 10, concurrency=1, max_retries=2, backoff_s=0.01)
    client.sleep = time.sleep
    t0 = time.perf_counter()
    rc = cli.main(["search", "scale_shift_relu", "--device", "replay", "--proposer", "llm", "--steps", "10",
                   "--per-step", "1", "--no-store", "--json"], llm_client_factory=lambda store=None, model=None: client)
    assert rc == 1 and time.perf_counter() - t0 < 5.0
    out, err = capsys.readouterr()
    assert len(client.api.requests) == 3 + 1 + 1  # 3 attempts on the first call, then one per failing step
    assert "workbench: warning: 3 LLM call(s) failed; last: APIConnectionError" in err
    assert re.search(r"workbench: error: llm proposals failing: 3 steps in a row without a usable module; last: llm "
                     r"call failed: APIConnectionError: .+ -- could not reach the Anthropic API after 1 attempt", err)
    import json
    report = json.loads(out.strip().splitlines()[-1])
    assert report["llm"]["failed"] == 3 and report["llm"]["last_error"].startswith("APIConnectionError")


def test_uninformative_forecasts_never_skip(problem, offline):
    """The LLM surrogate answers nothing usable (a uniform forecast, an unreadable one, a failed call): the policy,
    with one GPU slot for three children, defers all three to the GPU and skips none."""
    from workbench.llm import LLMSurrogate
    from workbench.search import ScreeningConfig
    from workbench.surrogates import SelectivePolicy

    client = make_client("search_llm_block1024", "search_llm_fma_where", "proposer_ok",
                         "forecast_uniform", "forecast_bad", "http_500", concurrency=1, max_retries=0)
    s = make_search(problem, RecordingGPU(), proposer="llm", llm_client=client, offline=offline, per_step=1,
                    screening=ScreeningConfig(LLMSurrogate(client), SelectivePolicy(tau=0.2, explore=0.0),
                                              overgenerate=3))
    s.run(steps=2)
    children = [s.tree.nodes[i] for i in (1, 2, 3)]
    assert len(client.api.requests) == 6 and client.failed == 1
    assert [n.forecast["decision"] for n in children] == ["defer"] * 3
    assert [n.forecast["confidence"] for n in children] == [pytest.approx(1 / 9), 0.0, 0.0]
    assert all(n.status != "skipped" for n in children) and s.report()["skipped_by_surrogate"] == 0


def test_policy_defers_what_carries_no_information():
    from workbench.core.events import Decision
    from workbench.core.outcomes import Forecast, from_log2
    from workbench.surrogates import SelectivePolicy

    uniform = Forecast((1.0,) * 9)  # parsed, and says nothing
    winner, loser = from_log2(1.5, 0.1, 0.0), from_log2(-1.5, 0.1, 0.0)
    policy = SelectivePolicy(tau=0.1, explore=0.0)  # 1/9 would count as confident at this tau
    assert not policy.informative(uniform) and not policy.informative(Forecast.uniform("call failed"))
    assert policy.informative(winner)
    decisions = policy.decide([loser, uniform, winner, Forecast.uniform("call failed")], 1)
    assert decisions == [Decision.SKIP, Decision.DEFER, Decision.MEASURE, Decision.DEFER]
    assert policy.decide([uniform] * 4, 1) == [Decision.DEFER] * 4  # beyond the slots: none is dropped blind
