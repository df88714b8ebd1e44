"""GRPO fine-tuning of a forecaster (`workbench llm train-rl`, workbench/llm/train_rl.py).

The reward functions are checked by hand on written completions (no training library needed). The end-to-end test
builds a tiny randomly-initialised Llama and a word-level tokenizer inside the test (nothing downloaded), exports
pairs from a store, and runs two GRPO steps through the command line. The tokenizer's vocabulary holds whole forecast
JSON objects as single words, so even a random model writes some readable forecasts and some prose: the group's
rewards differ, GRPO has an advantage to follow, and the weights must move. It skips only without the [rl] extra.
"""
from __future__ import annotations

import importlib.util
import json
import math

import pytest

from workbench.cli import main
from workbench.core.outcomes import BINS
from workbench.llm import rewards
from workbench.llm.train_rl import UNPARSABLE, ForecastReward, completion_text, load_pairs, reward_functions

RL_MISSING = [m for m in ("trl", "transformers", "datasets", "accelerate") if importlib.util.find_spec(m) is None]
needs_rl = pytest.mark.skipif(bool(RL_MISSING), reason=f"the [rl] extra is not installed (missing {RL_MISSING}): "
                                                       "pip install -e '.[rl]'")


def answer(label: str) -> str:
    return json.dumps({"probabilities": {label: 1}}, separators=(",", ":"))


def test_rewards_by_hand():
    fast, half = answer("[1,2)"), json.dumps({"probabilities": {"[0.5,1)": 0.5, "[1,2)": 0.5}})
    chat = [{"role": "assistant", "content": [{"type": "text", "text": half}]}]
    junk = "I would need to profile it."
    out = {f.name: f([None] * 4, [fast, fast, chat, junk], outcome=["[1,2)", "fails", "[1,2)", "[1,2)"])
           for f in reward_functions(["brier", "rps", "log", "correctness"])}
    assert out["brier"] == pytest.approx([0.0, -2.0, -0.5, -3.0])
    # fails sits below every bin: all mass on [1,2) when it failed is 7 of the 8 cut points away
    assert out["rps"] == pytest.approx([0.0, -7 / 8, -0.25 / 8, -2.0])
    assert out["log"] == pytest.approx([0.0, math.log(1e-4), math.log(0.5), math.log(1e-4) - 1])
    assert out["correctness"] == pytest.approx([1.0, 0.0, 1.0, -1.0])
    assert out["rps"][2] == pytest.approx(-rewards.rps([0, 0, 0, 0, 0, 0.5, 0.5, 0, 0], BINS.index("[1,2)")))
    for name, unreadable in UNPARSABLE.items():  # below the worst readable score on every scale
        worst = ForecastReward(name)([None], [answer("<-2")], outcome=["fails"])[0]
        assert unreadable < worst
    f = ForecastReward("brier")
    f(None, [fast, junk, junk], outcome=["fails"] * 3)
    assert (f.scored, f.unparsable) == (1, 2) and f.__name__ == "brier"
    assert completion_text([{"role": "assistant", "content": "a"}, {"content": "b"}]) == "ab"


def test_bad_reward_input():
    with pytest.raises(ValueError, match="unknown reward"):
        reward_functions(["brier", "accuracy"])
    with pytest.raises(ValueError, match="named twice"):
        reward_functions(["rps", "rps"])
    with pytest.raises(ValueError, match="outcome"):
        ForecastReward("rps")(None, [answer("fails")])
    with pytest.raises(ValueError, match="not one of"):
        ForecastReward("rps")(None, [answer("fails")], outcome=["2x"])


def test_load_pairs_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "fast"}]}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1: the assistant message is not the exported outcome JSON"):
        load_pairs(bad)
    bad.write_text("not json\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: not JSON"):
        load_pairs(bad)
    with pytest.raises(ValueError, match="no pairs file"):
        load_pairs(tmp_path / "absent.jsonl")


def exported_pairs(tmp_path):
    """Two measured evaluations (one 3x faster, one failed) exported exactly as `workbench llm export` does."""
    from workbench.core.candidate import Candidate
    from workbench.core.records import FAIL, PASS, Evaluation, StageRecord
    from workbench.problems import Problem
    from workbench.store import Store

    problem = Problem.load("scale_shift_relu", ["batch_size=8", "dim=16"])
    store = Store(tmp_path / "store.sqlite")
    store.put_problem(problem)
    fast, broken = Candidate("class ModelNew: 'fast'"), Candidate("class ModelNew: 'broken'")
    for c in (fast, broken):
        store.put_candidate(c)
    timed = {"speedup_vs_eager": 3.0, "speedup_vs_compile": 1.5, "candidate_ms": 1.0, "eager_ms": 3.0}
    ok = [StageRecord(n, PASS) for n in ("static", "compile", "correctness")]
    store.put_evaluation(Evaluation(problem.key, fast.hash, "cuda:NVIDIA H200",
                                    ok + [StageRecord("quick_timing", PASS, data=timed)], {}))
    store.put_evaluation(Evaluation(problem.key, broken.hash, "cuda:NVIDIA H200",
                                    ok[:2] + [StageRecord("correctness", FAIL, reason="wrong answer")], {}))
    store.close()
    out = tmp_path / "pairs.jsonl"
    assert main(["llm", "export", "--store", str(tmp_path / "store.sqlite"), "--out", str(out)]) == 0
    return out


def tiny_model(path):
    """A 2-layer Llama over a word-level vocabulary: chat markers, the nine one-hot forecasts, two junk words."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = ["<pad>", "<eos>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>"] + [answer(b) for b in BINS] + \
        ["maybe", "slow"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    tokenizer.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
                               "{% if add_generation_prompt %}<|assistant|> {% endif %}")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(words), hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                         max_position_embeddings=2048, pad_token_id=0, eos_token_id=1,
                                         bos_token_id=None))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return {k: v.clone() for k, v in model.state_dict().items()}


@needs_rl
def test_grpo_end_to_end_on_a_tiny_model(tmp_path, capsys):
    import torch
    from transformers import AutoModelForCausalLM

    pairs = exported_pairs(tmp_path)
    assert [r["outcome"] for r in load_pairs(pairs)] == ["[1,2)", "fails"]
    before = tiny_model(tmp_path / "model")
    capsys.readouterr()
    rc = main(["llm", "train-rl", "--model", str(tmp_path / "model"), "--data", str(pairs), "--out",
               str(tmp_path / "tuned"), "--steps", "2", "--num-generations", "4", "--batch-size", "4", "--lr", "0.05",
               "--max-completion-tokens", "3", "--rewards", "brier,rps,log,correctness", "--json"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == 2 and summary["pairs"] == 2
    for name in ("brier", "rps", "log", "correctness"):
        # every completion (2 steps x 4) went through every reward function, read or not
        assert summary["scored"][name] + summary["unparsable"][name] == 8
        assert summary["scored"][name] > 0
        logged = [e[f"rewards/{name}/mean"] for e in summary["log_history"] if f"rewards/{name}/mean" in e]
        assert len(logged) == 2 and all(UNPARSABLE[name] <= v <= 1.0 for v in logged)
    assert -3.0 <= summary["last"]["rewards/brier/mean"] <= 0.0
    assert any(e.get("reward_std", 0) > 0 for e in summary["log_history"])  # the group's rewards differed
    tuned = AutoModelForCausalLM.from_pretrained(tmp_path / "tuned", local_files_only=True).state_dict()
    changed = [k for k, v in before.items() if not torch.allclose(v, tuned[k])]
    assert changed, "GRPO left every weight where it was"


@needs_rl
def test_train_rl_refuses_bad_input(tmp_path, capsys):
    pairs = exported_pairs(tmp_path)
    assert main(["llm", "train-rl", "--model", str(tmp_path / "nomodel"), "--data", str(pairs), "--out",
                 str(tmp_path / "o")]) == 2
    assert "not a local model directory" in capsys.readouterr().err
    tiny_model(tmp_path / "model")
    assert main(["llm", "train-rl", "--model", str(tmp_path / "model"), "--data", str(pairs), "--out",
                 str(tmp_path / "o"), "--num-generations", "3", "--batch-size", "4"]) == 2
    assert "multiple of num_generations" in capsys.readouterr().err
