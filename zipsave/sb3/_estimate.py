"""What an SB3 model rebuilt from saved hyper-parameters will allocate, estimated from them
before SB3 is asked to build it, and refused past the load's :class:`~zipsave.Limits`.

A few bytes of ``data`` can ask for any size: ``n_steps=1e9`` is a rollout buffer of tens of
gigabytes, ``net_arch=[1e5, 1e5]`` ten billion parameters that SB3 initialises (touches) one
by one. The estimate counts what SB3's own classes build: the policy's parameters (features
extractor, ``net_arch`` in its list and dict forms, heads) and the rollout or replay buffer
(``n_steps`` or ``buffer_size`` times ``n_envs`` times the spaces' sizes), and the batch an
off-policy model samples at its first ``learn`` (``batch_size`` transitions: ``batch_size=1e15``
asked numpy for 7 PiB there). Every term is a
lower bound of what SB3 allocates (targets, second critics and optimizer state are left out,
an unknown features extractor counts only its output), so a real model is never refused for
a size it does not have.

The bound: ``Limits.max_model_bytes`` when the caller set one. Otherwise what the process can
be given at all, so that an allocation that would fail fails with a clear message before it
is tried: each array within physical memory plus swap, everything within the address-space
limit (``RLIMIT_AS``) when one is set; and the parameters within ``alloc_floor + alloc_ratio``
times the archive's size, since a real archive holds its parameters.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import operator
import os
from collections.abc import Mapping
from typing import Any

from .._bounds import alloc_budget
from .._printable import shown
from ..exceptions import ArchiveLimitError

__all__ = ["archive_size", "check_model_size", "estimate_model", "load_overrides"]


@dataclasses.dataclass
class Estimate:
    """The bytes a model will allocate, by part: ``(data key, what, bytes, largest array)``."""

    parts: list[tuple[str, str, int, int]] = dataclasses.field(default_factory=list)
    #: Linear layers of the policy: each a module of a few KB of Python objects, however small.
    layers: int = 0

    @property
    def total(self) -> int:
        return sum(part[2] for part in self.parts)

    def of(self, key: str) -> int:
        return sum(part[2] for part in self.parts if part[0] == key)


def _int(value: Any) -> int | None:
    """``value`` as the integer SB3 and torch take it for (an ``int``, a numpy integer, a
    one-element integer array or tensor: whatever has ``__index__``), or ``None``. A size of
    ``numpy.int64(60000)`` builds the layer ``60000`` does, so it is counted alike."""
    if isinstance(value, (str, bytes, bytearray, float)):
        return None
    try:
        return operator.index(value)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return None


def _count(value: Any, default: int, *, least: int = 0) -> int:
    number = _int(value)
    return number if number is not None and number >= least else default


#: Layers of a ``range`` read for the estimate (one with more grows past any budget before).
_MAX_LAYERS = 10_000
#: What a layer costs at least, whatever its size: SB3's ``nn.Linear`` takes 3.6 KB.
_LAYER_BYTES = 2048


def _items(value: Any) -> list | None:
    """The items SB3 iterates in a layer list: a list, tuple or deque, a 1-d array or tensor
    (each held in the archive), or a range (whose first layers bound the rest: it only grows)."""
    if isinstance(value, (list, tuple, collections.deque)):
        return list(value)
    if isinstance(value, range):
        return list(value[:_MAX_LAYERS])
    if getattr(value, "ndim", None) == 1 and hasattr(value, "tolist"):
        return list(value.tolist())
    return None


def _ints(value: Any) -> list[int] | None:
    items = _items(value)
    if items is None:
        return None
    ints = [n for n in map(_int, items) if n is not None and n >= 0]
    return ints if len(ints) == len(items) else None


def _kind(space: Any) -> str:
    return type(space).__name__


def _features(space: Any) -> int:
    """Inputs of a flattening extractor: one-hot for ``Discrete``, as SB3's ``preprocess_obs``."""
    kind = _kind(space)
    if kind == "Dict":
        return sum(_features(s) for s in getattr(space, "spaces", {}).values())
    if kind == "Discrete":
        return max(int(space.n), 0)
    if kind == "MultiDiscrete":
        return int(sum(int(n) for n in space.nvec.reshape(-1)))
    return math.prod(int(d) for d in (getattr(space, "shape", None) or ()))


def _stored(space: Any) -> int:
    """Bytes one observation or action takes in a replay buffer (SB3's ``get_obs_shape``)."""
    kind = _kind(space)
    if kind == "Dict":
        return sum(_stored(s) for s in getattr(space, "spaces", {}).values())
    itemsize = getattr(getattr(space, "dtype", None), "itemsize", 1) or 1
    if kind == "Discrete":
        return itemsize
    if kind == "MultiDiscrete":
        return int(space.nvec.size) * itemsize
    return math.prod(int(d) for d in (getattr(space, "shape", None) or ())) * itemsize


def _action_dim(space: Any) -> int:
    kind = _kind(space)
    if kind == "Discrete":
        return max(int(space.n), 0)
    if kind == "MultiDiscrete":
        return int(sum(int(n) for n in space.nvec.reshape(-1)))
    return math.prod(int(d) for d in (getattr(space, "shape", None) or ()))


def _nature_cnn(space: Any, features_dim: int) -> tuple[int, int]:
    """(parameters, output) of SB3's ``NatureCNN`` on a channel-first image space."""
    shape = getattr(space, "shape", None) or ()
    if len(shape) != 3:
        return 0, features_dim
    channels, height, width = (int(d) for d in shape)
    for kernel, stride in ((8, 4), (4, 2), (3, 1)):
        height, width = max((height - kernel) // stride + 1, 0), max((width - kernel) // stride + 1, 0)
    convs = channels * 8 * 8 * 32 + 32 * 4 * 4 * 64 + 64 * 3 * 3 * 64
    return convs + 64 * height * width * features_dim, features_dim


def _extractor(policy_class: Any, space: Any, kwargs: Mapping) -> tuple[int, int]:
    """(parameters, output size) of the policy's features extractor."""
    import inspect

    cls = kwargs.get("features_extractor_class")
    if cls is None:
        try:
            cls = inspect.signature(policy_class.__init__).parameters["features_extractor_class"].default
        except (KeyError, TypeError, ValueError, AttributeError):
            cls = None
    name = getattr(cls, "__name__", "")
    extra = kwargs.get("features_extractor_kwargs") or {}
    extra = extra if isinstance(extra, Mapping) else {}
    if name == "NatureCNN":
        dim = extra.get("features_dim", 512)
        return _nature_cnn(space, _count(dim, 512))
    if name == "CombinedExtractor" and _kind(space) == "Dict":
        out_dim = extra.get("cnn_output_dim", 256)
        out_dim = _count(out_dim, 256)
        params = size = 0
        for sub in space.spaces.values():
            if len(getattr(sub, "shape", None) or ()) == 3 and getattr(getattr(sub, "dtype", None), "kind", "") == "u":
                p, n = _nature_cnn(sub, out_dim)
            else:
                p, n = 0, _features(sub)
            params, size = params + p, size + n
        return params, size
    if name in ("FlattenExtractor", ""):
        return 0, _features(space)
    dim = extra.get("features_dim")  # another extractor: its output only
    return 0, _count(dim, 0)


def _mlp(inputs: int, layers: list[int], outputs: int) -> int:
    total, width = 0, inputs
    for size in layers:
        total += width * size + size
        width = size
    return total + (width * outputs + outputs if outputs else 0)


def _branches(net_arch: Any) -> tuple[list[int], list[list[int]]]:
    """(shared layers, branch layers) of ``net_arch``: ``[64, 64]``, ``dict(pi=.., vf=..)``
    (``qf``), and SB3 < 1.8's ``[64, dict(pi=.., vf=..)]``."""
    shared: list[int] = []
    branches: list[list[int]] = []
    items = [net_arch] if isinstance(net_arch, Mapping) else _items(net_arch) or []
    for item in items:
        size = _int(item)
        if size is not None and size >= 0 and not branches:
            shared.append(size)
        elif isinstance(item, Mapping):
            branches += [layers for layers in map(_ints, item.values()) if layers is not None]
    return shared, branches


def _policy_params(policy_class: Any, observation_space: Any, action_space: Any, kwargs: Mapping) -> tuple[int, int]:
    """(parameters, linear layers) of the policy: its extractor, ``net_arch`` and heads, and
    the ``n_critics`` Q-networks of SAC's and TD3's policies."""
    extractor, features = _extractor(policy_class, observation_space, kwargs)
    net_arch = kwargs.get("net_arch")
    shared, branches = _branches(net_arch)
    total = extractor + _mlp(features, shared, 0)
    width = shared[-1] if shared else features
    outputs = _action_dim(action_space)
    for index, layers in enumerate(branches or [[]]):
        total += _mlp(width, layers, outputs if index == 0 else 1)
    count = len(shared) + sum(len(layers) + 1 for layers in branches or [[]])
    critics = _default(policy_class, "n_critics")
    if critics is not None:  # each critic `create_mlp(features + actions, 1, qf)`, as SB3's ContinuousCritic
        critics = _count(kwargs.get("n_critics", critics), 0)
        qf = _ints(net_arch.get("qf") if isinstance(net_arch, Mapping) else net_arch) or []
        total += critics * _mlp(features + outputs, qf, 1)
        count += critics * (len(qf) + 1)
    return total, count


def _default(policy_class: Any, name: str) -> Any:
    import inspect

    try:
        return inspect.signature(policy_class.__init__).parameters[name].default
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def estimate_model(params: Mapping[str, Any]) -> Estimate:
    """What SB3 will allocate to build a model from ``params`` (its saved ``data`` with the
    caller's overrides): parameters under ``policy_kwargs``, the rollout buffer under
    ``n_steps``, the replay buffer under ``buffer_size``. Unknown shapes count as nothing."""
    out = Estimate()
    obs, act = params.get("observation_space"), params.get("action_space")
    if obs is None or act is None:
        return out
    n_envs = params.get("n_envs")
    n_envs = _count(n_envs, 1, least=1)
    kwargs = params.get("policy_kwargs") or {}
    kwargs = kwargs if isinstance(kwargs, Mapping) else {}
    try:
        count, out.layers = _policy_params(params.get("policy_class"), obs, act, kwargs)
        out.parts.append(("policy_kwargs", f"a policy of about {shown(count)} parameters", 4 * count, 4 * count))
        n_steps, size = _count(params.get("n_steps"), 0), _count(params.get("buffer_size"), 0)
        if n_steps > 0 and "buffer_size" not in params:  # off-policy: n-step returns
            rows = n_steps * n_envs
            observations = rows * _stored(obs)  # at their dtype (older SB3 kept float32: more)
            nbytes = observations + rows * (_stored_action(act) + 4 * 6)
            out.parts.append(
                ("n_steps", f"a rollout buffer of {shown(n_steps)} steps x {shown(n_envs)} envs", nbytes, observations)
            )
        if size > 0:
            rows = max(size // n_envs, 1) * n_envs
            copies = 1 if params.get("optimize_memory_usage") is True else 2
            observations = rows * _stored(obs)
            nbytes = copies * observations + rows * (_stored_action(act) + 12)
            what = f"a replay buffer of {shown(size)} transitions" + (f" x {shown(n_envs)} envs" if rows > size else "")
            out.parts.append(("buffer_size", what, nbytes, observations))
            batch = _count(params.get("batch_size"), 0)  # each train step samples it, with replacement
            batch = batch if batch < 2**63 else 0  # no size numpy takes: skipped as a value learn cannot use
            observations = batch * 2 * _stored(obs)  # and the next ones
            nbytes = observations + batch * (_stored_action(act) + 8 + 12)  # its row numbers too
            out.parts.append(
                (
                    "batch_size",
                    f"a batch of {shown(batch)} transitions, sampled at every train step",
                    nbytes,
                    observations,
                )
            )
    except (AttributeError, TypeError, ValueError, OverflowError):
        pass  # spaces SB3 itself will refuse; nothing to estimate
    return out


def _stored_action(space: Any) -> int:
    """Bytes of one action in a buffer: its elements (one for ``Discrete``) at their dtype's
    size, at most 4 (SB3 keeps float64 actions as float32; older versions kept every action
    as float32)."""
    kind = _kind(space)
    if kind == "Discrete":
        elements = 1
    elif kind == "MultiDiscrete":
        elements = int(space.nvec.size)
    else:
        elements = math.prod(int(d) for d in (getattr(space, "shape", None) or ()))
    itemsize = getattr(getattr(space, "dtype", None), "itemsize", 4) or 4
    return elements * min(itemsize, 4)


def archive_size(path: Any) -> int | None:
    """Bytes of an archive: an open load session (its members' stored bytes), a path or an
    open file (``None`` when it cannot be told: a URL)."""
    reader = getattr(path, "reader", None)
    if reader is not None:
        return sum(reader.info(name).compress_size for name in reader.names())
    try:
        if hasattr(path, "seek"):
            at = path.tell()
            try:
                return int(path.seek(0, os.SEEK_END))
            finally:
                path.seek(at)
        return os.path.getsize(path)
    except (OSError, TypeError, ValueError):
        return None


def load_overrides(kwargs: Mapping[str, Any], not_data: Any) -> dict[str, Any]:
    """The ``data`` values an ``Algo.load(path, env=..., **kwargs)`` call replaces: its keyword
    arguments that are not ``load``'s own (``not_data``), and ``n_envs`` from ``env``."""
    out = {key: value for key, value in kwargs.items() if key not in not_data}
    if kwargs.get("env") is not None:
        out["n_envs"] = getattr(kwargs["env"], "num_envs", 1)
    return out


def _allocatable() -> tuple[int | None, int | None]:
    """(physical memory plus swap, the address-space limit ``RLIMIT_AS``); None where unknown.
    The limit bounds everything the process maps, so a model larger than it cannot be built
    (the address space already used is not read: that would open ``/proc/self``)."""
    memory = None
    try:
        with open("/proc/meminfo") as fp:
            fields = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in fp if line.split()[1:2]}
        memory = fields["MemTotal"] + fields.get("SwapTotal", 0)
    except (OSError, KeyError, ValueError, IndexError):
        try:
            memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, AttributeError):
            pass
    limit = None
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        limit = None if soft == resource.RLIM_INFINITY else soft
    except (ImportError, OSError, ValueError):
        pass
    return memory, limit


def check_model_size(cls: Any, params: Mapping[str, Any], source: Any, *, limits: Any = None) -> None:
    """Refuse, before SB3 builds it, a ``cls`` whose estimated size (:func:`estimate_model` of
    ``params``) passes the load's ``limits`` (see the module docstring); ``source`` is the
    archive (a load session, a path or a file). :class:`ArchiveLimitError` naming the ``data``
    key, the estimate, the bound and how to raise it."""
    est = estimate_model(params)
    archive = getattr(source, "name", None) if hasattr(source, "reader") else source
    archive_bytes = archive_size(source)
    name = getattr(cls, "__name__", "the model")
    cap = getattr(limits, "max_model_bytes", None)
    # SB3 makes every layer a module (3.6 KB of Python objects and 0.1 ms each): n_critics=3e6
    # took minutes to build; a real archive holds each layer's weights, bias and their names.
    modules = ("policy_kwargs", f"a policy of {shown(est.layers)} layers", est.layers * _LAYER_BYTES, 0)
    if cap is not None:
        if est.total > cap:
            _refuse(name, est, max(est.parts, key=lambda p: p[2]), f"`Limits.max_model_bytes` ({cap})", archive)
        if modules[2] > cap:
            _refuse(name, est, modules, f"`Limits.max_model_bytes` ({cap}), at {_LAYER_BYTES} bytes a layer", archive)
        return
    budget = alloc_budget(archive_bytes or 0, limits)
    if archive_bytes is not None and modules[2] > budget:
        _refuse(
            name,
            est,
            modules,
            f"the {budget} bytes an archive of {archive_bytes} bytes may build, at "
            f"{_LAYER_BYTES} bytes a layer (a real archive holds each layer's weights)",
            archive,
        )
    params_part = next((p for p in est.parts if p[0] == "policy_kwargs"), None)
    if archive_bytes is not None and params_part is not None and params_part[2] > budget:
        _refuse(
            name,
            est,
            params_part,
            f"the {budget} bytes of parameters an archive of {archive_bytes} bytes may "
            "build (`Limits.alloc_floor` plus `Limits.alloc_ratio` times its size; a real archive holds its "
            "parameters)",
            archive,
        )
    memory, limit = _allocatable()
    for part in est.parts:
        if memory is not None and part[3] > memory:
            _refuse(name, est, part, f"the {memory} bytes of memory and swap of this machine", archive)
    if limit is not None and est.total > limit:
        _refuse(
            name,
            est,
            max(est.parts, key=lambda p: p[2]),
            f"the {limit} bytes of address space this process may map (`RLIMIT_AS`)",
            archive,
        )


def _bytes(n: int) -> str:
    return f"about {n} bytes" if n.bit_length() <= 64 else f"more than 2**{n.bit_length() - 1} bytes"


def _refuse(name: str, est: Estimate, part: tuple[str, str, int, int], bound: str, archive: Any) -> None:
    key, what, nbytes, _ = part
    raise ArchiveLimitError(
        f"building this {name} would allocate {_bytes(est.total)} before its saved state is read: `{key}` "
        f"asks for {what}, {_bytes(nbytes)}, more than {bound}.",
        archive=archive,
        member="data",
        key=key,
        hint=f"If the archive is yours, raise the bound with `limits=zipsave.Limits(max_model_bytes=...)` "
        f"(`zipsave.sb3.install(limits=...)` for `{name}.load`), or pass a smaller `{key}` to load.",
    )
