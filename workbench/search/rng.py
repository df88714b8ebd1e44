"""`DrawCountingRandom`: the search's seeded generator, which counts what it drew so that a resumed search continues
the same stream.

Every draw of `random.Random` goes through `random()` (two 32-bit words of the Mersenne Twister) or
`getrandbits(k)` (ceil(k / 32) words); `choice`, `sample`, `shuffle`, `randrange`... are built on those two. Counting
the words gives a position in the stream that fits in one integer (the step events store it), and
`advance(n)` replays n words from the seed, which restores the exact state without storing it. The one state outside
the stream, `gauss`'s cached second value, is avoided: `gauss` here is `normalvariate`, which caches nothing.
"""
from __future__ import annotations

import random


class DrawCountingRandom(random.Random):
    def __init__(self, seed: int | str | None = None):
        self.draws = 0  # 32-bit words drawn since the seed
        super().__init__(seed)

    def seed(self, a=None, version: int = 2) -> None:
        super().seed(a, version)
        self.draws = 0

    def random(self) -> float:
        self.draws += 2
        return super().random()

    def getrandbits(self, k: int) -> int:
        self.draws += (k + 31) // 32
        return super().getrandbits(k)

    def gauss(self, mu: float = 0.0, sigma: float = 1.0) -> float:
        return self.normalvariate(mu, sigma)

    def advance(self, draws: int) -> None:
        """Move forward to `draws` words from the seed (a generator already past it cannot go back)."""
        if draws < self.draws:
            raise ValueError(f"the generator is at {self.draws} draws, past {draws}")
        for _ in range(draws - self.draws):
            self.getrandbits(32)
