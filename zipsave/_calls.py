"""A public function called with an option by position (``zipsave.load(path, PPO)``) says how to
call it, as a :class:`~zipsave.UsageError`, instead of Python's "takes 1 positional argument"."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Callable, TypeVar

from .exceptions import UsageError

__all__ = ["keyword_options"]

_F = TypeVar("_F", bound=Callable[..., Any])


def _shown(value: Any) -> str:
    """A value as the call to copy names it: a class by its name, anything else as ``...``."""
    return value.__name__ if isinstance(value, type) else "..."


def too_many(public: str, positional: Sequence[str], options: Sequence[str], order: Sequence[str], args: tuple) -> str:
    """The message for ``args`` given to ``public``, which takes ``positional`` by position."""
    if positional[:1] == ("self",):  # a method: counted as its caller sees it
        positional, args = positional[1:], args[1:]
    extra = args[len(positional) :]
    guesses = []
    for i, value in enumerate(extra):
        if isinstance(value, type) and "cls" in options:  # `zipsave.load(path, PPO)`
            guesses.append(f"cls={_shown(value)}")
        elif i < len(order):  # SB3's positional order: `PPO.load(path, env)`, `model.save(path, exclude)`
            guesses.append(f"{order[i]}={_shown(value)}")
    names = ", ".join(f"`{name}`" for name in positional)
    what = f"{len(positional)} positional argument{'s' if len(positional) != 1 else ''}" + (
        f" ({names})" if names else ""
    )
    given = f"{len(args)} {'was' if len(args) == 1 else 'were'} given"
    text = f"`{public}()` takes {what} but {given}: its options are keyword-only."
    if len(guesses) == len(extra):
        return f"{text} Call it as `{public}({', '.join([*positional, *guesses])})`."
    listed = ", ".join(f"`{name}=`" for name in options[:6]) + (", ..." if len(options) > 6 else "")
    return f"{text} Pass {'them' if len(extra) > 1 else 'it'} by name ({listed or 'see its help'})."


def keyword_options(public: str, *, order: Sequence[str] = ()) -> Callable[[_F], _F]:
    """Decorate ``public`` (its name in messages, ``"zipsave.load"``): more positional arguments
    than it takes raise :class:`UsageError` naming the call to make; ``order`` names what extra
    positional values most likely mean (SB3's order of the same function's arguments)."""

    def decorate(func: _F) -> _F:
        target = getattr(func, "__wrapped__", func)
        code = target.__code__
        positional = code.co_varnames[: code.co_argcount]
        options = code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]

        @functools.wraps(func)
        def call(*args: Any, **kwargs: Any) -> Any:
            if len(args) > len(positional):
                raise UsageError(too_many(public, positional, options, order, args))
            return func(*args, **kwargs)

        return call  # type: ignore[return-value]

    return decorate
