"""The LLM surrogate in `workbench surrogate eval`: scored on the same sampled pairs and metrics as the learned
surrogate and the baselines, on a small cut of the real H200 dataset (tests/fixtures/dataset_small), with recorded
replies (tests/llm_recordings/surrogate_*.json, hand-written) chosen per candidate and served over HTTP to the real SDK
client (test_llm.RecordedAPI): never the live service."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("anthropic")
pytest.importorskip("lightgbm")

from test_llm import ReplyByCandidate, client_on, recording  # noqa: E402

from workbench import cli  # noqa: E402
from workbench.llm import LLMSurrogate, extract_forecast, rewards  # noqa: E402
from workbench.llm.dataset_eval import LLMRowsSurrogate, llm_factory  # noqa: E402
from workbench.metrics.bins import to_bin  # noqa: E402
from workbench.proposers.recorded import DatasetSources  # noqa: E402
from workbench.store.dataset import load  # noqa: E402
from workbench.surrogates.evaluate import default_surrogates, evaluate, sample_rows  # noqa: E402
from workbench.surrogates.features import training_table  # noqa: E402

DATA = Path(__file__).parent / "fixtures" / "dataset_small"
RANKED = ("surrogate_fails", "surrogate_slow", "surrogate_fast")  # worst to best measured in a pool of three


@pytest.fixture(scope="module")
def cands():
    return load("candidates", DATA)


@pytest.fixture(scope="module")
def table(cands):
    return training_table(cands, load("problems", DATA))


@pytest.fixture(scope="module")
def eligible(cands, table):
    return cands.loc[table.index, "regenerates"].to_numpy(bool)


@pytest.fixture(scope="module")
def sample(table, eligible):
    return sample_rows(table, 6, seed=0, eligible=eligible, per_problem=3)


def replies_by_truth(table, sample) -> dict[str, str]:
    """In each sampled pool of three, the fastest measured candidate gets the 'fast' forecast, the middle one 'slow'
    and the slowest 'fails': a forecaster that orders every pool right and gets every bin wrong."""
    out = {}
    for _, g in table.loc[sample].groupby("problem_key"):
        assert len(g) == 3
        for name, h in zip(RANKED, g.sort_values("log2_speedup")["candidate"]):
            out[h] = name
    return out


def probs_of(name: str) -> tuple[float, ...]:
    return extract_forecast(recording(name)["content"][0]["text"]).probs


# ---- the sample ----
def test_sample_rows(table, eligible, sample):
    again = sample_rows(table, 6, seed=0, eligible=eligible, per_problem=3)
    assert list(again) == list(sample) and len(sample) == 6
    assert table.loc[sample].groupby("problem_key").size().tolist() == [3, 3]  # whole pools, ranking needs them
    assert eligible[table.index.get_indexer(sample)].all()  # only rows whose source regenerates
    assert list(sample_rows(table, 6, seed=1, eligible=eligible, per_problem=3)) != list(sample)
    assert len(sample_rows(table, 10**6, eligible=eligible)) == eligible.sum()  # all of them when n is large
    uneven = sample_rows(table, 7, seed=0, eligible=eligible, per_problem=3)
    assert sorted(table.loc[uneven].groupby("problem_key").size()) == [1, 3, 3]
    with pytest.raises(ValueError, match="at least 1 pair"):
        sample_rows(table, 0)
    with pytest.raises(ValueError, match="no eligible rows"):
        sample_rows(table, 5, eligible=np.zeros(len(table), bool))
    with pytest.raises(ValueError, match="one flag per table row"):
        sample_rows(table, 5, eligible=[True])


# ---- the adapter and the evaluation ----
def test_llm_scored_on_the_same_pairs_as_the_others(cands, table, sample):
    sdk = ReplyByCandidate(replies_by_truth(table, sample))
    client = client_on(sdk, concurrency=2)
    fast = default_surrogates(trees=20)
    factories = {"learned": fast["learned"], "prior": fast["prior"], "oracle": fast["oracle"],
                 "llm": llm_factory(LLMSurrogate(client), cands)}
    preds: dict = {}
    res = evaluate(table, "problem", factories, k=3, seed=0, predictions=preds, sample=sample)

    for name, m in res.items():  # every surrogate on the same six rows
        assert m["n_rows"] == 6 and m["n_problems"] == 2 and list(preds[name].index) == list(sample), name
    llm = res["llm"]
    assert llm["unparsed"] == 0 and client.calls == 6 and len(sdk.requests) == 6
    # each pool is ordered right: the fast forecast on its fastest, "fails" on its slowest
    assert llm["pairwise_accuracy"] == 1.0 and llm["spearman"] == pytest.approx(1.0)
    assert llm["kendall"] == pytest.approx(1.0) and llm["top1_score"] == pytest.approx(1.0)
    # and every bin is wrong: the measured ones are 2x-8x slowdowns, none forecast as such
    rows = table.loc[sample]
    truth = np.atleast_1d(to_bin(rows["log2_speedup"].to_numpy(float), rows["failed"].to_numpy(bool)))
    assert set(truth) <= {0, 1} and llm["bin_accuracy"] == 0.0
    forecast = [probs_of(sdk.replies[h]) for h in rows["candidate"]]
    assert llm["brier"] == pytest.approx(np.mean([rewards.brier(p, t) for p, t in zip(forecast, truth)]))
    assert preds["llm"][[f"p{i}" for i in range(9)]].to_numpy() == pytest.approx(np.array(forecast))
    assert res["oracle"]["pairwise_accuracy"] == 1.0 and res["oracle"]["bin_accuracy"] == 1.0
    assert res["prior"]["pairwise_accuracy"] == 0.5
    # the requests carry the built-in problems' sources (each row's exact candidate: ReplyByCandidate found it)
    from workbench.problems import Problem

    systems = [r["system"][0]["text"] for r in sdk.requests]
    for name in rows["problem"].unique():
        assert sum(Problem.load(name).source.strip() in t for t in systems) == 3


def test_rows_without_a_source_are_refused(cands, table, eligible):
    adapter = LLMRowsSurrogate(LLMSurrogate(client_on(ReplyByCandidate({}))), DatasetSources(cands))
    orphans = table[~eligible].head(2)
    with pytest.raises(ValueError, match="2 of 2 rows have no regenerable source"):
        adapter.predict_frame(orphans)
    sources = DatasetSources(cands)
    with pytest.raises(ValueError, match="no regenerable source for candidate 0000"):
        sources.candidate(table["problem_key"].iloc[0], "0000")
    with pytest.raises(ValueError, match="not the built-in layernorm at its default sizes"):
        sources._name["layernorm@0123"] = "layernorm"
        sources.problem("layernorm@0123")
    with pytest.raises(ValueError, match="lack"):
        DatasetSources(cands.drop(columns=["choice_json"]))


# ---- the command line ----
def test_cli_eval_with_the_llm(capsys, table, sample):
    sdk = ReplyByCandidate(replies_by_truth(table, sample))
    built = []

    def client(store=None, model=None):
        built.append(model)
        return client_on(sdk, model=model or "claude-sonnet-4-6", concurrency=1)

    args = ["surrogate", "eval", "--data", str(DATA), "--folds", "3", "--trees", "20", "--limit-pairs", "6",
            "--pairs-per-problem", "3", "--seed", "0"]
    assert cli.main(args + ["--surrogate", "llm", "--json"], llm_client_factory=client) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"learned", "roofline", "prior", "random", "oracle", "llm"} and built == [None]
    assert all(m["n_rows"] == 6 for m in out.values())
    assert out["llm"]["pairwise_accuracy"] == 1.0 and out["llm"]["bin_accuracy"] == 0.0
    calls = out["llm"]["llm_calls"]
    assert calls["calls"] == 6 and calls["cost_usd"] > 0 and calls["cache_read_input_tokens"] > 0

    # the same seed without the LLM scores the same pairs: the learned surrogate's numbers do not move
    assert cli.main(args + ["--json"], llm_client_factory=client) == 0
    without = json.loads(capsys.readouterr().out)
    assert "llm" not in without and without["learned"]["brier"] == pytest.approx(out["learned"]["brier"])

    assert cli.main(args + ["--only", "llm", "--only", "oracle", "--repeats", "2", "--llm-model", "claude-x"],
                    llm_client_factory=client) == 0
    text = capsys.readouterr().out
    assert "scored on a sample of 6 pairs over 2 problems" in text and "llm: 12 calls" in text
    assert built[-1] == "claude-x" and len(sdk.requests) == 6 + 12


def test_cli_eval_llm_needs_a_limit_and_a_key(monkeypatch, capsys):
    base = ["surrogate", "eval", "--data", str(DATA), "--only", "llm"]
    assert cli.main(base) == 2
    assert "pass --limit-pairs N" in capsys.readouterr().err
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert cli.main(base + ["--limit-pairs", "4"]) == 2
    assert "no ANTHROPIC_API_KEY in the environment" in capsys.readouterr().err
    assert cli.main(base + ["--limit-pairs", "4", "--only", "gpt"]) == 2
    assert "unknown surrogate(s) ['gpt']" in capsys.readouterr().err
