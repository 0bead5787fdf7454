"""What ``policy.save`` and ``Policy.load`` become under ``zipsave.sb3.install()``: constructor
parameters in ``data`` and weights in ``policy.pth``, an archive that loads without pickle."""

from __future__ import annotations

import inspect
import os
import zipfile
from typing import Any

import zipsave
from zipsave._archive import DEFAULT_LIMITS, Limits
from zipsave._bounds import check_zip_infos
from zipsave._trust import StorageType, TrustPolicy, restricted_loads
from zipsave.exceptions import DecodeError, ParameterMismatchError

from ._boundary import door
from ._checks import check_policy_arguments
from ._estimate import check_model_size
from ._replace import current_options, is_zipsave_archive, trusted_names, write_exact
from ._state import original

__all__ = ["policy_load", "policy_save"]

#: The ``.pth`` member of a policy archive (``policy.save``).
POLICY = "policy"
#: Key of a features extractor's record in a policy archive's ``data`` (see _extractor_record).
EXTRACTOR = "_zipsave_features_extractor"
#: Constructor arguments of sb3-contrib's recurrent policies that they keep only in their LSTM.
_LSTM_SIZES = {"lstm_hidden_size": "hidden_size", "n_lstm_layers": "num_layers"}
_PLAIN = (bool, int, float, str, dict, type(None))


def policy_save(self: Any, path: Any) -> None:
    """``policy.save``: constructor parameters in ``data``, weights in ``policy.pth``, at
    exactly ``path``."""
    data = {key: _extractor_record(value) for key, value in _constructor_parameters(self).items()}
    write_exact(path, data, {POLICY: self.state_dict()})


def _constructor_parameters(policy: Any) -> dict[str, Any]:
    """``_get_constructor_parameters()``, completed: some policies leave out arguments their
    constructor takes (SB3's ``share_features_extractor``; sb3-contrib's recurrent policies
    their LSTM settings), so ``Policy.load`` built another architecture than the one saved.
    A missing argument is taken from the attribute of the same name (or with a leading underscore),
    or the LSTM's sizes; one the
    constructor does not take is left out."""
    data = dict(policy._get_constructor_parameters())
    lstm = getattr(policy, "lstm_actor", None)
    params = inspect.signature(type(policy).__init__).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        # and some record one their constructor does not take (sb3-contrib's ARSLinearPolicy: `net_arch`)
        data = {key: value for key, value in data.items() if key in params}
    for name, param in params.items():
        if name in data or name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if name in _LSTM_SIZES and lstm is not None:
            data[name] = getattr(lstm, _LSTM_SIZES[name])
        else:
            for attr in (name, f"_{name}"):  # BasePolicy keeps `squash_output` as `_squash_output`
                if attr in vars(policy) and isinstance(vars(policy)[attr], _PLAIN):
                    data[name] = vars(policy)[attr]
                    break
    return data


def _extractor_record(value: Any) -> Any:
    """A features extractor instance (the actors of TD3/SAC/DDPG take one) is stored as what
    builds it again: its class, observation space and output size. Its weights are part of
    the policy's own state dict, so a pickle of the module (tensors and all) is not needed."""
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    if not isinstance(value, BaseFeaturesExtractor):
        return value
    return {EXTRACTOR: type(value), "observation_space": value._observation_space, "features_dim": value.features_dim}


def _rebuild_extractor(value: Any) -> Any:
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    if not (isinstance(value, dict) and EXTRACTOR in value):
        return value
    cls = value[EXTRACTOR]
    if not (isinstance(cls, type) and issubclass(cls, BaseFeaturesExtractor)):
        raise DecodeError(f"`{EXTRACTOR}` must be a BaseFeaturesExtractor subclass, found {cls!r}.")
    kwargs = {"features_dim": value["features_dim"]}
    params = inspect.signature(cls).parameters
    if "features_dim" not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        kwargs = {}
    return cls(value["observation_space"], **kwargs)


def _is_torch_file(path: Any) -> bool:
    """A file written by ``torch.save`` (what ``policy.save`` wrote without zipsave)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return any(name.endswith("/data.pkl") or name == "data.pkl" for name in archive.namelist())
    except (zipfile.BadZipFile, OSError):
        return not is_zipsave_archive(path)
    finally:
        if hasattr(path, "seek"):
            path.seek(0)


def _file_size(path: Any) -> int:
    if hasattr(path, "seek"):
        at = path.tell()
        try:
            return path.seek(0, os.SEEK_END)
        finally:
            path.seek(at)
    return os.path.getsize(path)


def read_sb3_policy_file(path: Any, policy: TrustPolicy, limits: Limits | None = None) -> tuple[dict, dict]:
    """``(data, state_dict)`` of a file SB3's own ``policy.save`` wrote (``torch.save`` of
    ``{"state_dict": ..., "data": constructor parameters}``) without ``torch.load``'s pickle:
    its ``data.pkl`` goes through the restricted unpickler under ``policy``, and each storage
    reference is answered from the file's own record, checked against its declared size."""
    import torch

    with zipfile.ZipFile(path) as archive:
        # A plain zip from outside zipsave's reader: the same limits, so no deflate bomb.
        limits = limits or DEFAULT_LIMITS
        check_zip_infos(
            archive.infolist(),
            size=_file_size(path),
            max_bytes=limits.max_total_bytes,
            max_ratio=limits.max_compression_ratio,
            max_members=limits.max_members,
            archive=path,
        )
        pickle_name = next((n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"), None)
        if pickle_name is None:
            raise zipsave.ArchiveFormatError("is not a torch.save file (no data.pkl).", archive=path)
        prefix = pickle_name[: -len("data.pkl")]
        storages: dict[str, Any] = {}

        def storage(pid: Any) -> Any:
            kind, storage_type, key = pid[:3] if isinstance(pid, tuple) and len(pid) == 5 else (None, None, None)
            if (
                kind != "storage"
                or not isinstance(storage_type, StorageType)
                or not isinstance(key, str)
                or type(pid[4]) is not int
            ):
                raise DecodeError(f"refers to an external object {pid!r}, not a storage record.", archive=path)
            if key not in storages:
                member = f"{prefix}data/{key}"
                try:
                    raw = archive.read(member)
                except KeyError:
                    raise DecodeError(
                        "refers to a storage record it does not hold.", archive=path, member=member
                    ) from None
                if len(raw) != pid[4] * storage_type.dtype.itemsize:
                    raise DecodeError(
                        f"holds {len(raw)} bytes, its reference declares {pid[4]} {storage_type.dtype} elements.",
                        archive=path,
                        member=member,
                    )
                untyped = torch.UntypedStorage.from_buffer(raw, dtype=torch.uint8) if raw else torch.UntypedStorage(0)
                storages[key] = torch.storage.TypedStorage(
                    wrap_storage=untyped, dtype=storage_type.dtype, _internal=True
                )
            return storages[key]

        saved = restricted_loads(
            archive.read(pickle_name), policy, archive=path, member=pickle_name, storages=storage, limits=limits
        )
    if not (
        isinstance(saved, dict) and isinstance(saved.get("data"), dict) and isinstance(saved.get("state_dict"), dict)
    ):
        raise zipsave.ArchiveFormatError("is a torch.save file, but not one of SB3's `policy.save`.", archive=path)
    return saved["data"], saved["state_dict"]


def policy_load(cls: Any, path: Any, device: Any = "auto") -> Any:
    """``Policy.load``: rebuild ``cls`` from its constructor parameters and load its weights.
    Whatever reading the file raises is a ZipsaveError naming it (:func:`~._doors.door`)."""
    from stable_baselines3.common.utils import get_device

    device = get_device(device)
    with door(path, f"{cls.__name__}.load"):
        return _policy_load(cls, path, device)


def _policy_load(cls: Any, path: Any, device: Any) -> Any:
    from stable_baselines3.common.policies import BaseModel

    options = current_options()
    report = zipsave.LoadReport()
    data: dict[str, Any] | None
    if _is_torch_file(path):
        if options.trust is not None and options.trust.required:
            raise zipsave.SignatureError(
                "is a plain torch file, not a zipsave archive, so it cannot be signed, and the trust setting requires "
                "a signature.",
                reason="no-signature",
                archive=path,
                hint="Save the policy again with zipsave installed (an archive), then sign it with `zipsave sign`.",
            )
        if options.allow_pickle:
            return original(BaseModel, "load").__func__(cls, path, device)
        data, state_dict = read_sb3_policy_file(path, TrustPolicy.make(trusted=trusted_names((cls,))), options.limits)
        params = {POLICY: {k: v.to(device) for k, v in state_dict.items()}}
    else:
        data, params, _ = zipsave.load_archive(
            path,
            device=device,
            allow_pickle=options.allow_pickle,
            trusted=trusted_names((cls,)),
            strict=options.strict,
            report=report,
            limits=options.limits,
            trust=options.trust,
        )
    if data is None or POLICY not in params:
        raise zipsave.ArchiveFormatError(
            f"holds no policy (`data` and `{POLICY}.pth`); was it written by `policy.save`?", archive=path
        )
    check_policy_arguments(data, archive=path, member="data")
    check_model_size(cls, {"policy_class": cls, "policy_kwargs": data, **data}, path, limits=options.limits)
    try:
        model = cls(**{key: _rebuild_extractor(value) for key, value in data.items()})
    except Exception as err:
        raise DecodeError(
            f"{cls.__name__} cannot be built from the saved constructor parameters ({type(err).__name__}: {err}).",
            archive=path,
            hint="Trust the classes named in the warnings above, or pass `allow_pickle=True` to install()."
            if report.skipped
            else "Was it saved from another version of the class?",
        ) from err
    try:
        model.load_state_dict(params[POLICY])
    except RuntimeError as err:  # torch's size mismatch / unexpected keys
        raise ParameterMismatchError(
            f"the {cls.__name__} built from the saved constructor parameters does not fit the saved weights "
            f"({str(err).strip()}).",
            archive=path,
            member=f"{POLICY}.pth",
            hint=f"{cls.__name__}._get_constructor_parameters() does not record every argument its constructor "
            "took; load the weights into a policy you build yourself: "
            "`policy.load_state_dict(zipsave.load_archive(path)[1]['policy'])`.",
        ) from err
    model.to(device)
    return model
