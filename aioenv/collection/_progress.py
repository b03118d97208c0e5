"""The progress bar of :func:`aioenv.collect`: a tqdm bar that stays quiet off a terminal."""

from __future__ import annotations

from typing import IO, Any

from tqdm import tqdm

__all__ = ["Progress"]


class Progress:
    """Steps (tqdm shows their rate), finished episodes and their mean return.

    ``enabled=False`` shows nothing; ``enabled=True`` shows the bar only when ``file``
    (default: stderr) is a terminal, so logs and CI output stay clean.
    """

    def __init__(
        self,
        enabled: bool,
        *,
        total: int | None,
        file: IO[str] | None = None,
        mininterval: float = 0.1,
    ) -> None:
        self._bar: Any = None  # a tqdm bar
        if enabled:
            self._bar = tqdm(
                total=total,
                unit="step",
                dynamic_ncols=True,
                disable=None,  # tqdm's "only on a terminal"
                file=file,
                leave=False,  # collect() runs in a loop: one line, not one per call
                mininterval=mininterval,
            )
        self.episodes = 0
        self._return_sum = 0.0

    def update(self, steps: int, returns: list[float]) -> None:
        """``steps`` more transitions, and the returns of the episodes that just ended."""
        self.episodes += len(returns)
        self._return_sum += sum(returns)
        if self._bar is None:
            return
        if returns:  # so at least one episode counted
            mean_return = self._return_sum / self.episodes
            self._bar.set_postfix(
                episodes=self.episodes, mean_return=f"{mean_return:.1f}", refresh=False
            )
        self._bar.update(steps)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
