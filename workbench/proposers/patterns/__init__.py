"""Recognisers of graph patterns beyond the partitioner's built-in ones, one module per kind of operator.

A recogniser is a function `recognise(ctx, node) -> Group | None` (`Context` below): given a node of the captured
graph, it returns the group one kernel family computes, ending at that node or starting there, or None when the node
is not its pattern (or the pattern has a feature its family cannot compute; the node then stays a torch call).

`WHOLE` recognisers run first, over every node, before any single-op group is claimed (patterns written out of
several aten ops, such as a norm computed by hand, must not lose their pieces to the elementwise groups);
`SINGLE` ones run in graph order beside the built-in dispatch, before it. Each module appends its recognisers to
these lists where this file imports it, so the order is one place.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable

from torch.fx import Node

from ..group import Group

if TYPE_CHECKING:  # the partitioner imports this package
    from ..partition import Partitioner


@dataclasses.dataclass
class Context:
    """What a recogniser may read: the partitioner (its helpers: `input_kind`, `elementwise_spec`, `precision`,
    `nodes`), every node's value name, the elementwise groups (root -> members, member -> root), the fusion choice
    (node name -> fused or not; absent means fused) and the nodes already claimed by an earlier group."""
    part: "Partitioner"
    names: dict[Node, str]
    ew: dict[Node, list[Node]]
    ew_of: dict[Node, Node]
    fuse: dict[str, bool]
    taken: set[Node]

    def consumer_root(self, node: Node) -> Node | None:
        return consumer_root(self.ew_of, node)


def consumer_root(ew_of: dict[Node, Node], node: Node) -> Node | None:
    """The elementwise group that every user of `node` belongs to, if there is one (mish's `x * tanh(softplus(x))`
    reads a convolution's output twice, from one group: fusing it as the epilogue is still one read)."""
    roots = {ew_of.get(u) for u in node.users}
    return next(iter(roots)) if len(roots) == 1 and None not in roots else None


# A recogniser that fuses a consumer chain into its kernel as an epilogue reads `ctx.fuse.get(node.name, True)` for
# its first node and sets `Group.fused_epilogue`: `partition.fusion_points` then offers fused and split as moves.
Recogniser = Callable[[Context, Node], Group | None]

WHOLE: list[Recogniser] = []
SINGLE: list[Recogniser] = []


def register(whole: tuple[Recogniser, ...] = (), single: tuple[Recogniser, ...] = ()) -> None:
    WHOLE.extend(whole)
    SINGLE.extend(single)


def recognise_first(recognisers: list[Recogniser], ctx: Context, node: Node) -> Any:
    for fn in recognisers:
        g = fn(ctx, node)
        if g is not None and not any(n in ctx.taken for n in g.nodes):
            return g
    return None


# the pattern modules register themselves when imported, in this order
# (each line: from . import <module>, marked noqa for F401 and E402)
from . import conv  # noqa: F401,E402,I001
from . import conv_transpose  # noqa: F401,E402,I001
from . import norm  # noqa: F401,E402,I001
from . import pool  # noqa: F401,E402,I001
from . import loss  # noqa: F401,E402,I001
from . import matmul  # noqa: F401,E402,I001
from . import reduce  # noqa: F401,E402,I001
