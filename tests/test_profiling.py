"""Profiler expert tools on the CPU: hand-computed cases for every expert (a positive and a negative each), the
roofline classification, occupancy, PTX/SASS reading, the ncu CSV parser and missing-ncu paths, the energy arithmetic
with a fake NVML counter, Finding rendering, and `workbench profile` end to end (compile-stage reading, no counters).
Counters (ncu) and NVML energy themselves need the H200."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.devices import cuda_gpu_count
from workbench.profiling import energy, experts, ncu
from workbench.profiling.experts import Context, diagnose
from workbench.profiling.findings import Finding, ProfilerUnavailable, moves, render
from workbench.profiling.roofline import classify, tools_for
from workbench.profiling.static_reading import occupancy, read_kernel, read_ptx, read_sass, read_static

ROOT = Path(__file__).resolve().parents[1]
CEIL = {"device": "Test GPU", "copy_gbps": 1000.0, "tflops": {"bf16": 100.0, "fp32": 10.0}, "sm_count": 132}


# ---------------------------------------------------------------- findings

def test_finding_render_most_severe_first_and_round_trip():
    fs = [Finding("a", "minor thing", "info", {"x": 1.5}, "Look.", None),
          Finding("b", "bad thing", "critical", {"y": 2}, "Fix it.", "fuse_epilogue", "k1"),
          Finding("c", "middling", "warning", {}, "Consider.", "increase_block")]
    text = render(fs, limit=2)
    lines = [line for line in text.splitlines() if line.startswith("- ")]
    assert lines[0].startswith("- CRITICAL [k1] bad thing (move: fuse_epilogue)") and "WARNING" in lines[1]
    assert "evidence: y=2" in text and "1 more finding" in text and "minor thing" not in text
    assert moves(fs) == ["fuse_epilogue", "increase_block"]
    assert Finding.from_dict(fs[1].to_dict()) == fs[1]
    assert render([]).startswith("No findings")
    with pytest.raises(ValueError):
        Finding("a", "t", "severe", {}, "x")


# ---------------------------------------------------------------- roofline

def test_roofline_memory_compute_latency_and_unmeasured():
    v = classify(0, 10**9, 2.0, CEIL, "bf16")  # 1 GB in 2 ms = 500 GB/s = 50 % of 1000
    assert v.bound == "memory" and v.measured and v.achieved_gbps == pytest.approx(500)
    assert v.bw_fraction == pytest.approx(0.5) and v.floor_ms == pytest.approx(1.0) and v.headroom == pytest.approx(2)
    v = classify(10**12, 10**8, 20.0, CEIL, "bf16")  # 1 TFLOP in 20 ms = 50 TFLOP/s = 50 % of 100
    assert v.bound == "compute" and v.compute_fraction == pytest.approx(0.5) and v.floor_bound == "compute"
    assert v.floor_ms == pytest.approx(10.0)
    v = classify(0, 10**6, 0.01, CEIL, "bf16")  # 1 MB in 10 us = 100 GB/s = 10 %: neither ceiling is near
    assert v.bound == "latency" and v.short
    v = classify(0, 10**9, None, CEIL, "bf16")
    assert not v.measured and v.bound == "memory" and v.bw_fraction is None
    assert "faster than the floor" in classify(0, 10**9, 0.5, CEIL, "bf16").reason
    with pytest.raises(KeyError):
        classify(1, 1, 1.0, CEIL, "fp16")


def test_tools_for_follows_the_verdict():
    mem = tools_for(classify(0, 10**9, 2.0, CEIL, "bf16"))
    assert mem[0] == "spills" and {"coalescing", "fusion", "bandwidth"} <= set(mem) and "tensor_cores" not in mem
    comp = tools_for(classify(10**12, 10**8, 20.0, CEIL, "bf16"))
    assert comp[:2] == ["spills", "tensor_cores"] and "l2_reuse" in comp and "coalescing" not in comp
    lat = tools_for(classify(0, 10**6, 0.01, CEIL, "bf16"))
    assert "launch" in lat and "coalescing" in lat  # a memory problem that is latency-bound: bytes in flight
    near = tools_for(classify(0, 10**9, 1.05, CEIL, "bf16"))  # 95 % of bandwidth: only fewer bytes help
    assert near == ["spills", "bandwidth", "fusion"]


# ---------------------------------------------------------------- static reading

PTX = """
.visible .entry k(
	.param .u64 k_param_0
)
{
	.reg .b32 	%r<10>;
	ld.param.u64 	%rd1, [k_param_0];
	@%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];
	ld.global.v2.b32 	{%r5, %r6}, [%rd2];
	@!%p2 ld.global.b32 	%r7, [%rd3];
	ld.global.nc.b16 	%rs1, [%rd4];
	cp.async.cg.shared.global [ %r8 + 0 ], [ %rd5 + 0 ], 0x10, %r9;
	st.global.b32 	[%rd6], %r7;
	st.local.b32 	[%rd7], %r1;
	ld.local.b32 	%r2, [%rd7];
	bar.sync 	0;
	wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%r1,%r2}, %rd8, %rd9, %p3, 1, 1, 0, 1;
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1,%f2}, {%r1}, {%r2}, {%f1,%f2};
	fma.rn.f32 	%f1, %f2, %f3, %f4;
	add.s32 	%r1, %r2, %r3;
	// ld.global.v4.b32 in a comment is not an instruction
$L__BB0_1:
	ret;
}
"""

SASS = """
        /*0000*/                   LDC R1, c[0x0][0x28] ;                 /* 0x00000a00ff017b82 */
        /*0010*/              @!P0 LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0020*/                   LDG.E.64 R8, desc[UR4][R2.64+0x10] ;
        /*0030*/                   LDG.E R10, desc[UR4][R2.64+0x20] ;
        /*0040*/                   LDG.E.U16 R11, desc[UR4][R2.64+0x30] ;
        /*0050*/                   LDGSTS.E.BYPASS.128 [R12], desc[UR4][R2.64] ;
        /*0060*/                   STG.E.128 desc[UR4][R6.64], R4 ;
        /*0070*/                   STL [R1], R4 ;
        /*0080*/                   LDL R5, [R1] ;
        /*0090*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*00a0*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24 ;
        /*00b0*/                   HMMA.16816.F32.BF16 R30, R12, R14, R30 ;
        /*00c0*/                   FFMA R1, R2, R3, R4 ;
        /*00d0*/                   UIADD3 UR4, UR4, 0x1, URZ ;
        /*00e0*/              @!PT LDS RZ, [RZ] ;
        /*00f0*/                   EXIT ;
"""


def test_read_ptx_counts_widths_and_mix():
    r = read_ptx(PTX)
    assert r["global_loads"] == {128: 2, 64: 1, 32: 1, 16: 1}  # v4.b32 and a 16-byte cp.async are both 128 bits
    assert r["global_stores"] == {32: 1}
    assert r["vector_load_fraction"] == pytest.approx(3 / 5) and r["wide_load_fraction"] == pytest.approx(2 / 5)
    keys = ("cp_async", "local_loads", "local_stores", "barriers", "wgmma", "mma")
    assert [r[k] for k in keys] == [1] * 6
    assert r["mix"] == {"global_memory": 6, "local_memory": 2, "tensor": 2, "param": 1, "sync": 1, "fp32": 1,
                        "int": 1, "control": 1}


def test_read_sass_counts_widths_and_skips_never_executed():
    r = read_sass(SASS)
    assert r["global_loads"] == {128: 2, 64: 1, 32: 1, 16: 1} and r["global_stores"] == {128: 1}
    keys = ("cp_async", "local_loads", "local_stores", "barriers", "wgmma", "mma")
    assert [r[k] for k in keys] == [1] * 6
    assert r["shared_loads"] == 0  # `@!PT LDS` never runs
    assert r["mix"] == {"global_memory": 6, "local_memory": 2, "tensor": 2, "move": 1, "sync": 1, "fp32": 1,
                        "int": 1, "control": 1}


@pytest.mark.parametrize("regs,threads,smem,blocks,warps,limiter", [
    (30, 256, 0, 8, 64, "warps"),          # 30 regs -> 1024 per warp; 16 warps per sub-partition; 64 warps cap
    (255, 128, 0, 2, 8, "registers"),      # 8160 -> 8192 per warp: 2 warps per sub-partition, 8 per SM
    (200, 256, 147456, 1, 8, "registers"),  # 6400 per warp -> 8 warps per SM; 148480 B shared -> 1 block too
    (32, 128, 100 * 1024, 2, 8, "shared"),  # (102400 + 1024 reserved) -> 2 blocks in 228 KB
    (64, 1024, 0, 1, 32, "registers"),     # 2048 per warp -> 8 per sub-partition -> 32 warps = one block
    (16, 32, 0, 32, 32, "blocks"),         # one-warp blocks stop at 32 blocks per SM
    (255, 1024, 0, 0, 0, "registers"),     # 255 x 1024 registers do not fit a block at all
])
def test_occupancy_sm90_hand_computed(regs, threads, smem, blocks, warps, limiter):
    o = occupancy(regs, threads, smem)
    assert (o.blocks_per_sm, o.warps_per_sm, o.limiter) == (blocks, warps, limiter)
    assert o.occupancy == pytest.approx(warps / 64)


def test_read_kernel_from_compile_record_and_text():
    rec = {"kernel": "k", "num_warps": 4, "num_stages": 2, "shared_bytes": 0, "reg": 40, "stack": 16, "local": 0,
           "constexprs": {"BLOCK": 1024}, "ld_global_v4": True, "wgmma": False, "mma": False, "grid": [64, 2, 1]}
    r = read_kernel(rec)
    assert r["access"]["source"] == "compile facts" and r["blocks"] == 128 and r["spills"] and r["threads"] == 128
    r = read_kernel({**rec, "stack": 0}, ptx=PTX, sass=SASS)
    assert r["access"]["source"] == "sass" and r["tensor_cores"] == "wgmma" and r["ptx"]["wgmma"] == 1
    s = read_static([rec, {**rec, "kernel": "j", "static": {"kernel": "j", "tensor_cores": "mma"}}])
    assert s["n_kernels"] == 2 and s["kernel_names"] == ["j", "k"] and s["tensor_cores"] == ["mma"]
    tuned = read_static([rec, {**rec, "num_warps": 8}, {**rec, "num_warps": 2}])  # one kernel, three configs
    assert (tuned["n_kernels"], tuned["n_builds"]) == (1, 3)


# ---------------------------------------------------------------- expert tools

def kern(**kw):
    """A static reading of one kernel, defaults: a healthy 256-thread elementwise kernel."""
    k = read_kernel({"kernel": kw.pop("name", "k"), "num_warps": kw.pop("warps", 8), "reg": kw.pop("regs", 32),
                     "shared_bytes": kw.pop("smem", 0), "stack": kw.pop("stack", 0), "num_stages": 3,
                     "constexprs": kw.pop("constexprs", {}), "grid": kw.pop("grid", [65536, 1, 1])})
    k["access"].update(kw.pop("access", {}))
    k.update(kw)
    return k


MEM = Context(min_bytes=10**9, eager_bytes=3 * 10**9, bound="memory", floor_bound="memory", ms=1.0)
GEMM = Context(flops=10**12, min_bytes=10**8, compute_dtype="bf16", bound="compute", floor_bound="compute", ms=20.0)


def test_coalescing():
    f = experts.coalescing({"smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct": 25.0}, kern(), MEM)
    assert len(f) == 1 and f[0].severity == "critical" and f[0].move == "coalesce_access"
    narrow = kern(access={"global_loads": {32: 4}, "vector_load_fraction": 0.0})
    f = experts.coalescing({}, narrow, MEM)
    assert f[0].move == "vectorize_loads" and f[0].severity == "warning"
    # sectors per request: 32-bit loads touch 4 sectors per warp when coalesced; 32 is eight times that
    f = experts.coalescing({"l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": 3200.0,
                            "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": 100.0}, narrow, GEMM)
    assert f[0].evidence["bytes_per_sector_pct"] == pytest.approx(12.5)
    assert experts.coalescing({"smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct": 95.0},
                              kern(access={"vector_load_fraction": 1.0}), MEM) == []
    assert experts.coalescing({}, narrow, GEMM) == []  # narrow loads do not matter on a compute-bound kernel


def test_occupancy_tool():
    f = experts.occupancy({}, kern(regs=255, warps=4), MEM)
    assert f[0].severity == "warning" and f[0].move == "reduce_registers" and f[0].evidence["limiter"] == "registers"
    f = experts.occupancy({}, kern(regs=32, warps=4, smem=100 * 1024), MEM)
    assert f[0].move == "reduce_num_stages"
    f = experts.occupancy({}, kern(regs=200, warps=8, smem=147456, tensor_cores="wgmma"), GEMM)
    assert f[0].severity == "info"  # a Hopper GEMM runs one big block per SM by design
    f = experts.occupancy({"sm__warps_active.avg.pct_of_peak_sustained_active": 30.0}, kern(), MEM)
    assert [x.severity for x in f] == ["info"] and "achieved" in f[0].title
    assert experts.occupancy({"sm__warps_active.avg.pct_of_peak_sustained_active": 90.0}, kern(), MEM) == []


def test_spills():
    assert experts.spills({}, kern(stack=3160), GEMM)[0].severity == "critical"
    f = experts.spills({}, kern(stack=64), GEMM)
    assert f[0].severity == "warning" and f[0].move == "reduce_registers"
    assert experts.spills({}, kern(), GEMM) == []


def test_bank_conflicts():
    m = {"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": 500.0,
         "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": 100.0,
         "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": 800.0,
         "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum": 200.0}
    f = experts.bank_conflicts(m, kern(), GEMM)
    assert f[0].severity == "critical" and f[0].evidence["conflict_ratio"] == pytest.approx(0.6)
    assert f[0].move == "swizzle_shared"
    m = {"l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum": 250.0,
         "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum": 1000.0}
    assert experts.bank_conflicts(m, kern(), GEMM)[0].severity == "warning"
    m["l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"] = 10.0
    assert experts.bank_conflicts(m, kern(), GEMM) == [] and experts.bank_conflicts({}, kern(), GEMM) == []


def test_tail():
    f = experts.tail({}, kern(grid=[66, 1, 1], tensor_cores="wgmma"), GEMM)  # 66 blocks on 132 SMs
    assert f[0].severity == "warning" and f[0].move == "split_k"
    f = experts.tail({"launch__grid_size": 20.0}, kern(), MEM)
    assert f[0].severity == "critical" and f[0].move == "decrease_block"
    # 8 blocks per SM x 132 SMs = 1056 slots; 1162 blocks = 1.1 waves, the second wave 10 % full
    f = experts.tail({}, kern(grid=[1162, 1, 1]), MEM)
    assert f[0].move == "persistent" and f[0].evidence["waves"] == pytest.approx(1162 / 1056)
    assert f[0].evidence["idle_fraction"] == pytest.approx((2 - 1162 / 1056) / 2)
    assert experts.tail({}, kern(grid=[65536, 1, 1]), MEM) == []
    assert experts.tail({}, kern(grid=[1056 * 3, 1, 1]), MEM) == []  # whole waves


def test_tensor_cores():
    s = read_static([{"kernel": "mm", "num_warps": 4, "reg": 64}])
    f = experts.tensor_cores({}, s, GEMM)
    assert f[0].severity == "critical" and f[0].move == "use_tensor_cores"
    fp32 = Context(flops=10**12, compute_dtype="fp32")
    assert experts.tensor_cores({}, s, fp32)[0].severity == "info"  # strict fp32 may not use tf32
    mma = read_static([{"kernel": "mm", "num_warps": 4, "reg": 64, "mma": True}])
    assert experts.tensor_cores({}, mma, GEMM)[0].move == "use_wgmma"
    wg = read_static([{"kernel": "mm", "num_warps": 4, "reg": 64, "wgmma": True}])
    assert experts.tensor_cores({}, wg, GEMM) == [] and experts.tensor_cores({}, s, MEM) == []


def test_launch():
    three = {"kernels": [kern(name=n) for n in "abc"], "n_kernels": 3}
    short = Context(min_bytes=10**6, bound="latency", ms=0.01, short=True)
    f = experts.launch({}, three, short)
    assert f[0].move == "fuse_kernels" and f[0].evidence["kernels"] == 3
    tiny = {"kernels": [kern(grid=[4, 1, 1])], "n_kernels": 1}
    assert experts.launch({}, tiny, short)[0].move == "decrease_block"
    long = Context(min_bytes=10**9, bound="latency", ms=2.0)
    assert experts.launch({}, three, long) == []  # 3 launches are under 1 % of 2 ms
    assert experts.launch({}, {"kernels": [kern()], "n_kernels": 1}, short) == []  # enough blocks


def test_fusion():
    one = {"kernels": [kern()], "n_kernels": 1}
    f = experts.fusion({"k": {"dram__bytes_read.sum": 2e9, "dram__bytes_write.sum": 1e9}}, one, MEM)
    assert f[0].severity == "critical" and f[0].evidence["ratio"] == pytest.approx(3.0)
    two = {"kernels": [kern(name="a"), kern(name="b")], "n_kernels": 2}
    f = experts.fusion({}, two, MEM)  # eager moves 3x the minimum; the candidate launches two kernels
    assert f[0].move == "fuse_kernels" and f[0].evidence["eager_ratio"] == pytest.approx(3.0)
    gemm_then_ew = {"kernels": [kern(name="mm", tensor_cores="wgmma"), kern(name="ew")], "n_kernels": 2}
    assert experts.fusion({}, gemm_then_ew, MEM)[0].move == "fuse_epilogue"
    assert experts.fusion({}, one, MEM) == []
    assert experts.fusion({"k": {"dram__bytes.sum": 1.1e9}}, one, MEM) == []


def test_l2_reuse():
    g1 = kern(tensor_cores="wgmma", constexprs={"GROUP_M": 1}, grid=[2048, 1, 1])
    f = experts.l2_reuse({"lts__t_sector_hit_rate.pct": 30.0}, g1, GEMM)
    assert f[0].severity == "warning" and f[0].move == "swizzle_group_m"
    assert experts.l2_reuse({}, g1, GEMM)[0].severity == "info"  # static only: a hint
    g8 = kern(tensor_cores="wgmma", constexprs={"GROUP_M": 8}, grid=[2048, 1, 1])
    assert experts.l2_reuse({"lts__t_sector_hit_rate.pct": 30.0}, g8, GEMM) == []
    assert experts.l2_reuse({"lts__t_sector_hit_rate.pct": 90.0}, g1, GEMM) == []
    assert experts.l2_reuse({"lts__t_sector_hit_rate.pct": 30.0}, kern(), MEM) == []  # not a GEMM


def test_bandwidth():
    f = experts.bandwidth({"dram__throughput.avg.pct_of_peak_sustained_elapsed": 40.0}, kern(), MEM)
    assert f[0].move == "increase_block" and f[0].severity == "warning"
    f = experts.bandwidth({"dram__throughput.avg.pct_of_peak_sustained_elapsed": 91.0}, kern(), MEM)
    assert f[0].severity == "info" and "91%" in f[0].title
    assert experts.bandwidth({"dram__throughput.avg.pct_of_peak_sustained_elapsed": 40.0}, kern(), GEMM) == []


def test_diagnose_runs_the_verdicts_tools_matches_kernels_and_dedupes():
    verdict = classify(0, 10**9, 2.0, CEIL, "bf16")  # memory-bound at 50 %
    narrow = kern(name="ew", access={"global_loads": {32: 4}, "vector_load_fraction": 0.0})
    static = {"kernels": [narrow, dict(narrow)], "n_kernels": 1, "kernel_names": ["ew"], "tensor_cores": []}
    metrics = {"ew(float*, float*, int)": {"dram__throughput.avg.pct_of_peak_sustained_elapsed": 45.0}}
    found = diagnose(metrics, static, verdict=verdict)
    assert [f.tool for f in found] == ["coalescing", "bandwidth"]  # one per tool: the two configs say the same
    assert found[1].evidence["dram_pct_of_peak"] == 45.0  # counters found under ncu's name with a signature
    assert experts.kernel_metrics(metrics, "other") == {}
    with pytest.raises(KeyError):
        diagnose({}, static, tools=["no_such_tool"])


# ---------------------------------------------------------------- ncu

RAW_CSV = '''==PROF== Connected to process 4242 (/usr/bin/python3.11)
==PROF== Profiling "_k" - 0: 0%....50%....100% - 10 passes
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes_read.sum","dram__throughput.avg.pct_of_peak_sustained_elapsed","gpu__time_duration.sum","launch__grid_size","lts__t_sector_hit_rate.pct"
"","","","","","","","","","","","Mbyte","%","usecond","","%"
"0","4242","python3.11","h200","_k","1","7","(256, 1, 1)","(65536, 1, 1)","0","9.0","2,048.00","91.5","510.5","65,536","12.5"
"1","4242","python3.11","h200","_k","1","7","(256, 1, 1)","(65536, 1, 1)","0","9.0","2,050.00","92.5","509.5","65,536","n/a"
"2","4242","python3.11","h200","_mm","1","7","(256, 1, 1)","(2048, 1, 1)","0","9.0","300.00","40","1,200","2,048","80"
'''

LONG_CSV = '''"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","python","h","_k","1","7","(256, 1, 1)","(64, 1, 1)","0","9.0","Launch Statistics","launch__registers_per_thread","register/thread","30"
"0","1","python","h","_k","1","7","(256, 1, 1)","(64, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Duration","msecond","1.25"
'''


def test_parse_raw_csv():
    m = ncu.parse_csv(RAW_CSV)
    assert set(m) == {"_k", "_mm"} and m["_k"]["launches"] == 2 and m["_mm"]["launches"] == 1
    assert m["_k"]["dram__bytes_read.sum"] == pytest.approx(2049e6)  # Mbyte -> bytes, mean of two launches
    assert m["_k"]["gpu__time_duration.sum"] == pytest.approx(510e3)  # usecond -> nsecond
    assert m["_k"]["launch__grid_size"] == 65536.0 and m["_mm"]["gpu__time_duration.sum"] == pytest.approx(1.2e6)
    assert m["_k"]["lts__t_sector_hit_rate.pct"] == 12.5  # n/a in one launch is absent, not zero
    assert m["_k"]["Block Size"] == "(256, 1, 1)" and m["_mm"]["dram__throughput.avg.pct_of_peak_sustained_elapsed"] == 40
    assert ncu.parse_csv(LONG_CSV)["_k"] == {"launches": 1, "launch__registers_per_thread": 30.0, "Duration": 1.25e6}
    with pytest.raises(ValueError):
        ncu.parse_csv("==PROF== no kernels were profiled\n")
    # one forward per two profiled calls: _k twice (510 us mean), _mm once (1.2 ms) -> 0.51 + 0.6 ms
    assert ncu.forward_ms(m, calls=2) == pytest.approx(0.51 + 0.6)


def test_units_and_values():
    assert ncu.parse_value("1,048,576") == 1048576.0 and ncu.parse_value("n/a") is None
    assert ncu.parse_value("2.5", "Gbyte/second") == 2.5e9 and ncu.parse_value("3", "Kbyte") == 3000.0
    assert ncu.parse_value("4", "byte/usecond") == 4e6 and ncu.parse_value("sm_90", "") == "sm_90"


def test_ncu_command_has_the_sections_and_range():
    cmd = ncu.profile_command("/x/ncu", ["python", "d.py"], "/tmp/r")
    assert cmd[:3] == ["/x/ncu", "--clock-control", "none"] and cmd[-2:] == ["python", "d.py"]
    assert all(s in cmd for s in ncu.SECTIONS) and "workbench_profile/" in cmd
    assert ncu.import_command("ncu", "r.ncu-rep")[3:] == ["--csv", "--page", "raw", "--print-units", "base"]


def test_missing_ncu_and_missing_gpu_are_unavailable(monkeypatch, tmp_path):
    monkeypatch.setattr(ncu.shutil, "which", lambda name: None)
    monkeypatch.setattr(ncu, "SEARCH_PATHS", (str(tmp_path / "nowhere" / "*" / "ncu"),))
    with pytest.raises(ProfilerUnavailable, match="not installed"):
        ncu.find_ncu()
    monkeypatch.setattr(ncu, "cuda_gpu_count", lambda: 0)
    with pytest.raises(ProfilerUnavailable, match="no CUDA GPU"):
        ncu.collect(type("P", (), {"path": "p", "overrides": (), "precision": None})(), "c.py")


def test_counter_permission_error_is_unavailable_with_the_reason(monkeypatch, tmp_path):
    fake = tmp_path / "ncu"  # an ncu that answers as one without counter permission does
    fake.write_text("#!/bin/sh\necho '==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access "
                    "NVIDIA GPU Performance Counters on the target device 0.'\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(ncu, "cuda_gpu_count", lambda: 1)
    monkeypatch.setattr(ncu, "find_ncu", lambda: str(fake))
    problem = type("P", (), {"path": "p.py", "overrides": (), "precision": None})()
    with pytest.raises(ProfilerUnavailable, match="ERR_NVGPUCTRPERM"):
        ncu.collect(problem, tmp_path / "c.py", timeout=30)


def test_collect_runs_ncu_then_reads_its_csv(monkeypatch, tmp_path):
    """The collection path with a stand-in ncu: it writes the report file the profiling call asks for and answers
    `--import` with a recorded raw CSV, so the command, the report check and the parsing run for real."""
    (tmp_path / "raw.csv").write_text(RAW_CSV)
    fake = tmp_path / "ncu"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do [ "$a" = "--import" ] && cat "$FAKE_NCU_CSV" && exit 0; done\n'
                    'while [ $# -gt 0 ]; do [ "$1" = "--export" ] && : > "$2.ncu-rep"; shift; done\nexit 0\n')
    fake.chmod(0o755)
    monkeypatch.setenv("FAKE_NCU_CSV", str(tmp_path / "raw.csv"))
    monkeypatch.setattr(ncu, "cuda_gpu_count", lambda: 1)
    monkeypatch.setattr(ncu, "find_ncu", lambda: str(fake))
    problem = type("P", (), {"path": "p.py", "overrides": (("N", "4"),), "precision": None})()
    metrics = ncu.collect(problem, tmp_path / "c.py", timeout=30)
    assert set(metrics) == {"_k", "_mm"} and metrics["_k"]["launches"] == 2


# ---------------------------------------------------------------- energy

class FakeGPU:
    """A test double for the GPU: a clock, and an energy counter (mJ) that idles at `idle_w` and adds `call_j` per
    call of 'work' taking `call_s`; `step_s` quantises the counter like NVML's periodic update."""

    def __init__(self, idle_w=60.0, call_j=0.002, call_s=1e-4, step_s=0.0):
        self.t, self.mj, self.idle_w, self.call_j, self.call_s, self.step_s = 0.0, 0.0, idle_w, call_j, call_s, step_s
        self.calls = 0

    def work(self):
        self.t += self.call_s
        self.mj += (self.idle_w * self.call_s + self.call_j) * 1e3
        self.calls += 1

    def sleep(self, s):
        self.t += s
        self.mj += self.idle_w * s * 1e3

    def counter(self):
        if not self.step_s:
            return self.mj
        return self.mj - (self.t % self.step_s) * self.idle_w * 1e3  # value at the last update

    def clock(self):
        return self.t


def test_energy_per_call_subtracts_idle_power():
    g = FakeGPU()
    r = energy.measure_energy(g.work, 1.0, 3, counter=g.counter, sync=lambda: None, clock=g.clock, sleep=g.sleep)
    assert abs(r.calls_per_window - 10_000) <= 1 and len(r.per_repeat) == 3  # 1 s of 0.1 ms calls
    assert r.joules_per_call == pytest.approx(0.002, rel=1e-9) and r.spread == pytest.approx(0.0, abs=1e-9)
    assert r.idle_watts == pytest.approx(60.0) and r.total_joules_per_call == pytest.approx(0.002 + 60 * 1e-4)
    assert r.busy_watts == pytest.approx(0.002 / 1e-4 + 60) and r.window_s >= 1.0


def test_energy_window_is_long_enough_when_the_gpu_boosts_after_calibration():
    """Calibrated at an idle clock, the calls then run 4x faster: the window is topped up to its promised length and
    the per-call numbers divide by the calls that actually ran."""
    g = FakeGPU(call_s=4e-4)
    real_work = g.work

    def work():
        real_work()
        if g.calls == 600:  # past calibration (512 calls): the clock boosts
            g.call_s = 1e-4
    r = energy.measure_energy(work, 1.0, 3, counter=g.counter, sync=lambda: None, clock=g.clock, sleep=g.sleep)
    assert r.window_s >= 1.0 and r.seconds_per_call == pytest.approx(1e-4, rel=0.05)
    assert r.joules_per_call == pytest.approx(0.002, rel=1e-6)


def test_energy_windows_absorb_a_coarse_counter():
    g = FakeGPU(step_s=0.02)  # the counter moves every 20 ms: a 1 s window keeps the error near 2 %
    r = energy.measure_energy(g.work, 1.0, 3, counter=g.counter, sync=lambda: None, clock=g.clock, sleep=g.sleep)
    assert r.joules_per_call == pytest.approx(0.002, rel=0.1)


def test_energy_objective_and_unavailable(monkeypatch):
    assert energy.objective(0.002, 0.5, "time") == 0.002 and energy.objective(0.002, 0.5, "energy") == 0.5
    assert energy.objective(0.002, 0.5, "edp") == pytest.approx(0.001)
    with pytest.raises(ValueError):
        energy.objective(0.002, 0.5, "power")
    with pytest.raises(ValueError):
        energy.objective(0.002, None, "edp")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML bindings installed
    with pytest.raises(ProfilerUnavailable, match="nvidia-ml-py"):
        energy.nvml_counter()


# ---------------------------------------------------------------- the command line

def test_cli_profile_on_cpu(tmp_path):
    # on a GPU machine the counters are left out, so this stays a CPU test there too (ncu replays take minutes)
    extra = ["--no-counters"] if cuda_gpu_count() else []
    asm = tmp_path / "asm"  # written by this process: the compile worker's file system is read-only
    r = subprocess.run([sys.executable, "-m", "workbench.cli", "profile", "scale_shift_relu",
                        "workbench/examples/scale_shift_relu_triton.py", "--json", "--asm-dir", str(asm), *extra],
                       capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert sorted(p.name for p in asm.iterdir()) == ["_scale_shift_relu_0.ptx", "_scale_shift_relu_0.sass"]
    assert ".target sm_90" in (asm / "_scale_shift_relu_0.ptx").read_text()
    assert "LDG.E.128" in (asm / "_scale_shift_relu_0.sass").read_text()
    assert "ld.global" not in r.stdout  # the text went to the files, not into the compile facts
    assert {"roofline", "static", "findings", "counters"} <= set(out)
    assert out["compile"]["verdict"] == "pass" and out["roofline"]["bound"] == "memory"
    k = out["static"]["kernels"][0]
    assert k["kernel"] == "_scale_shift_relu" and k["access"]["source"] == "sass"
    assert k["access"]["global_loads"] == {"128": 4} and k["occupancy"]["occupancy"] == 1.0
    assert k["blocks"] == math.ceil(out["counts"]["min_bytes"] // 8 / 4096)  # fp32 in and out, BLOCK=4096
    assert all(f["severity"] != "critical" for f in out["findings"])  # the shipped example is a good kernel
    assert out["counters"]["available"] is False and out["counters"]["metrics"] == {}
    if not extra:
        assert "counters unavailable" in out["counters"]["reason"] and "GPU" in out["counters"]["reason"]
