"""Which envs thread workers refuse: the rule, one function (:func:`runner_unsafe_reason`),
applied to every env a :class:`~aioenv.ThreadWorker` builds, before its first reset.

Thread workers step their envs at the same time in one process, so an env is safe there
when its library keeps each instance's state apart, or holds the GIL while it touches
state the instances share. What the common libraries do (``tests/test_thread_safety.py``
compares thread workers with ``SyncVectorEnv``):

- **pygame drawing is not safe.** pygame draws with the GIL released, and some of what it
  draws with is shared by every surface of the process: ``pygame.gfxdraw.filled_polygon``
  fills through SDL_gfx's one static vertex buffer (``gfxPrimitivesPolyIntsGlobal``),
  so two envs filling polygons at once draw into each other's frames, and the display
  (``render_mode="human"``) is one window per process, which an env's ``close``
  (``pygame.quit()``) ends for all of them. ``CarRacing-v3`` draws its observation so in
  every step and reset: under four threads its observations differ from
  ``SyncVectorEnv``'s within five steps, while its Box2D state (the car's position) stays
  identical; holding a lock around ``gfxdraw.filled_polygon`` alone makes them equal.
- **Box2D is safe**: each env has its own ``b2World``, and pybox2d's SWIG calls hold the
  GIL (``LunarLander-v3``, ``BipedalWalker-v3`` and CarRacing's physics match
  ``SyncVectorEnv`` under threads), though for the same reason Box2D steps do not
  overlap in threads.
- **MuJoCo is safe** for its physics: each env has its own ``MjModel``/``MjData``, and
  ``mj_step`` releases the GIL (``HalfCheetah-v5``, ``Ant-v5`` match). Its rendering
  needs an OpenGL context current in the thread that renders: EGL and OSMesa give each
  thread worker its own, GLFW (``render_mode="human"``) works only in the main thread.
- **ALE is safe**: each env owns its emulator (``ALE/Pong-v5``, ``ALE/Breakout-v5`` match).

So the rule refuses an env that draws with pygame while it steps: one whose class uses
pygame (in its methods or its module) and whose observations are images (it draws them in
every step, as CarRacing does). Any other env is allowed, rendering envs included: they
draw only when ``render()`` is called, which gymnasium's vector envs (and their own tests)
expect thread workers to serve; two such envs rendered at the same moment can still mix
their frames, so render them from ``mode="process"`` where frames must be exact.
An env's ``metadata["thread_safe"]`` decides instead of the rule: ``False``
refuses it (an env that knows its library shares state), ``True`` allows it (an env
whose drawing the user made safe, e.g. with its own lock).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..core._environment import EnvAdapter

__all__ = ["THREAD_SAFE_KEY", "refusal", "runner_unsafe_reason"]

#: The metadata key with which an env declares whether thread workers may run it.
THREAD_SAFE_KEY = "thread_safe"

#: The module whose use the rule looks for.
_PYGAME = "pygame"


def runner_unsafe_reason(runner: Any) -> str | None:
    """Why an env that ``runner`` (an env runner, or a vector runner of several) built is
    not safe in thread workers, the first such env's (each judged as an instance,
    gymnasium wrappers and all), as a clause for an error message; None where all are (or
    where the rule does not know it: see this module's docstring). A gymnasium or
    PettingZoo env is judged itself, not through aioenv's adapter."""
    leaves = getattr(runner, "runners", None) or [runner]
    for leaf in leaves:
        env = getattr(leaf, "env", None)
        if isinstance(env, EnvAdapter):
            env = env.env
        metadata = getattr(env, "metadata", None)
        declared = metadata.get(THREAD_SAFE_KEY) if isinstance(metadata, dict) else None
        if env is None or declared:
            continue
        if declared is not None:
            return f"it declares metadata[{THREAD_SAFE_KEY!r}] = {declared!r}"
        drawer = _pygame_user(type(getattr(env, "unwrapped", env)))
        if drawer is not None and _is_image(getattr(env, "observation_space", None)):
            return (
                f"{drawer} draws its image observations with pygame in every step and reset, "
                "and pygame's drawing shares state between the envs of a process (SDL_gfx's "
                "polygon buffer): envs stepping at once in threads draw into each other's "
                "observations"
            )
    return None


def refusal(env_name: str, reason: str) -> ValueError:
    """The error with which a thread worker refuses the env ``env_name``."""
    return ValueError(
        f"thread workers cannot run {env_name}: {reason}. Use mode='process' (each env in "
        f"a process of its own steps as in SyncVectorEnv), or set the env's "
        f"metadata[{THREAD_SAFE_KEY!r}] = True if you made it safe in threads"
    )


def _pygame_user(env_class: type) -> str | None:
    """The qualified name of the first class of ``env_class``'s MRO whose methods or
    module use pygame; None if none does."""
    for cls in env_class.__mro__:
        module = sys.modules.get(cls.__module__)
        if (module is not None and _imports_pygame(module)) or any(
            _PYGAME in names for names in _names_of(vars(cls).values())
        ):
            return f"{cls.__module__}.{cls.__qualname__}"
    return None


def _imports_pygame(module: types.ModuleType) -> bool:
    return any(
        isinstance(value, types.ModuleType) and value.__name__.partition(".")[0] == _PYGAME
        for value in list(vars(module).values())
    )


def _names_of(attributes: Any) -> Iterator[tuple[str, ...]]:
    """The global and imported names of each function among ``attributes`` (properties,
    static and class methods too), with those of the code nested in them."""
    for attribute in attributes:
        function = getattr(attribute, "__func__", getattr(attribute, "fget", attribute))
        code = getattr(function, "__code__", None)
        if isinstance(code, types.CodeType):
            yield from _code_names(code)


def _code_names(code: types.CodeType) -> Iterator[tuple[str, ...]]:
    yield code.co_names
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _code_names(constant)


def _is_image(space: Any) -> bool:
    """A ``Box`` of uint8 with three dimensions (height, width, channels), as pixels are."""
    shape = getattr(space, "shape", None)
    return (
        type(space).__name__ == "Box"
        and shape is not None
        and len(shape) == 3
        and getattr(space, "dtype", None) == np.uint8
    )
