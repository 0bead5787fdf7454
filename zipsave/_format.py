"""The archive format version, every member name and the keys of a tagged ``data`` value, in
one place.

Bumping the format: increase ``FORMAT_VERSION`` only for a change an older zipsave could
misread; add the reader for the old layout beside the new one (never drop it), keep an
archive of each version under ``tests/data/`` with the script that made it, and describe
the change in ``docs/format.rst``.
"""

from __future__ import annotations

FORMAT_VERSION = 1
FORMAT_NAME = "zipsave"

DATA = "data"
PYTORCH_VARIABLES = "pytorch_variables.pth"
LEGACY_PYTORCH_VARIABLES = "tensors.pth"
VERSION = "_zipsave_version"
SB3_VERSION = "_stable_baselines3_version"
SYSTEM_INFO = "system_info.txt"
MANIFEST = "manifest.json"
#: The manifest's list of the folders saved as app state (a dict: no class, no handler): a
#: reader loads them as dicts without asking handlers whether they recognise them.
MANIFEST_APP_STATE = "app_state"
#: The manifest's ``{member: place}`` of the ``.pth`` members that hold a state dict given as
#: a value of an app state (``{"model": model.state_dict()}``), not an object's, and the place
#: of its key among the app state's keys: a load puts it back there, ``restore`` as a value.
MANIFEST_STATE_DICT_VALUES = "state_dict_values"
INIT = "init.json"
ARRAYS_DIR = "arrays/"
PTH_SUFFIX = ".pth"
NPY_SUFFIX = ".npy"

#: The embedded signature (the ``sign`` extra): a model-signing bundle over every other member,
#: never listed in ``manifest.json`` and never model data.
SIGNATURE = "zipsave.sig"
#: A detached signature sits beside the archive, named after it with this suffix.
SIGNATURE_SUFFIX = ".sig"

#: Members whose bytes a person may legitimately edit in a zip explorer: a hash mismatch
#: there is reported and tolerated instead of skipping the member.
EDITABLE = frozenset({DATA, INIT, SYSTEM_INFO})

#: Tensor data inside ``.pth`` and ``.npy`` members starts on this boundary in the outer
#: file, so records can be read in place or memory-mapped.
ALIGNMENT = 64

#: The keys of a tagged JSON value in ``data``: SB3's ``":type:"`` and ``":serialized:"``
#: (SB3's spelling; must stay as it is so SB3 reads zipsave's ``data``), and zipsave's
#: pickle-free ``":zipsave:"`` form beside them.
TYPE_KEY = ":type:"
SERIALIZED_KEY = ":serialized:"
NATIVE_KEY = ":zipsave:"
RESERVED = frozenset({TYPE_KEY, SERIALIZED_KEY, NATIVE_KEY})

#: Fixed timestamp for every member: same state in, same bytes out.
DATE_TIME = (1980, 1, 1, 0, 0, 0)


def join(component: str, member: str) -> str:
    """Return the member name of ``member`` inside the component folder ``component``."""
    return f"{component}/{member}" if component else member


def state_dict_member(name: str) -> str:
    """Member name of the state dict saved for the attribute path ``name``."""
    return name + PTH_SUFFIX


#: A sharded checkpoint directory (``zipsave.dcp``): the index archive, its commit point...
DCP_INDEX = "index.zip"
#: ...and the JSON form of DCP's ``Metadata`` inside it.
DCP_METADATA = "dcp_metadata.json"
