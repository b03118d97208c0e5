"""Each option's doc, written once: in the docstring of the class that defines the option
(``:param name: text``), and handed from there to every other signature that takes it
(the worker kinds, the pools) and to the documentation's table of pool options, instead
of being written again in each.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from collections.abc import Callable, Iterable
from typing import TypeVar

__all__ = ["documented_with", "option_docs"]

T = TypeVar("T")

_PARAM = ":param "


def option_docs(owner: object) -> dict[str, str]:
    """The ``:param name: text`` entries of ``owner``'s docstring, by name, in their order:
    each entry's text on one line."""
    docs: dict[str, str] = {}
    name: str | None = None
    for line in inspect.cleandoc(owner.__doc__ or "").splitlines():
        if line.startswith(_PARAM):
            name, _, text = line[len(_PARAM) :].partition(":")
            docs[name] = text.strip()
        elif name is not None and line.startswith(" "):
            docs[name] += " " + line.strip()
        else:
            name = None  # the entry ended: a blank line, or prose again
    return docs


def documented_with(owner: object, names: Iterable[str] | None = None) -> Callable[[T], T]:
    """A decorator: the decorated class or function's docstring gains ``owner``'s entries
    of ``names`` (all of them where None) after its own text, as ``:param`` entries."""
    wanted = None if names is None else tuple(names)

    def document(target: T) -> T:
        docs = option_docs(owner)
        if not docs:
            return target  # no docstrings to take them from: ``python -OO`` strips them
        chosen = docs if wanted is None else {name: docs[name] for name in wanted}
        entries = "\n".join(_entry(name, text) for name, text in chosen.items())
        own = inspect.cleandoc(getattr(target, "__doc__", None) or "")
        # One field list: the entries follow the target's own without a blank line.
        joint = "\n" if own.split("\n\n")[-1].startswith(_PARAM) else "\n\n"
        target.__doc__ = own + joint + entries
        return target

    return document


def _entry(name: str, text: str) -> str:
    # A literal (``...``) is never broken across lines: its spaces are not break points.
    text = re.sub(r"``.+?``", lambda literal: literal[0].replace(" ", _KEPT), text)
    entry = textwrap.fill(
        f"{_PARAM}{name}: {text}",
        width=92,
        subsequent_indent="    ",
        break_long_words=False,
        break_on_hyphens=False,
    )
    return entry.replace(_KEPT, " ")


_KEPT = "\x00"
