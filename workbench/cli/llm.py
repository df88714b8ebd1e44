"""`workbench llm export|train-rl`: forecaster fine-tuning data and training."""
from __future__ import annotations

import json
from pathlib import Path

from ..core import paths
from ..llm.rewards import export_pairs
from ..llm.train_rl import train
from ..store import Store


def cmd_llm_export(args) -> int:
    """Measured evaluations of the store as chat-format JSONL (the LLM surrogate's prompt, the measured outcome)."""
    path = Path(args.store).expanduser() if args.store else paths.store_path()
    if not path.exists():  # Store() would create an empty one and the export would silently be empty
        raise ValueError(f"no store at {path} (give --store PATH)")
    store = Store(path)
    try:
        n = export_pairs(store, args.out, anchor=args.anchor)
    finally:
        store.close()
    print(f"{n} pairs -> {args.out}")
    return 0


def cmd_llm_train_rl(args) -> int:
    """GRPO fine-tuning of a local causal LM on exported pairs, rewarded by calibration scores (the [rl] extra)."""
    summary = train(args.model, args.data, args.out, rewards=args.rewards.split(","), steps=args.steps,
                    num_generations=args.num_generations, batch_size=args.batch_size, learning_rate=args.lr,
                    max_completion_length=args.max_completion_tokens, temperature=args.temperature, beta=args.beta,
                    seed=args.seed)
    print(json.dumps(summary, default=str) if args.json else
          f"trained {summary['steps']} steps on {summary['pairs']} pairs in {summary['seconds']:.1f} s: "
          f"{summary['out']}\n" + "\n".join(f"  {k}: {v:.4g}" for k, v in summary["last"].items()))
    return 0
