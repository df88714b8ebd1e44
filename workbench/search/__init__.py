"""Search: the object a notebook holds (`Search`), its tree, memory and strategies."""
from .memory import Attempt, SearchMemory
from .search import Search, StepReport
from .strategies import STRATEGIES, make
from .tree import Node, Tree

__all__ = ["Search", "StepReport", "SearchMemory", "Attempt", "Tree", "Node", "STRATEGIES", "make"]
