"""The gymnasium ids a worker can make: the same as the script that made the pool.

A worker process or Ray actor does not run the user's script (see
:mod:`aioenv.workers.process._host`), so the ids the script registered at its top
(``gymnasium.register(...)``, ``gymnasium.register_envs(ale_py)``) are missing from the
registry there, and a factory calling ``gymnasium.make`` on one fails. So the parent takes
a :func:`snapshot` of its registry when it starts a host (a child process or an actor),
and the host :func:`merge`\\ s it into its own before it builds any env: the ids it lacks
are added, the ones it has are kept.

Also here: ``module:Id`` ids (``gymnasium.make`` imports ``module`` first, and so does
:func:`resolve_spec`), and the rule that an entry point defined in ``__main__`` travels
as the object itself, which cloudpickle ships by value (:func:`shippable`).

Both sides use this module: of aioenv it imports only :mod:`aioenv.core._pickling`.
"""

from __future__ import annotations

import dataclasses
import importlib
import pickle
import re
import warnings

import cloudpickle
import gymnasium
from gymnasium.envs.registration import EnvSpec

from . import _pickling as pickling

__all__ = ["merge", "resolve_spec", "shippable", "snapshot"]


def resolve_spec(env_id: str) -> EnvSpec:
    """The registered spec of ``env_id``, looked up in this process and made
    :func:`shippable` (an entry point in ``__main__`` resolved to the object itself); an id
    ``module:Id`` imports ``module`` first (it registers ``Id``), as ``gymnasium.make``
    does. gymnasium's ``NameNotFound`` and friends for an unknown id."""
    module, separator, name = env_id.rpartition(":")
    if separator:
        try:
            importlib.import_module(module)
        except ImportError as exc:  # ModuleNotFoundError stays one, as gymnasium raises it
            raise type(exc)(
                f"the env id {env_id!r} names the module {module!r} to import first (it "
                f"should register {name!r}), and importing it failed ({type(exc).__name__}: "
                f"{exc}); install it or put it on sys.path, or drop the '{module}:' prefix"
            ) from exc
        try:
            return shippable(gymnasium.spec(name))
        except gymnasium.error.Error as exc:  # the same error, saying where it was looked for
            raise type(exc)(
                f"{exc} The env id {env_id!r} imported {module!r} first, and that did not "
                f"register {name!r}: check the id, or the module that registers it"
            ) from None
    return shippable(gymnasium.spec(name))


def shippable(spec: EnvSpec) -> EnvSpec:
    """``spec`` with an entry point in ``__main__`` resolved to the object itself: a worker
    does not run ``__main__``, so the string would not resolve there, while cloudpickle
    ships the object by value."""
    entry_point = spec.entry_point
    if isinstance(entry_point, str) and entry_point.startswith("__main__:"):
        creator = gymnasium.envs.registration.load_env_creator(entry_point)
        spec = dataclasses.replace(spec, entry_point=creator)  # type: ignore[arg-type]
    return spec


def snapshot() -> bytes:
    """This process's gymnasium registry, for :func:`merge` in a worker: each spec pickled
    on its own, so one that does not pickle (or whose ``__main__`` entry point does not
    resolve) is left out without costing the others. Every spec goes, gymnasium's own
    included: only a worker can tell which ids it has, and gymnasium's 60-odd specs are a
    few KiB, taken once per host."""
    specs: dict[str, bytes] = {}
    for env_id, spec in list(gymnasium.registry.items()):
        try:
            specs[env_id] = pickling.dumps(shippable(spec))
        except Exception:
            continue  # an env that needs it fails in the worker with gymnasium's own error
    return pickle.dumps(specs, protocol=pickle.HIGHEST_PROTOCOL)


def merge(registry_snapshot: bytes) -> None:
    """Add the ids of a parent's :func:`snapshot` that this process's registry lacks; the
    ids it has stay as they are, and a spec that does not unpickle here is left out."""
    specs: dict[str, bytes] = pickle.loads(registry_snapshot)
    registry = gymnasium.registry
    added: list[str] = []
    for env_id, pickled in specs.items():
        if env_id in registry:
            continue
        try:
            registry[env_id] = cloudpickle.loads(pickled)
        except Exception:
            continue  # as above: gymnasium's own error if an env needs it
        added.append(env_id)
    if added:
        # A package that registers its ids when imported (ale_py does) registers them again
        # here, over the parent's copies, once an env of it is made: gymnasium would warn
        # about each of those ids in every worker.
        ids = "|".join(re.escape(env_id) for env_id in added)
        warnings.filterwarnings(
            "ignore", message=f".*Overriding environment (?:{ids}) already in registry"
        )
