"""The demo behind ``python -m zipsave demo``: train a small REINFORCE agent on CartPole-v1,
save it, show the archive, load it back, and check it acts the same and keeps training."""

from __future__ import annotations

import os
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from typing import Any, TextIO

import gymnasium as gym
import numpy as np
import torch

from ._api import Saveable, load_archive

__all__ = ["Reinforce", "run_demo"]


class Reinforce(Saveable):
    """A minimal policy-gradient (REINFORCE) agent, as a ``Saveable``.

    Parameters
    ----------
    env
        A gymnasium environment with a discrete action space (not saved; pass it to ``load``).
    learning_rate
        Adam's learning rate.
    gamma
        Discount factor.
    net_arch
        Hidden layer sizes of the policy network.
    seed
        Seed for torch, numpy and the environment.
    """

    def __init__(
        self,
        env: Any = None,
        learning_rate: float = 1e-2,
        gamma: float = 0.99,
        net_arch: tuple[int, ...] = (32,),
        seed: int = 0,
    ) -> None:
        self.env = env
        self.learning_rate = learning_rate
        self.gamma = gamma
        self.seed = seed
        self.observation_space = (
            env.observation_space if env is not None else gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
        )
        self.action_space = env.action_space if env is not None else gym.spaces.Discrete(2)
        torch.manual_seed(seed)
        layers: list[torch.nn.Module] = []
        width = int(np.prod(self.observation_space.shape))
        for hidden in net_arch:
            layers += [torch.nn.Linear(width, hidden), torch.nn.Tanh()]
            width = hidden
        layers.append(torch.nn.Linear(width, int(self.action_space.n)))
        self.policy = torch.nn.Sequential(*layers)
        # SB3's layout: the optimizer hangs off the policy and is saved as policy.optimizer.pth.
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=learning_rate)
        self.policy.optimizer = self.optimizer  # type: ignore[assignment]
        self.num_timesteps = 0
        self.episode_returns: list[float] = []

    def predict(self, obs: np.ndarray, deterministic: bool = True) -> int:
        """The action for one observation (argmax, or sampled when not deterministic)."""
        with torch.no_grad():
            logits = self.policy(torch.as_tensor(obs, dtype=torch.float32))
        if deterministic:
            return int(torch.argmax(logits))
        return int(torch.distributions.Categorical(logits=logits).sample())

    def learn(self, episodes: int) -> Reinforce:
        """Run ``episodes`` episodes of REINFORCE updates."""
        if self.env is None:
            raise ValueError("learn() needs an environment: pass env= to the constructor or to load().")
        for episode in range(episodes):
            obs, _ = self.env.reset(seed=self.seed + self.num_timesteps + episode)
            log_probs, rewards = [], []
            done = False
            while not done:
                logits = self.policy(torch.as_tensor(obs, dtype=torch.float32))
                dist = torch.distributions.Categorical(logits=logits)
                action = dist.sample()
                obs, reward, terminated, truncated, _ = self.env.step(int(action))
                log_probs.append(dist.log_prob(action))
                rewards.append(float(reward))
                done = terminated or truncated
            returns, running = [], 0.0
            for r in reversed(rewards):
                running = r + self.gamma * running
                returns.append(running)
            ret = torch.tensor(returns[::-1])
            ret = (ret - ret.mean()) / (ret.std() + 1e-8) if len(ret) > 1 else ret
            loss = -(torch.stack(log_probs) * ret).sum()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            self.num_timesteps += len(rewards)
            self.episode_returns.append(sum(rewards))
        return self


def _summary(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 70 else text[:67] + "..."


def run_demo(seconds: float = 3.0, out: str | None = None, stream: TextIO = sys.stdout) -> int:
    """Train, save, inspect, load, compare and continue; return 0 when everything held.

    The archive is written into the folder ``out``; without one, into a temporary folder that
    is removed when the demo ends (a demo run leaves nothing behind)."""

    def say(text: str = "") -> None:
        print(text, file=stream)

    env = gym.make("CartPole-v1")
    try:
        model = Reinforce(env, seed=0)
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            model.learn(5)
        recent = model.episode_returns[-10:]
        say(
            f"trained REINFORCE on CartPole-v1 for {seconds:.0f} s: {len(model.episode_returns)} episodes, "
            f"{model.num_timesteps} steps, mean return of the last 10: {np.mean(recent):.1f}"
        )
        if out is not None:
            return _save_and_check(model, out, "", say)
        with tempfile.TemporaryDirectory(prefix="zipsave-demo-") as folder:
            kept = " (a temporary folder, removed when the demo ends: `--out FOLDER` keeps the archive)"
            return _save_and_check(model, folder, kept, say)
    finally:
        env.close()


def _save_and_check(model: Reinforce, folder: str, note: str, say: Callable[[str], None]) -> int:
    """Save ``model`` into ``folder``, show the archive, load it back, compare and continue."""
    path = os.path.join(folder, "reinforce_cartpole.zip")
    model.save(path)
    say(f"\nsaved to {path}{note}\n\nmembers:")
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            say(f"  {info.file_size:>10,d}  {info.filename}")
    data, _, _ = load_archive(path, device="cpu")
    say("\ndata:")
    for key, value in (data or {}).items():
        say(f"  {key:<20} {_summary(value)}")

    loaded = Reinforce.load(path, env=gym.make("CartPole-v1"), device="cpu")
    rng = np.random.default_rng(0)
    observations = rng.uniform(-0.5, 0.5, size=(200, 4)).astype(np.float32)
    same = all(model.predict(o) == loaded.predict(o) for o in observations)
    params_equal = all(
        torch.equal(a, b) for a, b in zip(model.policy.state_dict().values(), loaded.policy.state_dict().values())
    )
    say(f"\nloaded back: parameters equal: {params_equal}; same actions on 200 observations: {same}")
    before = loaded.num_timesteps
    loaded.learn(3)
    resumed = loaded.num_timesteps > before
    say(f"continued training: {before} -> {loaded.num_timesteps} steps")
    loaded.env.close()
    ok = same and params_equal and resumed and loaded.zipsave_report is not None and loaded.zipsave_report.ok
    say("\ndemo " + ("succeeded" if ok else "FAILED"))
    return 0 if ok else 1
