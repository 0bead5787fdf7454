"""The error-boundary family of the adversarial suite: every exception type at every public door.

Two generators:

- :func:`injected`: each exception type Python code raises on bad bytes (:data:`RAISED`),
  raised from inside zipsave's archive reader while a door reads (the fault injection stands
  for every reader bug or hostile value not yet found); every door must turn it into a
  ``ZipsaveError`` naming the file, with the original in its cause chain.
- :func:`hostile_inputs`: real hostile files, one per known way a value escaped as something
  else (an index nested 100 000 deep, a time of 1e308, members ``a`` and ``a/b``...), each with
  the door it is delivered to and the builtin it raised before.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import struct
import tarfile
import zipfile
from collections.abc import Callable
from typing import Any

#: What a reader raises on bad bytes, each made fresh per raise.
RAISED: dict[str, Callable[[], BaseException]] = {
    "RecursionError": lambda: RecursionError("maximum recursion depth exceeded"),
    "OverflowError": lambda: OverflowError("int too large to convert to float"),
    "ValueError": lambda: ValueError("invalid literal"),
    "KeyError": lambda: KeyError("storages"),
    "IndexError": lambda: IndexError("list index out of range"),
    "TypeError": lambda: TypeError("'NoneType' object is not subscriptable"),
    "AttributeError": lambda: AttributeError("'int' object has no attribute 'shape'"),
    "AssertionError": lambda: AssertionError("The replay buffer must inherit from ReplayBuffer class"),
    "OSError": lambda: OSError(36, "File name too long"),
    "FileExistsError": lambda: FileExistsError(17, "File exists"),
    "UnicodeDecodeError": lambda: UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
    "BadZipFile": lambda: zipfile.BadZipFile("File is not a zip file"),
    "struct.error": lambda: struct.error("unpack requires a buffer of 4 bytes"),
    "EOFError": lambda: EOFError("Ran out of input"),
    "UnpicklingError": lambda: pickle.UnpicklingError("invalid load key"),
    "NotImplementedError": lambda: NotImplementedError(
        "Could not run 'aten::to_dense' with arguments from the 'SparseCPU'"
    ),
    "RuntimeError": lambda: RuntimeError("size mismatch for weight"),
    "ZeroDivisionError": lambda: ZeroDivisionError("division by zero"),
    "LookupError": lambda: LookupError("unknown encoding"),
    "json.JSONDecodeError": lambda: json.JSONDecodeError("Expecting value", "x", 0),
}

#: The reader's methods every door reads through (bytes, chunks, views).
READER_METHODS = ("read", "iter_chunks", "open_view")


def cause_chain(err: BaseException) -> list[BaseException]:
    """``err`` and every exception it was raised from (``__cause__``, else ``__context__``)."""
    out: list[BaseException] = []
    while err is not None and err not in out:
        out.append(err)
        err = err.__cause__ if err.__cause__ is not None else err.__context__  # type: ignore[assignment]
    return out


# -- real hostile inputs ---------------------------------------------------------------------
def nested_index(directory: str, depth: int = 100_000) -> None:
    with open(os.path.join(directory, "zipsave-checkpoints.json"), "w") as fp:
        fp.write("[" * depth + "]" * depth)


def index_with(directory: str, **entry: Any) -> None:
    """An index of one checkpoint whose entry has ``entry``'s values (``time=1e308``)."""
    base = {"step": 1, "file": "step-0000000001.zip", "time": 1.7e9, "size": 10, "metrics": {}}
    base.update(entry)
    text = json.dumps({"format": "zipsave-checkpoints", "version": 1, "checkpoints": [base]})
    with open(os.path.join(directory, "zipsave-checkpoints.json"), "w") as fp:
        fp.write(text)


#: Index entries no manager writes, each of which a builtin once refused instead of zipsave.
INDEX_ENTRIES: dict[str, dict[str, Any]] = {
    "time_1e308": {"time": 1e308},
    "time_nan": {"time": float("nan")},
    "time_inf": {"time": float("inf")},
    "time_negative": {"time": -1e12},
    "time_string": {"time": "yesterday"},
    "time_bool": {"time": True},
    "size_1e308": {"size": 1e308},
    "size_nan": {"size": float("nan")},
    "size_huge_int": {"size": 10**400},
    "metrics_list": {"metrics": [1, 2]},
    "metrics_nested": {"metrics": {"r": {"deep": [1]}}},
    "step_float": {"step": 1.5},
    "step_huge": {"step": 10**40, "file": "step-" + str(10**40) + ".zip"},
}


def zip_of(path: str, names: list[str]) -> str:
    with zipfile.ZipFile(path, "w") as zf:
        for name in names:
            zf.writestr(name, b"1")
    return path


#: Member lists that ``extract`` cannot write as they are.
EXTRACT_TREES: dict[str, list[str]] = {
    "file_then_below": ["a", "a/b"],
    "below_then_file": ["a/b", "a"],
    "file_below_deep": ["x/y", "x/y/z/w"],
    "long_part": ["d/" + "n" * 300],
    "long_first_part": ["n" * 256],
    "traversal_escape": ["../\x1b[2J"],
}


def legacy_pth() -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(torch.zeros(4), buf, _use_new_zipfile_serialization=False)
    return buf.getvalue()


def tar_pth() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        info = tarfile.TarInfo("storages")
        info.size = 1
        tf.addfile(info, io.BytesIO(b"1"))
    return buf.getvalue()


#: Files handed to ``Policy.load`` that are no policy file.
POLICY_FILES: dict[str, Callable[[], bytes]] = {
    "legacy_pth": legacy_pth,
    "tar_pth": tar_pth,
    "random_bytes": lambda: bytes(range(256)) * 4,
    "empty": lambda: b"",
    "pickle_of_dict": lambda: pickle.dumps({"state_dict": 1}),
}

#: Pickles handed to ``load_replay_buffer`` (plain pickles, read as SB3's buffer files).
BUFFER_PICKLES: dict[str, Callable[[], bytes]] = {
    "dict": lambda: pickle.dumps({"a": 1}),
    "list": lambda: pickle.dumps([1, 2, 3]),
    "int": lambda: pickle.dumps(7),
    "none": lambda: pickle.dumps(None),
    "truncated": lambda: pickle.dumps({"a": list(range(100))})[:20],
}
