"""The evaluation harness, parent side: the ladder of stages, the GPU-seconds budget, the static and compile judges
and the tolerances. `harness.child` holds the code that runs only inside spawned workers (its environment pinned before
torch and triton load)."""
from .budget import Budget
from .ladder import Ladder, PromotionPolicy

__all__ = ["Budget", "Ladder", "PromotionPolicy"]
