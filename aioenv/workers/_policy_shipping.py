"""How a rollout policy reaches a worker's host: at most once per child process with its
bytes, and through Ray's object store once for every Ray actor.

A :class:`~aioenv.core._rollouts.PolicyPackage` rides in a ``ControlRequest("policy")`` (from
``pool.set_policy``) and in every :class:`~aioenv.core._rollouts.Rollout`. Workers that share a
child process (``envs_per_process``) share its cache of unpickled policies, so only the
first request to a child carries the bytes; the others carry the key alone. Which key a
child has is recorded on its :class:`~aioenv.workers.process._host.Host`: a replacement child
(after a death) is a new host and gets the bytes again. For Ray, the package keeps the
reference to its bytes in the object store, so it is put once per ``set_policy`` call.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..core._messages import ControlRequest
from ..core._rollouts import PolicyPackage, Rollout

if TYPE_CHECKING:
    from .process._host import Host

__all__ = ["mark_shipped", "package_of", "through_object_store", "without_shipped"]


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


def without_shipped(host: Host, request: Any) -> tuple[Any, str | None]:
    """``request`` for ``host``, its package's bytes left out if ``host`` has them already;
    and the key to :func:`mark_shipped` once it was sent with them (None: nothing to mark)."""
    package = package_of(request)
    if package is None:
        return request, None
    if host.shipped_policy == package.key:  # the package without its payload
        return _with_package(request, PolicyPackage(package.version, package.key)), None
    return request, package.key


def mark_shipped(host: Host, key: str | None) -> None:
    if key is not None:
        host.shipped_policy = key


def through_object_store(request: Any) -> Any:
    """``request`` with its package's bytes replaced by a reference into Ray's object store
    (put once per package, however many actors it goes to; the reference lives as long
    as the package, which the pool holds while the policy is in force)."""
    package = package_of(request)
    if package is None:
        return request
    if package.stored is None:
        import ray

        package.stored = ray.put(package.pickled())
    return _with_package(request, PolicyPackage(package.version, package.key, package.stored))
