"""Sphinx configuration for the zipsave documentation (``tox -e docs``)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

import zipsave

project = "zipsave"
author = "the zipsave authors"
copyright = "the zipsave authors"
release = zipsave.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]
# intersphinx would need the network; third-party names are listed in nitpick_ignore instead.

source_suffix = {".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]
default_role = "code"

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented_params"
autodoc_typehints_format = "short"
autodoc_default_options = {"show-inheritance": True}
autodoc_class_signature = "mixed"
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_ivar = True
napoleon_use_rtype = False
napoleon_preprocess_types = False

nitpicky = True
# Types from other projects: without intersphinx (offline builds) -n cannot resolve them.
nitpick_ignore = [
    (role, name)
    for name in (
        "Any",
        "typing.Any",
        "IO",
        "typing.IO",
        "Iterable",
        "collections.abc.Iterable",
        "Mapping",
        "collections.abc.Mapping",
        "collections.abc.Iterator",
        "Iterator",
        "collections.abc.Callable",
        "Callable",
        "torch.Tensor",
        "torch.device",
        "torch.dtype",
        "numpy.ndarray",
        "np.ndarray",
        "os.PathLike",
        "TextIO",
        "typing.TextIO",
        "concurrent.futures.Future",
        "optional",
        "callable",
        "file-like",
    )
    for role in ("py:class", "py:obj", "py:data")
]
nitpick_ignore_regex = [
    # The core's private base of Saveable (it records constructor arguments); users never name it.
    (r"py:class", r"zipsave\._core\..*"),
    # CheckpointManager's private base (the reading methods it shares with read_only=True).
    (r"py:class", r"zipsave\._manager\._reading\..*"),
    (r"py:.*", r"(torch|numpy|np|gymnasium|fsspec|tqdm)\..*"),
]

html_theme = "alabaster"
html_theme_options = {
    "description": "RL models in one readable zip archive, loaded without running pickled code",
    "fixed_sidebar": True,
    "show_relbars": True,
}
html_title = f"zipsave {release}"
html_static_path: list[str] = []


def _init_signature(app, what, name, obj, options, signature, return_annotation):  # noqa: ARG001
    """A class that defines ``__new__`` (CheckpointManager picks its read-only view there) is
    shown with its ``__init__`` signature, so every default is on the API page."""
    if what != "class" or "__new__" not in vars(obj) or "__init__" not in vars(obj):
        return None
    import inspect

    sig = inspect.signature(obj.__init__)
    params = [p.replace(annotation=p.empty) for p in list(sig.parameters.values())[1:]]
    return str(sig.replace(parameters=params, return_annotation=sig.empty)), return_annotation


def _public_bases(app, name, obj, options, bases):
    """Leave out ``zipsave._record.Record``, the private base that writes out a record's repr,
    ``==`` and ``hash``: the records are dataclasses to their users."""
    bases[:] = [base for base in bases if getattr(base, "__module__", "") != "zipsave._record"]


def setup(app):
    app.connect("autodoc-process-signature", _init_signature)
    app.connect("autodoc-process-bases", _public_bases)
