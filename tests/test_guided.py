"""Findings-guided moves: the mapping from a finding's move to the offline proposer's points, and searches that read
findings from replayed H200 compile records and times (no GPU)."""
from __future__ import annotations

import json
import random

import pytest

from workbench.devices.replay import ReplayDevice
from workbench.harness.budget import Budget
from workbench.problems import Problem
from workbench.profiling.findings import Finding
from workbench.proposers.guided import CONFIG_DIRECTIONS, group_of, guided_moves, interleave, suggestions, threads, tile
from workbench.proposers.offline import Choice, OfflineProposer
from workbench.proposers.recorded import RecordedProposer, distance
from workbench.search import FindingsConfig, Search
from workbench.search.memory import SearchMemory
from workbench.store import Store

REPLAY = "matmul_bf16"  # 127 recorded points; its mma-path configs draw warning findings from the static reading


def finding(move, kernel=None, severity="warning", tool="test"):
    return Finding(tool, f"says {move}", severity, {}, "advice", move, kernel)


def cfg(choice: Choice, gid: str) -> dict:
    return json.loads(dict(choice.configs)[gid])


@pytest.fixture(scope="module")
def linear_gelu():
    return OfflineProposer(Problem.load("linear_gelu"))


@pytest.fixture(scope="module")
def split_choice(linear_gelu):
    """linear_gelu with its epilogue split off: g0 a GEMM, g1 an elementwise kernel."""
    fuse = {"addmm": False}
    return Choice(tuple(fuse.items()), tuple(
        (g.gid, json.dumps(dict(BM=64, BN=64, BK=32, GROUP_M=1, num_warps=4, num_stages=4, SPLIT_K=1,
                                PERSISTENT=False), sort_keys=True) if g.family == "gemm"
         else json.dumps({"BLOCK": 1024, "num_warps": 4, "PERSISTENT_WAVES": 0}, sort_keys=True))
        for g in linear_gelu.groups(fuse)))


# ---------------------------------------------------------------- the mapping

def test_increase_block_gives_a_larger_block_of_that_group_only(linear_gelu, split_choice):
    moves = guided_moves(linear_gelu, split_choice, [finding("increase_block", "_g0_gemm_kernel")],
                         random.Random(0), k=5)
    assert len(moves) == 5
    for label, c in moves:
        assert label == "increase_block:g0"
        assert tile(cfg(c, "g0")) > tile(cfg(split_choice, "g0"))
        assert cfg(c, "g1") == cfg(split_choice, "g1") and c.fuse == split_choice.fuse
    assert distance(split_choice, moves[0][1]) == 1  # the nearest point that goes that way first


def test_each_config_move_goes_its_way(linear_gelu, split_choice):
    cur = cfg(split_choice, "g0")
    checks = {
        "decrease_block": lambda n: tile(n) < tile(cur),
        "reduce_num_stages": lambda n: n["num_stages"] < cur["num_stages"],
        "reduce_registers": lambda n: tile(n) / threads(n) < tile(cur) / threads(cur),
        "swizzle_group_m": lambda n: n["GROUP_M"] > cur["GROUP_M"],
        "split_k": lambda n: n["SPLIT_K"] > cur["SPLIT_K"],
        "persistent": lambda n: n["PERSISTENT"] and not cur["PERSISTENT"],
        "vectorize_loads": lambda n: n["BK"] / threads(n) > cur["BK"] / threads(cur),
    }
    for move, ok in checks.items():
        moves = guided_moves(linear_gelu, split_choice, [finding(move, "_g0_gemm_kernel")], random.Random(1), k=3)
        assert moves, move
        assert all(label == f"{move}:g0" and ok(cfg(c, "g0")) for label, c in moves), move


def test_elementwise_group_persistent_and_fusion_moves(linear_gelu, split_choice):
    moves = guided_moves(linear_gelu, split_choice, [finding("persistent", "_g1_elementwise_kernel")],
                         random.Random(0), k=2)
    assert moves and all(cfg(c, "g1")["PERSISTENT_WAVES"] > 0 for _, c in moves)
    fused = guided_moves(linear_gelu, split_choice, [finding("fuse_epilogue")], random.Random(0), k=2)
    assert fused == [("fuse_epilogue:addmm", fused[0][1])] and dict(fused[0][1].fuse) == {"addmm": True}


def test_use_wgmma_reaches_a_hopper_tile():
    cur = dict(BM=32, num_warps=4)
    assert CONFIG_DIRECTIONS["use_wgmma"](cur, dict(BM=64, num_warps=4))
    assert not CONFIG_DIRECTIONS["use_wgmma"](cur, dict(BM=32, num_warps=8))
    assert CONFIG_DIRECTIONS["use_wgmma"]({"BLOCK": 1}, {"BLOCK": 2}) is None  # no such knob in that family


def test_a_candidate_wide_finding_applies_to_groups_with_the_knob(linear_gelu, split_choice):
    moves = guided_moves(linear_gelu, split_choice, [finding("reduce_num_stages")], random.Random(0), k=4)
    assert moves and all(label == "reduce_num_stages:g0" for label, _ in moves)  # g1 has no num_stages


def test_impossible_moves_fall_back_to_plain_moves(linear_gelu, split_choice):
    plain = linear_gelu.moves(split_choice, random.Random(3), k=6)
    for fs in ([finding("use_tensor_cores")],  # no knob in any family
               [finding("swizzle_shared", "_g0_gemm_kernel")],
               [finding("split_k", "_g1_elementwise_kernel")],  # an elementwise group cannot split K
               [finding("not_a_move_any_tool_makes")]):
        assert linear_gelu.moves(split_choice, random.Random(3), k=6, findings=fs) == plain
    # a move that exists but has nowhere to go: the largest elementwise block cannot grow
    top = Choice((), (("g0", json.dumps({"BLOCK": 8192, "num_warps": 16, "PERSISTENT_WAVES": 0},
                                        sort_keys=True)),))
    swish = OfflineProposer(Problem.load("swish"))
    assert swish.moves(top, random.Random(1), k=4, findings=[finding("increase_block", "_g0_elementwise_kernel")]) \
        == swish.moves(top, random.Random(1), k=4)


def test_info_findings_are_not_acted_on_by_default(linear_gelu, split_choice):
    info = [finding("increase_block", "_g0_gemm_kernel", severity="info")]
    plain = linear_gelu.moves(split_choice, random.Random(2), k=6)
    assert linear_gelu.moves(split_choice, random.Random(2), k=6, findings=info) == plain
    acted = linear_gelu.moves(split_choice, random.Random(2), k=6, findings=info, min_severity="info")
    assert acted[0][0] == "increase_block:g0"


def test_share_holds_in_every_prefix(linear_gelu, split_choice):
    fs = [finding("decrease_block", "_g0_gemm_kernel"), finding("persistent", "_g1_elementwise_kernel")]
    moves = linear_gelu.moves(split_choice, random.Random(0), k=12, findings=fs, guided_share=0.5)
    guided = [not m.startswith(("config:", "fuse:")) for m, _ in moves]
    for n in range(1, len(moves) + 1):
        assert abs(sum(guided[:n]) - n / 2) <= 1
    assert {m.split(":")[0] for m, _ in moves if not m.startswith(("config", "fuse"))} == \
        {"decrease_block", "persistent"}  # suggestions taken round robin
    # share 0: the plain moves (the proposer has more than 6 here); share 1: guided moves first
    assert linear_gelu.moves(split_choice, random.Random(0), k=6, findings=fs, guided_share=0.0) == \
        linear_gelu.moves(split_choice, random.Random(0), k=6)
    assert all(not m.startswith(("config:", "fuse:"))
               for m, _ in linear_gelu.moves(split_choice, random.Random(0), k=4, findings=fs, guided_share=1.0))


def test_bad_input_says_what_is_wrong(linear_gelu, split_choice):
    with pytest.raises(ValueError, match="share"):
        interleave([], [], 1.5, 4)
    with pytest.raises(ValueError, match="min_severity"):
        suggestions([finding("split_k")], ["g0"], min_severity="loud")
    with pytest.raises(TypeError, match="Finding"):
        guided_moves(linear_gelu, split_choice, ["increase_block"], random.Random(0), k=2)


def test_findings_are_tied_to_their_group():
    assert group_of("_g1_elementwise_kernel", ["g0", "g1"]) == "g1"
    assert group_of("_g12_gemm_kernel", ["g1", "g12"]) == "g12"
    assert group_of("some_other_kernel", ["g0"]) is None and group_of(None, ["g0"]) is None
    s = suggestions([finding("split_k", "_g0_gemm_kernel", "critical"), finding("increase_block"),
                     finding("split_k", "_g0_gemm_kernel", "warning"), finding(None)], ["g0"])
    assert [(x.move, x.group) for x in s] == [("split_k", "g0"), ("increase_block", None)]


def test_recorded_proposer_guides_only_to_recorded_points():
    prop = RecordedProposer.from_dataset(Problem.load(REPLAY))
    start = next(c for c in prop.recorded.values() if cfg(c, "g0")["num_stages"] >= 4)
    moves = guided_moves(prop, start, [finding("reduce_num_stages", "_g0_gemm_kernel")], random.Random(0), k=4)
    assert moves and all(prop.is_recorded(c) for _, c in moves)
    assert all(cfg(c, "g0")["num_stages"] < cfg(start, "g0")["num_stages"] for _, c in moves)
    mixed = prop.moves(start, random.Random(0), k=6, findings=[finding("reduce_num_stages", "_g0_gemm_kernel")])
    assert len(mixed) == 6 and all(prop.is_recorded(c) for _, c in mixed)


# ---------------------------------------------------------------- searches on replay

@pytest.fixture(scope="module")
def replay():
    d = ReplayDevice.from_dataset(problems=[REPLAY])
    yield Problem.load(REPLAY), d
    d.close()


def _search(replay, seed=0, strategy="mcts", **kw):
    problem, device = replay
    s = Search(problem, device, strategy=strategy, proposer=RecordedProposer.from_dataset(problem), seed=seed,
               budget=Budget(gpu_seconds=5.0), **kw)
    s.run(steps=40)
    return s


def test_search_stores_findings_on_nodes_memory_and_events(replay):
    s = _search(replay, findings=FindingsConfig("static", guided_min_severity="info"))
    nodes = list(s.tree.nodes.values())
    with_findings = [n for n in nodes if n.findings]
    assert with_findings and all(n.findings is not None for n in nodes)
    assert all(Finding.from_dict(f).tool for n in with_findings for f in n.findings)
    assert len(s.memory.findings) == sum(len(n.findings) for n in nodes)
    assert {f["candidate"] for f in s.memory.findings} <= {n.candidate for n in nodes}
    events = {e["nid"]: e for e in s.events if e["type"] == "node"}
    assert all(events[n.nid]["findings"] == n.findings for n in nodes)
    assert "profile" not in s.budget.spent  # static findings spend no GPU time
    rep = s.report()
    assert rep["findings"] == "static" and sum(rep["findings_by_tool"].values()) == len(s.memory.findings)
    # children of a node with findings follow them: their labels name the finding's move
    guided = [n for n in nodes if n.move.split(":")[0] in CONFIG_DIRECTIONS]
    assert guided
    for n in guided:
        parent = s.tree.nodes[n.parent]
        assert n.move.split(":")[0] in {f["move"] for f in parent.findings}
        move, gid = n.move.split(":")
        assert CONFIG_DIRECTIONS[move](cfg(parent.choice, gid), cfg(n.choice, gid))


def test_guided_search_is_deterministic_under_a_seed(replay):
    a, b = (_search(replay, findings=FindingsConfig("static", guided_min_severity="info")) for _ in range(2))
    assert any(n.move.split(":")[0] in CONFIG_DIRECTIONS for n in a.tree.nodes.values())
    assert [(n.candidate, n.move, n.findings) for n in a.tree.nodes.values()] == \
        [(n.candidate, n.move, n.findings) for n in b.tree.nodes.values()]


def test_search_without_findings_reads_none(replay):
    s = _search(replay, strategy="greedy")
    assert all(n.findings is None for n in s.tree.nodes.values()) and not s.memory.findings
    assert s.report()["findings"] is None


def test_findings_survive_resume_and_memory_round_trip(tmp_path, replay):
    problem, device = replay
    store = Store(tmp_path / "s.sqlite")
    kw = dict(proposer=RecordedProposer.from_dataset(problem), seed=2, store=store, search_id="g1",
              budget=Budget(gpu_seconds=100), findings=FindingsConfig("static"))
    a = Search(problem, device, **kw)
    a.run(steps=3)
    b = Search(problem, device, **kw)
    assert [n.findings for n in b.tree.nodes.values()] == [n.findings for n in a.tree.nodes.values()]
    assert b.memory.findings == a.memory.findings and a.memory.findings
    back = SearchMemory.from_json(a.memory.to_json())
    assert back.findings == a.memory.findings
    assert "finding:" in back.render()


def test_counters_mode_needs_a_gpu_or_a_collector(replay):
    problem, device = replay
    with pytest.raises(ValueError, match="live CUDA device"):
        Search(problem, device, proposer=RecordedProposer.from_dataset(problem), findings=FindingsConfig("ncu"))
    with pytest.raises(ValueError, match="findings must be one of"):
        Search(problem, device, proposer=RecordedProposer.from_dataset(problem),
               findings=FindingsConfig("everything"))
    with pytest.raises(ValueError, match="guided_share"):
        Search(problem, device, proposer=RecordedProposer.from_dataset(problem),
               findings=FindingsConfig("static", guided_share=2.0))


def test_counters_feed_the_tools_and_are_charged_as_profiling(replay):
    """The counter path with a collector standing in for ncu (which needs a GPU): shared-memory bank conflicts (a
    counters-only tool the roofline picks for a GEMM) reach the findings, and the collector's time is charged to the
    "profile" stage."""
    problem, device = replay
    seen = []

    def counters(prob, cand):
        seen.append(cand.hash)
        return {"_g0_gemm_kernel": {"l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum": 600.0,
                                    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum": 1000.0}}

    s = Search(problem, device, proposer=RecordedProposer.from_dataset(problem), seed=0,
               findings=FindingsConfig("ncu", counters=counters), budget=Budget(gpu_seconds=2.0))
    s.run(steps=3)
    measured = [n for n in s.tree.nodes.values() if n.status == "measured"]
    assert seen == [n.candidate for n in measured] and s.budget.spent["profile"] > 0
    assert all(any(f["tool"] == "bank_conflicts" and f["move"] == "swizzle_shared" for f in n.findings)
               for n in measured)


def test_make_search_passes_the_findings_option(replay):
    from workbench.search.search import make_search

    problem, device = replay
    s = make_search(problem, device, offline=RecordedProposer.from_dataset(problem),
                    findings=FindingsConfig("static", guided_share=0.25), budget=Budget(gpu_seconds=1.0))
    s.run(steps=2)
    assert s.diagnosis.mode == "static" and s.findings.guided_share == 0.25
    assert s.tree.root.findings is not None
