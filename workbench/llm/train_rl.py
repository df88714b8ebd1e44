"""Fine-tuning a local causal LM as a runtime forecaster with GRPO (TRL), rewarded by calibration scores.

Needs the `[rl]` extra (trl, transformers, accelerate, datasets; verified with trl 1.16.0, transformers 5.24.0,
accelerate 1.15.0, datasets 5.2.0 on torch 2.13.0 CPU; not yet run on a GPU). `workbench llm train-rl --model DIR
--data pairs.jsonl --out DIR` is the command line; `train(...)` the same from Python.

Data: the chat-format JSONL of `workbench llm export` (`rewards.export_pairs`). Each line's system and user messages
are the prompt, exactly the LLM surrogate's; the assistant message is the measured outcome as JSON, which becomes the
`outcome` column the rewards read (the assistant answer itself is never shown to the model: GRPO samples its own).

Rewards (higher is better), one function per name, built on `rewards.py`; each reads a completion with
`parsing.extract_forecast`, the parser the live surrogate uses:
- "brier": -Brier (0 best, -2 worst readable); "rps": -ranked probability score (0 .. -1), which values near misses
  over far ones on the ordinal bins; "log": the log score, floored at ln(1e-4) so one confident miss does not swamp a
  group's advantages; "correctness": the probability given to the right side of pass/fail (0 .. 1).
- A completion with no readable forecast gets `UNPARSABLE[name]`, one unit below the worst readable score on that
  scale, so any readable forecast is preferred to none.
The defaults (brier, rps, correctness) favour calibration-shaped rewards: correctness alone did not help in the
work this follows; calibration-shaped ones did.

The model is a local directory only (`local_files_only`): nothing is downloaded. Its tokenizer must have a chat
template, since prompts are chat messages. The fine-tuned model and tokenizer are saved to `out`.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from ..core.outcomes import BINS
from .parsing import extract_forecast
from .rewards import brier, correctness_reward, log_score, rps

LOG_FLOOR = 1e-4
SCORES: dict[str, Callable[[Sequence[float], int], float]] = {
    "brier": lambda p, o: -brier(p, o),
    "rps": lambda p, o: -rps(p, o),
    "log": lambda p, o: log_score(p, o, floor=LOG_FLOOR),
    "correctness": lambda p, o: correctness_reward(p, failed=o == len(BINS) - 1),
}
UNPARSABLE = {"brier": -3.0, "rps": -2.0, "log": math.log(LOG_FLOOR) - 1.0, "correctness": -1.0}
DEFAULT_REWARDS = ("brier", "rps", "correctness")
RL_EXTRA = "the [rl] extra is not installed (pip install 'workbench[rl]': trl, transformers, accelerate, datasets)"


def completion_text(completion: Any) -> str:
    """The text of a completion: a string, or chat messages (their assistant contents, which may be parts)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    parts = []
    for m in completion or []:
        content = m.get("content", "") if isinstance(m, dict) else str(m)
        if isinstance(content, list):
            content = "".join(c.get("text", "") for c in content if isinstance(c, dict))
        parts.append(str(content))
    return "".join(parts)


class ForecastReward:
    """One reward function in TRL's shape: (prompts, completions, outcome, **kwargs) -> one float per completion.
    Counts the completions it scored and those it could not read."""

    def __init__(self, name: str):
        if name not in SCORES:
            raise ValueError(f"unknown reward {name!r}; choose from {sorted(SCORES)}")
        self.name = self.__name__ = name  # TRL logs a reward under its function's __name__
        self.scored = self.unparsable = 0

    def __call__(self, prompts: Any = None, completions: Sequence[Any] | None = None,
                 outcome: Sequence[str] | None = None, **_: Any) -> list[float]:
        if completions is None or outcome is None:
            raise ValueError(f"reward {self.name} needs the completions and the data's 'outcome' column")
        if len(completions) != len(outcome):
            raise ValueError(f"reward {self.name}: {len(completions)} completions for {len(outcome)} outcomes")
        out = []
        for c, o in zip(completions, outcome):
            if o not in BINS:
                raise ValueError(f"outcome {o!r} is not one of {list(BINS)}")
            got = extract_forecast(completion_text(c))
            if got.probs is None:
                self.unparsable += 1
                out.append(UNPARSABLE[self.name])
            else:
                self.scored += 1
                out.append(float(SCORES[self.name](got.probs, BINS.index(o))))
        return out


def reward_functions(names: Sequence[str] = DEFAULT_REWARDS) -> list[ForecastReward]:
    names = [n.strip() for n in names if n.strip()]
    if not names:
        raise ValueError(f"no reward named; choose from {sorted(SCORES)}")
    if len(set(names)) != len(names):
        raise ValueError(f"a reward is named twice: {names}")
    return [ForecastReward(n) for n in names]


def load_pairs(path: str | Path) -> list[dict[str, Any]]:
    """Rows {"prompt": [system, user], "outcome": label, "log2_speedup": x or None} from exported JSONL."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ValueError(f"no pairs file at {p} (write one with `workbench llm export`)")
    rows = []
    for n, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        where = f"{p}:{n}"
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise ValueError(f"{where}: not JSON ({e})") from None
        msgs = obj.get("messages") if isinstance(obj, dict) else None
        if not isinstance(msgs, list) or len(msgs) < 2 or not all(isinstance(m, dict) for m in msgs):
            raise ValueError(f"{where}: expected {{'messages': [system, user, assistant]}}")
        if msgs[-1].get("role") != "assistant":
            raise ValueError(f"{where}: the last message must be the assistant's measured outcome")
        try:
            answer = json.loads(msgs[-1].get("content", ""))
            outcome = answer["outcome"]
        except (ValueError, TypeError, KeyError):
            raise ValueError(f"{where}: the assistant message is not the exported outcome JSON") from None
        if outcome not in BINS:
            raise ValueError(f"{where}: outcome {outcome!r} is not one of {list(BINS)}")
        rows.append({"prompt": msgs[:-1], "outcome": outcome, "log2_speedup": answer.get("log2_speedup")})
    if not rows:
        raise ValueError(f"{p}: no pairs")
    return rows


def _load_model(model: Any, tokenizer: Any):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if isinstance(model, (str, Path)):
        d = Path(model).expanduser()
        if not (d / "config.json").is_file():
            raise ValueError(f"{d} is not a local model directory (no config.json): name a model saved with "
                             "save_pretrained; nothing is downloaded")
        tokenizer = tokenizer or AutoTokenizer.from_pretrained(d, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(d, local_files_only=True)
    if tokenizer is None:
        raise ValueError("a model object needs its tokenizer")
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat template: the prompts are chat messages (system, user)")
    tokenizer.padding_side = "left"  # a decoder-only model generates after the prompt: pad before it
    return model, tokenizer


def _StepLine(steps: int, names: Sequence[str]):
    """A transformers callback printing one line per logged step to stderr (built here: transformers is optional)."""
    import sys

    from transformers import TrainerCallback

    class StepLine(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "reward" in logs:
                parts = " ".join(f"{n} {logs[f'rewards/{n}/mean']:.4g}" for n in names if f"rewards/{n}/mean" in logs)
                print(f"step {state.global_step}/{steps}: reward {logs['reward']:.4g} (std "
                      f"{logs.get('reward_std', float('nan')):.3g}; {parts})", file=sys.stderr, flush=True)

    return StepLine()


def train(model: Any, data: str | Path | list[dict[str, Any]], out: str | Path,
          rewards: Sequence[str] = DEFAULT_REWARDS, steps: int = 100, num_generations: int = 4, batch_size: int = 4,
          learning_rate: float = 1e-6, max_completion_length: int = 256, temperature: float = 1.0,
          beta: float = 0.0, seed: int = 0, tokenizer: Any = None) -> dict[str, Any]:
    """GRPO on the pairs; saves the model and tokenizer to `out` and returns a summary (steps, pairs, seconds, the
    last logged rewards, completions each reward scored / could not read, TRL's log history)."""
    try:
        import torch
        from datasets import Dataset
        from trl import GRPOConfig, GRPOTrainer
    except ImportError as e:
        raise ImportError(f"{RL_EXTRA}: {e}") from None
    if steps < 1:
        raise ValueError("steps must be at least 1")
    if num_generations < 2:
        raise ValueError("GRPO needs at least 2 generations per prompt (their rewards are compared)")
    if batch_size % num_generations:
        raise ValueError(f"batch size {batch_size} must be a multiple of num_generations {num_generations} "
                         "(each prompt's group of completions stays in one batch)")
    funcs = reward_functions(rewards)
    rows = load_pairs(data) if isinstance(data, (str, Path)) else list(data)
    model, tokenizer = _load_model(model, tokenizer)
    cuda = torch.cuda.is_available()
    config = GRPOConfig(
        output_dir=str(out), max_steps=steps, per_device_train_batch_size=batch_size,
        num_generations=num_generations, max_completion_length=max_completion_length, learning_rate=learning_rate,
        temperature=temperature, beta=beta, seed=seed, use_cpu=not cuda,
        bf16=cuda and torch.cuda.is_bf16_supported(),  # TRL's default bf16=True fails on GPUs without it and CPUs
        report_to="none", logging_steps=1, save_strategy="no", disable_tqdm=True)
    trainer = GRPOTrainer(model=model, reward_funcs=funcs, args=config, train_dataset=Dataset.from_list(rows),
                          processing_class=tokenizer)
    # TRL's printer writes whole log dicts to stdout; one line per step on stderr keeps stdout for the summary
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(_StepLine(steps, [f.name for f in funcs]))
    t0 = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t0
    Path(out).mkdir(parents=True, exist_ok=True)
    trainer.save_model(str(out))
    tokenizer.save_pretrained(str(out))
    logs = [e for e in trainer.state.log_history if "reward" in e]
    last = {k: float(v) for k, v in (logs[-1] if logs else {}).items()
            if k == "reward" or k == "reward_std" or k.startswith("rewards/")}
    return {"out": str(out), "steps": trainer.state.global_step, "pairs": len(rows), "seconds": seconds,
            "rewards": [f.name for f in funcs], "last": last,
            "scored": {f.name: f.scored for f in funcs}, "unparsable": {f.name: f.unparsable for f in funcs},
            "log_history": trainer.state.log_history}
