"""Small model classes shared by the tests (module-level, so init.json can name them)."""

from __future__ import annotations

import collections
import io
import json
import zipfile

import gymnasium as gym
import numpy as np
import torch

import zipsave


class Algo(zipsave.Saveable):
    """An SB3-shaped algorithm: a policy with its optimizer, a loose tensor, spaces, buffers."""

    def __init__(self, env=None, learning_rate=3e-4, net_arch=(16, 16), seed=0):
        torch.manual_seed(seed)
        self.env = env
        self.learning_rate = learning_rate
        self.net_arch = net_arch
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        layers, width = [], 4
        for hidden in net_arch:
            layers += [torch.nn.Linear(width, hidden), torch.nn.Tanh()]
            width = hidden
        layers.append(torch.nn.Linear(width, 2))
        self.policy = torch.nn.Sequential(*layers)
        self.policy.optimizer = torch.optim.Adam(self.policy.parameters(), lr=learning_rate)
        self.log_ent_coef = torch.zeros(1, requires_grad=True)
        self.num_timesteps = 0
        self.ep_info_buffer = collections.deque(maxlen=10)
        self._last_obs = None

    def train_step(self, n=1):
        gen = torch.Generator().manual_seed(self.num_timesteps)
        for _ in range(n):
            obs = torch.randn(8, 4, generator=gen)
            loss = self.policy(obs).pow(2).mean() + self.log_ent_coef.pow(2).sum()
            self.policy.optimizer.zero_grad()
            loss.backward()
            self.policy.optimizer.step()
            with torch.no_grad():
                self.log_ent_coef -= 0.01
            self.num_timesteps += 8
            self.ep_info_buffer.append({"r": float(loss.detach()), "l": self.num_timesteps})
        self._last_obs = obs.numpy()
        return self

    def predict(self, obs):
        with torch.no_grad():
            return self.policy(torch.as_tensor(obs, dtype=torch.float32)).argmax(-1).numpy()


class Plain(zipsave.Saveable):
    """A Saveable with only plain values."""

    def __init__(self, a=1, b="x"):
        self.a = a
        self.b = b


def same_state(a: torch.nn.Module | torch.optim.Optimizer, b) -> bool:
    """Deep equality of two state dicts (tensors compared exactly)."""
    return _equal(a.state_dict(), b.state_dict())


def _equal(x, y) -> bool:
    if isinstance(x, torch.Tensor):
        return isinstance(y, torch.Tensor) and x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)
    if isinstance(x, dict):
        return isinstance(y, dict) and x.keys() == y.keys() and all(_equal(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)):
        return type(x) is type(y) and len(x) == len(y) and all(_equal(p, q) for p, q in zip(x, y))
    return x == y


class ModuleAgent(zipsave.Saveable, torch.nn.Module):
    """A model that is itself a module, with an optimizer, a parameter and a buffer of its own."""

    def __init__(self, hidden: int = 4, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.body = torch.nn.Linear(3, hidden)
        self.head = torch.nn.Linear(hidden, 2)
        self.scale = torch.nn.Parameter(torch.ones(1))
        self.register_buffer("count", torch.zeros(1))
        self.register_buffer("scratch", torch.zeros(2), persistent=False)
        self.optimizer = torch.optim.Adam(self.parameters(), lr=1e-3)
        self.gamma = 0.99


def bits_env():
    """SB3's BitFlippingEnv (4 bits, 4 steps), vectorised: a goal env for HER models."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.envs import BitFlippingEnv

    return make_vec_env(BitFlippingEnv, n_envs=1, seed=0, env_kwargs={"n_bits": 4, "max_steps": 4})


def her_model(buffer_size: int = 300, **buffer_kwargs):
    """A small DQN with a HerReplayBuffer on :func:`bits_env` (``buffer_kwargs`` added to the
    buffer's); SB3 is imported here, so that importing this module does not import it."""
    from stable_baselines3 import DQN, HerReplayBuffer

    kwargs = {"n_sampled_goal": 2, "goal_selection_strategy": "future", **buffer_kwargs}
    return DQN(
        "MultiInputPolicy",
        bits_env(),
        buffer_size=buffer_size,
        learning_starts=8,
        replay_buffer_class=HerReplayBuffer,
        replay_buffer_kwargs=kwargs,
        policy_kwargs={"net_arch": [8]},
        device="cpu",
        seed=0,
    )


def rewrite_data(saved: bytes, path, data: dict) -> str:
    """``saved`` (an archive's bytes) with ``data`` keys replaced by the JSON values given,
    written to ``path`` without a manifest (so the change is not a checksum mismatch)."""
    with zipfile.ZipFile(io.BytesIO(saved)) as zf:
        items = {n: zf.read(n) for n in zf.namelist() if n != "manifest.json"}
    raw = json.loads(items["data"])
    raw.update(data)
    items["data"] = json.dumps(raw).encode()
    with zipfile.ZipFile(path, "w") as zf:
        for name, raw_bytes in items.items():
            zf.writestr(name, raw_bytes)
    return str(path)
