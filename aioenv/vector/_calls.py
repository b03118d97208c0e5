"""gymnasium's calls on a vector env's envs (``call``, ``get_attr``, ``set_attr``,
``render``) and aioenv's ``apply``, for :class:`~aioenv.AioVectorEnv`: each goes to the
envs through their protocol (:class:`~aioenv.vector._runtime.Envs`), in order with their
steps, and its answers come back one per env, in the envs' order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..core._errors import WorkerError
from ._layout import EnvLayout
from ._runtime import Envs, raised

__all__ = ["EnvCalls"]


class EnvCalls:
    """The calls on the envs of a vector env, over its envs and their layout."""

    _envs: Envs
    _layout: EnvLayout

    def _check_open(self) -> None:
        raise NotImplementedError

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        self._check_open()
        return tuple(self._layout.flatten(self._answers(self._envs.call_envs, name, args, kwargs)))

    def apply(
        self,
        function: Callable[..., Any],
        *args: Any,
        env_ids: Sequence[int] | None = None,
        **kwargs: Any,
    ) -> tuple[Any, ...]:
        """Run ``function(env, *args, **kwargs)`` on each env (in its worker, in order with
        its steps) and return the results: ``env`` is the env as its factory built it,
        with its own wrappers, so that ``function`` can look at them or at its outermost
        wrapper (what :meth:`call`, :meth:`get_attr` and :meth:`set_attr` reach through,
        as gymnasium's ``get_wrapper_attr`` does). ``env_ids`` (default every env): those
        envs only, negative indices counting from the end, results in their order; the
        others are not touched. Parallel envs' ids are envs', as for :meth:`call`, not
        lanes'. ``function`` must pickle for process workers."""
        self._check_open()
        count = self._layout.num_envs
        ids = list(range(count) if env_ids is None else env_ids)
        for env in ids:
            if not -count <= env < count:
                raise IndexError(f"env index {env} is out of range for {count} envs")
        ids = [int(env) % count for env in ids]
        functions = self._layout.functions(function, ids)
        answers = self._answers(self._envs.apply_envs, functions, args, kwargs)
        per_env = self._layout.flatten(answers, unasked=None)
        return tuple(per_env[env] for env in ids)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        self._check_open()
        return tuple(self._layout.flatten(self._answers(self._envs.get_attr, name)))

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        self._check_open()
        if self._layout.batched:
            values = self._layout.values(values)
        self._answers(self._envs.set_attr, name, values)

    def _answers(self, ask: Callable[..., Any], *args: Any) -> Any:
        """``ask(*args)``'s answers; an env's error raised as itself, a note naming the env,
        as :meth:`step` and gymnasium's vector envs raise it."""
        try:
            return ask(*args)
        except WorkerError as error:
            failed = error
        raise raised([failed], self._layout.env_of)

    def render(self) -> tuple[Any, ...] | None:
        frames = self.call("render")
        return None if all(frame is None for frame in frames) else frames
