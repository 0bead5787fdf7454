"""What a strict restore into an app-state dict expects: the archive's stateful entries are
the dict's."""

from __future__ import annotations

from typing import Any

from .. import _core, _format  # _core: the exclude globs
from ..exceptions import ParameterMismatchError
from ._parts import is_stateful
from ._session import LoadSession

__all__ = ["check_app_state"]


def check_app_state(src: LoadSession, app: dict, folder: str, exclude: Any = None) -> None:
    """A strict restore into a dict: the archive's stateful entries are the dict's, less what
    ``exclude`` leaves out on purpose. A state dict saved as a value (``{"model":
    model.state_dict()}``, a ``.pth`` member the manifest lists) is a value, as it was in
    ``data`` before zipsave 0.2 wrote it so: neither side counts it."""
    prefix = f"{folder}/" if folder else ""
    saved = {
        n[len(prefix) : -len(_format.PTH_SUFFIX)]
        for n in src.source.members_in(folder)
        if n.endswith(_format.PTH_SUFFIX) and n not in src.reader.state_dict_values
    } - {_format.PYTORCH_VARIABLES[: -len(_format.PTH_SUFFIX)]}
    wanted = {k for k, v in app.items() if is_stateful(v)}
    if exclude:
        saved = {n for n in saved if not _core.matches(n, exclude)}
        wanted = {n for n in wanted if not _core.matches(n, exclude)}
    if saved != wanted:
        extra = sorted(saved - wanted)
        raise ParameterMismatchError(
            f"holds stateful entries {sorted(saved)}, but the app state has {sorted(wanted)}.",
            archive=src.name,
            hint=f"Pass `exclude={extra}` to leave out the entries the app state does not hold, or "
            "`strict=False, exact_match=False` to restore the ones that match."
            if extra
            else "Pass `strict=False, exact_match=False` to restore the ones that match.",
        )
