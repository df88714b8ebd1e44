"""Search: the object a notebook holds (`Search`), its configs, tree, memory and strategies."""
from .config import FindingsConfig, LLMMovesConfig, ScreeningConfig
from .memory import Attempt, SearchMemory
from .search import Search, StepReport, make_search
from .strategies import STRATEGIES, Proposal, SearchView, make_strategy
from .tree import Node, Tree

__all__ = ["Attempt", "FindingsConfig", "LLMMovesConfig", "Node", "Proposal", "STRATEGIES", "ScreeningConfig",
           "Search", "SearchMemory", "SearchView", "StepReport", "Tree", "make_search", "make_strategy"]
