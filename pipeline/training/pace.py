"""How often a run writes its checkpoint: never more than a small share of its seconds."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

# The most of a run's seconds its checkpoints may take.
CHECKPOINT_SHARE = 0.02


class CheckpointPace:
    """When the next checkpoint is written: after the first epoch, then once the run has spent
    ``1 / max_share`` times the last write's seconds since that write ended (``math.inf``:
    after every epoch). A checkpoint of the default network takes about a hundredth of a
    second, so every epoch of a few seconds still gets one; a write that stalls (a slow disk or
    artifact store: 1.3 s once, beside 3-second epochs) is not repeated every epoch, so
    checkpoints never cost a run more than ``max_share`` of its seconds, besides the last
    epoch's, which ``fit`` always writes. A resumed run repeats at most the epochs since its
    last checkpoint."""

    def __init__(self, max_share: float = CHECKPOINT_SHARE) -> None:
        self.max_share = max_share
        self.last_end: float | None = None
        self.last_s = 0.0

    def due(self) -> bool:
        if self.last_end is None:
            return True
        return time.perf_counter() - self.last_end >= self.last_s / self.max_share

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.last_end = time.perf_counter()
            self.last_s = self.last_end - start
