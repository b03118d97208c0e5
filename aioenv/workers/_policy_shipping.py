"""How a rollout policy reaches a worker's host: at most once per child process with its
bytes, and through Ray's object store once for every Ray actor.

A :class:`~aioenv._segment.PolicyPackage` rides in a ``ControlRequest("policy")`` (from
``pool.set_policy``) and in every :class:`~aioenv._segment.Rollout`. Workers that share a
child process (``envs_per_process``) share its cache of unpickled policies, so only the
first request to a child carries the bytes; the others carry the key alone. A replacement
child (after a death) is a new host and gets the bytes again.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

from .._messages import ControlRequest
from .._segment import PolicyPackage, Rollout

__all__ = ["mark_shipped", "package_of", "through_object_store", "without_shipped"]

#: Per host (a child process), the key of the last package sent to it with its bytes.
_shipped: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
#: Per package key, its bytes put in Ray's object store (the latest two).
_refs: dict[str, Any] = {}
_KEEP = 2


def package_of(request: Any) -> PolicyPackage | None:
    """The policy package a request carries, if any."""
    if type(request) is Rollout:
        return request.policy
    if type(request) is ControlRequest and request.op == "policy":
        package: PolicyPackage = request.kwargs["package"]
        return package
    return None


def _with_package(request: Any, package: PolicyPackage) -> Any:
    if type(request) is Rollout:
        return dataclasses.replace(request, policy=package)
    return dataclasses.replace(request, kwargs={**request.kwargs, "package": package})


def without_shipped(host: Any, request: Any) -> tuple[Any, str | None]:
    """``request`` for ``host``, its package's bytes left out if ``host`` has them already;
    and the key to :func:`mark_shipped` once it was sent with them (None: nothing to mark)."""
    package = package_of(request)
    if package is None:
        return request, None
    if _shipped.get(host) == package.key:
        return _with_package(request, package.reference()), None
    return request, package.key


def mark_shipped(host: Any, key: str | None) -> None:
    if key is not None:
        _shipped[host] = key


def through_object_store(request: Any) -> Any:
    """``request`` with its package's bytes replaced by a reference into Ray's object store
    (put once per package, however many actors it goes to)."""
    package = package_of(request)
    if package is None:
        return request
    ref = _refs.get(package.key)
    if ref is None:
        import ray

        ref = ray.put(package.pickled())
        _refs[package.key] = ref
        while len(_refs) > _KEEP:
            del _refs[next(iter(_refs))]
    return _with_package(request, package.with_payload(ref))
