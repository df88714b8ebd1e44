"""The learned surrogate on a small cut of the real H200 dataset (tests/fixtures/dataset_small, written by
experiments/make_surrogate_fixture.py): features, training, forecasts, persistence, the OOD check, evaluation and the
`workbench surrogate` command line. CPU only; the models are kept small (few trees) so the whole file takes seconds."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("lightgbm")

from workbench.cli import main  # noqa: E402
from workbench.core.records import StageRecord  # noqa: E402
from workbench.store.dataset import load  # noqa: E402
from workbench.surrogates import Forecast  # noqa: E402
from workbench.surrogates.baselines import OracleBaseline, PriorBaseline, RooflineRowsBaseline  # noqa: E402
from workbench.surrogates.evaluate import default_surrogates, evaluate, split_folds  # noqa: E402
from workbench.surrogates.features import (  # noqa: E402
    NOISE_FLOOR,
    default_ceilings,
    feature_columns,
    features_from_live,
    features_from_rows,
    group_families,
    live_problem_info,
    training_table,
)
from workbench.surrogates.learned import LearnedSurrogate  # noqa: E402

DATA = Path(__file__).parent / "fixtures" / "dataset_small"
REQUIRED = ("pairwise_accuracy", "spearman", "ece", "brier", "aurc", "top10_within5", "top10_within20")


def small(**kw) -> LearnedSurrogate:
    return LearnedSurrogate(**{"n_estimators": 30, "n_bags": 3, "inner_folds": 3, **kw})


@pytest.fixture(scope="module")
def rows():
    return load("candidates", DATA), load("problems", DATA)


@pytest.fixture(scope="module")
def table(rows):
    return training_table(*rows)


@pytest.fixture(scope="module")
def model(table):
    return small().fit(table)


# ---- features ----

def test_families_from_kernel_names_then_config_keys():
    row_cfg = {"BLOCK": 1024, "ROWS_PER_PROGRAM": 1, "num_warps": 4, "strategy": "loop"}
    gemm_cfg = {"BM": 128, "BN": 128, "BK": 64, "num_warps": 8}
    choice = {"configs": {"g0": gemm_cfg, "g1": row_cfg}}
    # a scan has a row's keys: only its kernel name tells them apart; with no kernels the keys decide
    assert group_families(choice, [{"kernel": "_g0_gemm_kernel"}, {"kernel": "_g1_scan_kernel"}]) == \
        {"g0": "gemm", "g1": "scan"}
    assert group_families(choice, []) == {"g0": "gemm", "g1": "row"}


def test_training_table_meta(table, rows):
    cands, _ = rows
    assert len(table) == len(cands) and table["problem"].nunique() == 7
    failed = table["failed"]
    assert failed.sum() > 0 and table.loc[failed, "log2_speedup"].isna().all()
    assert np.isfinite(table.loc[~failed, "log2_speedup"]).all()
    assert (table["noise_sd"] >= NOISE_FLOOR).all()
    fam = table.groupby("problem")["family"].first()
    assert fam["matmul_bf16"] == "gemm" and fam["layernorm"] == "row" and fam["permute_copy_4d"] == "permute"
    assert table["s.log2_k"][table["problem"] == "matmul_small_k_bf16"].iloc[0] == pytest.approx(9.0)  # K = 512


def test_features_train_serve_parity(rows):
    """A dataset row and the same candidate rebuilt live (problem counted, source rendered from the choice, compile
    record from the row) give the same features."""
    from workbench.problems import Problem
    from workbench.proposers.offline import Choice, OfflineProposer

    cands, probs = rows
    ceil = default_ceilings()
    X = features_from_rows(cands, probs, ceil)
    for name in ("layernorm", "matmul_small_k_bf16"):
        sub = cands[(cands["problem"] == name) & cands["regenerates"]].head(6)
        assert len(sub) >= 3
        problem = Problem.load(name)
        proposer = OfflineProposer(problem)
        live = [proposer.render(Choice.from_dict(json.loads(cj))) for cj in sub["choice_json"]]
        assert [c.hash for c in live] == list(sub["candidate"])
        records = {h: StageRecord("compile", v, data=json.loads(cj))
                   for h, v, cj in zip(sub["candidate"], sub["compile_verdict"], sub["compile_json"])}
        L = features_from_live(live_problem_info(problem, ceil), live, records, ceil)
        R = X.loc[sub.index].reset_index(drop=True)
        cols = sorted(set(L.columns) | set(R.columns))
        L, R = L.reindex(columns=cols), R.reindex(columns=cols)
        same = (L == R) | (L.isna() & R.isna())
        assert same.all().all(), f"{name}: {list(L.columns[~same.all()])}"


# ---- the learned surrogate ----

def test_fit_and_predict_frame(model, table):
    pred = model.predict_frame(table)
    probs = pred[[f"p{i}" for i in range(9)]].to_numpy()
    assert pred.index.equals(table.index)
    assert np.allclose(probs.sum(1), 1.0) and (probs >= 0).all() and (probs <= 1).all()
    assert (pred["sigma"] > 0).all() and pred["p_fail"].between(0, 1).all()
    assert np.allclose(pred["confidence"], probs.max(1))
    assert (pred["ood"] < 1).all()  # every training row is in distribution
    assert model.fit_seconds < 60 and model.n_train == len(table)


def test_forecast_live_candidates(model):
    from workbench.problems import Problem
    from workbench.proposers.offline import OfflineProposer

    problem = Problem.load("layernorm")
    cands = OfflineProposer(problem).propose(3, seed=1)
    out = model.forecast(problem, cands)
    assert len(out) == 3 and all(isinstance(f, Forecast) for f in out)
    assert all(sum(f.probs) == pytest.approx(1.0) and f.reasoning.startswith("learned:") for f in out)
    frame = model.forecast_frame(problem, cands)
    assert np.allclose(frame[[f"p{i}" for i in range(9)]].to_numpy(), [f.probs for f in out])
    assert frame["mu"].notna().all() and (frame["ood"] >= 0).all()
    assert model.forecast(problem, []) == []
    with pytest.raises(ValueError, match="eager"):
        model.forecast(problem, cands, anchor="compile")


def test_save_load_round_trip(model, table, tmp_path):
    path = model.save(tmp_path / "m" / "learned.pkl")
    again = LearnedSurrogate.load(path)
    pd.testing.assert_frame_equal(model.predict_frame(table), again.predict_frame(table))
    with pytest.raises(FileNotFoundError, match="surrogate train"):
        LearnedSurrogate.load(tmp_path / "absent.pkl")
    (tmp_path / "junk.pkl").write_bytes(__import__("pickle").dumps({"x": 1}))
    with pytest.raises(ValueError, match="not a LearnedSurrogate"):
        LearnedSurrogate.load(tmp_path / "junk.pkl")


def test_ood_lowers_confidence(model, table):
    """The same candidates on a problem a million times larger than any seen: ood > 1 and every forecast less
    confident than on the known problem."""
    near = table[table["problem"] == "layernorm"].head(20)
    far = near.copy()
    for c in feature_columns(far):
        if c.startswith(("p.log2_", "s.log2_")) and "intensity" not in c:
            far[c] = far[c] + 20.0
    p_near, p_far = model.predict_frame(near), model.predict_frame(far)
    assert (p_near["ood"] < 1).all() and (p_far["ood"] > 1).all()
    assert (p_far["confidence"].to_numpy() < p_near["confidence"].to_numpy()).all()


def test_bad_input_is_refused(table):
    with pytest.raises(ValueError, match="training_table"):
        small().fit(table[["problem_key", "log2_speedup", "failed"]])
    with pytest.raises(ValueError, match="not trained"):
        small().predict_frame(table)
    with pytest.raises(ValueError, match="nothing to save"):
        small().save("/tmp/never.pkl")
    cands, probs = load("candidates", DATA), load("problems", DATA)
    with pytest.raises(ValueError, match="no problems.parquet row"):
        features_from_rows(cands, probs[probs["problem"] != "layernorm"])


# ---- baselines and evaluation ----

def test_roofline_rows_baseline_hand_computed(table):
    pred = RooflineRowsBaseline().fit(table).predict_frame(table)
    ce = table["problem"] == "cross_entropy"
    # memory-bound both ways at the same efficiency: log2(eager bytes / min bytes)
    expect = math.log2(table.loc[ce, "eager_bytes"].iloc[0] / table.loc[ce, "min_bytes"].iloc[0])
    assert pred.loc[ce & (table["k.spills"] == 0), "mu"].to_numpy() == pytest.approx(expect)


def test_evaluate_keys_and_baselines(table):
    fast = default_surrogates(trees=20)
    res = evaluate(table, "problem", {"learned": lambda: small(n_estimators=20), "roofline": fast["roofline"],
                                      "prior": fast["prior"], "oracle": fast["oracle"]}, k=3)
    for m in res.values():
        assert set(REQUIRED) <= set(m) and m["folds"] == 3 and len(m["reliability"]) == 15
    o = res["oracle"]
    assert o["pairwise_accuracy"] == 1.0 and o["ece"] == 0.0 and o["top10_within5"] == 1.0 and o["aurc"] == 0.0
    assert res["prior"]["pairwise_accuracy"] == 0.5  # a constant score ties every pair
    assert 0 <= res["learned"]["ece"] <= 1 and 0 <= res["learned"]["top10_within20"] <= 1


def test_splits(table):
    prob = split_folds(table, "problem", k=3)
    assert all(len(set(prob[table["problem"] == p])) == 1 for p in table["problem"].unique())
    fam = split_folds(table, "family")
    assert len(set(fam)) == table["family"].nunique()
    assert sorted(set(split_folds(table, "random", k=4))) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="split must be"):
        split_folds(table, "by-colour")


def test_oracle_and_prior_predict_frames(table):
    o = OracleBaseline().fit(table).predict_frame(table)
    assert (o.loc[table["failed"], "p8"] == 1).all()
    p = PriorBaseline().fit(table).predict_frame(table)
    assert np.allclose(p[[f"p{i}" for i in range(9)]].sum(axis=1), 1.0) and p["score"].nunique() == 1


# ---- the command line ----

def test_cli_eval_json(capsys):
    rc = main(["surrogate", "eval", "--data", str(DATA), "--json", "--folds", "2", "--trees", "20"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"learned", "roofline", "prior", "random", "oracle"}
    for m in out.values():
        assert all(k in m for k in REQUIRED)
    assert out["oracle"]["pairwise_accuracy"] == 1.0


def test_cli_train_and_missing_dataset(tmp_path, capsys):
    out = tmp_path / "learned.pkl"
    assert main(["surrogate", "train", "--data", str(DATA), "--out", str(out), "--trees", "20"]) == 0
    assert LearnedSurrogate.load(out).n_train > 0
    assert main(["surrogate", "eval", "--data", str(tmp_path / "nowhere")]) == 2
    assert "no measurement dataset" in capsys.readouterr().err
    assert main(["surrogate", "eval", "--data", str(DATA), "--only", "nonesuch"]) == 2


def test_tau_comes_from_the_held_out_risk_coverage_curve(model):
    v = model.validation
    assert len(v["confidence"]) == len(v["wrong"]) > 0
    strict, loose = model.tau(0.05), model.tau(0.6)
    assert strict >= loose  # a lower tolerated risk accepts fewer forecasts
    accepted = v["confidence"] >= loose
    if accepted.any():  # what tau accepts meets the risk it was chosen for
        assert v["wrong"][accepted].mean() <= 0.6 + 1e-9


# ---- learning from a search's measurements (observe) ----

def test_offset_variances_by_hand():
    from workbench.surrogates.learned import offset_variances

    # three problems with residual means -1, 0, 1 and within-problem values +-0.5 around them (var 0.25 * 2 / 1)
    res = [-1.5, -0.5, -0.5, 0.5, 0.5, 1.5]
    groups = ["a", "a", "b", "b", "c", "c"]
    tau2, within2 = offset_variances(res, groups)
    assert within2 == pytest.approx(0.5)  # each pair's sample variance: (0.5^2 + 0.5^2) / 1
    assert tau2 == pytest.approx(1.0 - 0.5 / 2)  # var of the means (1.0) less within / n
    assert offset_variances(res[:4], groups[:4]) is None  # fewer than 3 problems: no prior


def test_observe_shifts_a_new_problems_forecasts_and_nothing_else(table):
    held = sorted(table["problem_key"].unique())[0]
    m = small().fit(table[table["problem_key"] != held])
    assert m.offset_prior is not None and "observed" in m.sigma_ab
    tau2, within2 = m.offset_prior
    new, other = table[table["problem_key"] == held], table[table["problem_key"] != held].head(20)
    before_new, before_other = m.predict_frame(new), m.predict_frame(other)
    timed = new[~new["failed"]]
    seen = timed.head(3)
    m.observe(seen, seen["log2_speedup"].to_numpy())
    m.observe(other.head(2), other.head(2)["log2_speedup"].to_numpy())  # training problems: ignored
    after_new, after_other = m.predict_frame(new), m.predict_frame(other)
    res = seen["log2_speedup"].to_numpy() - before_new.loc[seen.index, "mu"].to_numpy()
    shift = 3 * tau2 / (3 * tau2 + within2) * res.mean()
    assert np.allclose(after_new["mu"] - before_new["mu"], shift)  # the shrunken mean residual, on every row
    assert np.allclose(after_new["score"], before_new["score"])  # the order within the problem is unchanged
    assert not np.allclose(after_new["sigma"], before_new["sigma"])
    pd.testing.assert_frame_equal(after_other, before_other)
    # a sharper forecast that knows the offset: its mean error on the unseen rows shrinks
    rest = timed.drop(seen.index)
    err = lambda p: float(np.abs(p.loc[rest.index, "mu"] - rest["log2_speedup"]).mean())  # noqa: E731
    if abs(res.mean()) > 0.2:
        assert err(after_new) < err(before_new)
    m.forget(held)
    pd.testing.assert_frame_equal(m.predict_frame(new), before_new)
    with pytest.raises(ValueError, match="measurements for"):
        m.observe(seen, [0.0])


def test_observed_state_is_not_saved(table, tmp_path):
    held = sorted(table["problem_key"].unique())[0]
    m = small().fit(table[table["problem_key"] != held])
    new = table[(table["problem_key"] == held) & ~table["failed"]].head(2)
    m.observe(new, new["log2_speedup"].to_numpy() + 1.0)
    loaded = LearnedSurrogate.load(m.save(tmp_path / "m.pkl"))
    m.forget()
    pd.testing.assert_frame_equal(loaded.predict_frame(new), m.predict_frame(new))


def test_few_shot_scores_every_n_on_the_same_rows(table):
    from workbench.surrogates.evaluate import few_shot

    r = few_shot(table, shots=(0, 3), k=3, trees=30)
    assert set(r) == {0, 3} and r[0]["n_rows"] == r[3]["n_rows"] < len(table)
    assert r[0]["pairwise_accuracy"] == pytest.approx(r[3]["pairwise_accuracy"])  # ranking is not touched
    assert r[3]["median_abs_log2_error"] < r[0]["median_abs_log2_error"]
    with pytest.raises(ValueError, match="non-negative"):
        few_shot(table, shots=(-1,))
