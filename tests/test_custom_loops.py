"""zipsave in hand-written training loops (CleanRL-style PPO, DQN and SAC with torch and
gymnasium, no SB3): app-state checkpoints resumed bit-identically, a ``Saveable`` agent loaded
for evaluation, a ``CheckpointManager`` in the loop, and environments kept out of the archive."""

from __future__ import annotations

import argparse
import collections
import dataclasses
import enum
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

import zipsave
import zipsave.sb3


# -- PPO on CartPole: an app state with the normalization statistics ---------------------------
class PPOAgent(nn.Module):
    def __init__(self):
        super().__init__()
        self.critic = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
        self.actor = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))


def make_envs():
    def thunk():
        env = gym.make("CartPole-v1")
        env = gym.wrappers.RecordEpisodeStatistics(env)
        return gym.wrappers.NormalizeObservation(env)

    return gym.vector.SyncVectorEnv([thunk, thunk])


def normalizers(envs):
    """The NormalizeObservation wrapper of each environment (docs/checkpointing.rst)."""
    found = []
    for env in envs.envs:
        while not isinstance(env, gym.wrappers.NormalizeObservation):
            env = env.env
        found.append(env)
    return found


def ppo(updates, *, stop_at=None, resume=None, path=None):
    """CleanRL's PPO loop, shrunk: each update resets the envs with its own seed, so a resumed
    run sees the same observations (given the same normalization statistics)."""
    args = argparse.Namespace(seed=1, learning_rate=3e-3, num_steps=16, minibatch_size=16)
    torch.manual_seed(args.seed)
    envs = make_envs()
    agent = PPOAgent()
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, 1.0, 0.1, total_iters=updates)
    app_state = {
        "agent": agent,
        "optimizer": optimizer,
        "scheduler": scheduler,
        "update": 0,
        "global_step": 0,
        "args": args,
        "obs_rms": [vars(w.obs_rms) for w in normalizers(envs)],
        "np_rng": np.random.default_rng(args.seed),
        "rng": zipsave.RNGState(),
    }
    if resume is not None:
        zipsave.restore(app_state, resume, strict=True)
    np_rng = app_state["np_rng"]
    while app_state["update"] < updates:
        obs, _ = envs.reset(seed=100 + app_state["update"])
        batch_obs, batch_act, batch_ret = [], [], []
        for _ in range(args.num_steps):
            obs_t = torch.as_tensor(obs, dtype=torch.float32)
            with torch.no_grad():
                action = torch.distributions.Categorical(logits=agent.actor(obs_t)).sample()
            obs, reward, _, _, _ = envs.step(action.numpy())
            batch_obs.append(obs_t)
            batch_act.append(action)
            batch_ret.append(torch.as_tensor(reward, dtype=torch.float32))
            app_state["global_step"] += envs.num_envs
        b_obs, b_act = torch.cat(batch_obs), torch.cat(batch_act)
        b_ret = torch.cat(batch_ret).flip(0).cumsum(0).flip(0)
        b_inds = np_rng.permutation(len(b_obs))
        for start in range(0, len(b_obs), args.minibatch_size):
            idx = torch.as_tensor(b_inds[start : start + args.minibatch_size])
            value = agent.critic(b_obs[idx]).squeeze(-1)
            logp = torch.distributions.Categorical(logits=agent.actor(b_obs[idx])).log_prob(b_act[idx])
            adv = b_ret[idx] - value.detach()
            loss = -(logp * adv).mean() + 0.5 * (b_ret[idx] - value).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        scheduler.step()
        app_state["update"] += 1
        if app_state["update"] == stop_at:
            zipsave.save(app_state, path)
            break
    return agent, envs, app_state


def test_ppo_resumed_from_an_app_state_is_bit_identical(tmp_path):
    path = tmp_path / "ppo.zip"
    reference, ref_envs, ref_state = ppo(4)
    ppo(4, stop_at=2, path=path)
    resumed, envs, state = ppo(4, resume=path)  # new objects, as in a fresh process

    assert state["update"] == 4 and state["global_step"] == ref_state["global_step"] == 4 * 16 * 2
    for a, b in zip(resumed.parameters(), reference.parameters(), strict=True):
        assert torch.equal(a, b)
    # The running statistics went back into the wrappers themselves (their `__dict__`s).
    for live, ref in zip(normalizers(envs), normalizers(ref_envs), strict=True):
        assert live.obs_rms.count == ref.obs_rms.count
        np.testing.assert_array_equal(live.obs_rms.mean, ref.obs_rms.mean)
        np.testing.assert_array_equal(live.obs_rms.var, ref.obs_rms.var)
    assert state["scheduler"].get_last_lr() == ref_state["scheduler"].get_last_lr()


def test_an_environment_in_an_app_state_is_an_error_that_names_the_key_and_env_state(tmp_path):
    envs = make_envs()
    envs.reset(seed=0)
    for key, env in [("envs", envs), ("env", envs.envs[0])]:
        with pytest.raises(zipsave.EncodeError, match=re.escape("a live handle (an environment")) as caught:
            zipsave.save({"agent": PPOAgent(), key: env, "step": 3}, tmp_path / "run.zip")
        assert caught.value.key == key
        assert f"`{{{key!r}: zipsave.EnvState(env)}}`" in str(caught.value)
        assert not (tmp_path / "run.zip").exists()  # validated before a byte was written
    zipsave.save({"envs": envs, "step": 3}, tmp_path / "forced.zip", exclude=["envs"])
    assert zipsave.load(tmp_path / "forced.zip") == {"step": 3}


def test_restore_fills_the_loops_own_buffers_in_place(tmp_path):
    # A script keeps its own references: `rb = ...; app_state = {"rb": rb}`; after restore
    # those must hold the saved values, not a fresh buffer the dict no longer points at.
    rb = {"obs": np.arange(12, dtype=np.float32).reshape(6, 2), "pos": 4, "full": False}
    recent = collections.deque([(np.ones(2), 1, 0.5, False)], maxlen=3)
    returns = [1.0, 2.0]
    table = torch.arange(4.0)
    args = argparse.Namespace(seed=7, gamma=0.9)
    zipsave.save({"rb": rb, "recent": recent, "returns": returns, "table": table, "args": args}, tmp_path / "b.zip")

    live = {
        "rb": {"obs": np.zeros((6, 2), np.float32), "pos": 0, "full": False},
        "recent": collections.deque(maxlen=3),
        "returns": [],
        "table": torch.zeros(4),
        "args": argparse.Namespace(seed=0, gamma=0.99),
    }
    held = dict(live)
    obs_array = live["rb"]["obs"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # argparse.Namespace needs no trust
        zipsave.restore(live, tmp_path / "b.zip", strict=True)
    assert all(live[key] is held[key] for key in held)
    assert live["rb"]["obs"] is obs_array
    np.testing.assert_array_equal(obs_array, rb["obs"])
    assert live["rb"]["pos"] == 4
    assert len(held["recent"]) == 1 and held["recent"][0][1:] == (1, 0.5, False)
    assert held["returns"] == [1.0, 2.0]
    assert torch.equal(held["table"], table)
    assert vars(held["args"]) == {"seed": 7, "gamma": 0.9}


class Phase(enum.Enum):
    TRAIN = "train"
    EVAL = "eval"


@dataclasses.dataclass(frozen=True)
class Frozen:
    n: int = 0


def test_restore_replaces_what_cannot_change_in_place(tmp_path):
    zipsave.save({"phase": Phase.EVAL, "frozen": Frozen(3), "obs": np.ones(3), "step": 5}, tmp_path / "v.zip")
    live = {"phase": Phase.TRAIN, "frozen": Frozen(0), "obs": np.zeros(4), "step": 0}
    obs = live["obs"]
    zipsave.restore(live, tmp_path / "v.zip", trusted=[f"{__name__}.Phase", f"{__name__}.Frozen"])
    assert live["phase"] is Phase.EVAL and Phase.TRAIN.value == "train"  # the enum member is untouched
    assert live["frozen"] == Frozen(3)
    assert live["obs"] is not obs and np.array_equal(live["obs"], np.ones(3))  # another shape: replaced
    assert live["step"] == 5


# -- SAC on Pendulum: target networks, three optimizers, a GradScaler ---------------------------
@dataclasses.dataclass
class SACArgs:
    seed: int = 3
    tau: float = 0.05
    batch_size: int = 32


def soft_q(hidden=16):
    return nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, 1))


def make_sac(seed):
    torch.manual_seed(seed)
    actor = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 1), nn.Tanh())
    qf1, qf2 = soft_q(), soft_q()
    qf1_target, qf2_target = soft_q(), soft_q()
    qf1_target.load_state_dict(qf1.state_dict())
    qf2_target.load_state_dict(qf2.state_dict())
    log_alpha = torch.zeros(1, requires_grad=True)
    return {
        "actor": actor,
        "qf1": qf1,
        "qf2": qf2,
        "qf1_target": qf1_target,
        "qf2_target": qf2_target,
        "q_optimizer": torch.optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=1e-3),
        "actor_optimizer": torch.optim.Adam(actor.parameters(), lr=3e-4),
        "log_alpha": log_alpha,
        "a_optimizer": torch.optim.Adam([log_alpha], lr=1e-3),
        "scaler": torch.amp.GradScaler("cpu", init_scale=2.0**8),
        "rb": {
            "obs": np.zeros((64, 3), np.float32),
            "act": np.zeros((64, 1), np.float32),
            "rew": np.zeros(64, np.float32),
            "next_obs": np.zeros((64, 3), np.float32),
            "pos": 0,
        },
        "global_step": 0,
        "rng": zipsave.RNGState(),
    }


def sac_steps(state, env, n, args):
    s = state
    obs = s.setdefault("_obs", env.reset(seed=args.seed)[0])
    for _ in range(n):
        with torch.no_grad():
            action = s["actor"](torch.as_tensor(obs)).numpy() * 2.0 + np.float32(0.1) * torch.randn(1).numpy()
        next_obs, reward, terminated, truncated, _ = env.step(action.astype(np.float32))
        rb, i = s["rb"], s["rb"]["pos"] % 64
        rb["obs"][i], rb["act"][i], rb["rew"][i], rb["next_obs"][i] = obs, action, reward, next_obs
        rb["pos"] += 1
        obs = env.reset()[0] if terminated or truncated else next_obs
        s["global_step"] += 1
        if rb["pos"] < args.batch_size:
            continue
        idx = torch.randint(0, min(rb["pos"], 64), (args.batch_size,))
        o, a, r, o2 = (torch.as_tensor(rb[k][idx.numpy()]) for k in ("obs", "act", "rew", "next_obs"))
        alpha = s["log_alpha"].exp().detach()
        with torch.no_grad():
            a2 = s["actor"](o2) * 2.0
            target = r + 0.99 * torch.min(
                s["qf1_target"](torch.cat([o2, a2], 1)), s["qf2_target"](torch.cat([o2, a2], 1))
            ).squeeze(-1)
        qa = torch.cat([o, a], 1)
        q_loss = (s["qf1"](qa).squeeze(-1) - target).pow(2).mean() + (s["qf2"](qa).squeeze(-1) - target).pow(2).mean()
        s["q_optimizer"].zero_grad()
        s["scaler"].scale(q_loss).backward()
        s["scaler"].step(s["q_optimizer"])
        s["scaler"].update()
        pi = s["actor"](o) * 2.0
        actor_loss = (alpha * pi.pow(2).mean() - s["qf1"](torch.cat([o, pi], 1))).mean()
        s["actor_optimizer"].zero_grad()
        actor_loss.backward()
        s["actor_optimizer"].step()
        alpha_loss = -(s["log_alpha"] * (actor_loss.detach() + 1.0)).mean()
        s["a_optimizer"].zero_grad()
        alpha_loss.backward()
        s["a_optimizer"].step()
        for net, target_net in (("qf1", "qf1_target"), ("qf2", "qf2_target")):
            for p, tp in zip(s[net].parameters(), s[target_net].parameters()):
                tp.data.copy_(args.tau * p.data + (1 - args.tau) * tp.data)
    s["_obs"] = obs


def test_sac_with_targets_three_optimizers_and_a_grad_scaler_resumes_exactly(tmp_path):
    args = SACArgs()
    state = make_sac(args.seed)
    sac_steps(state, gym.make("Pendulum-v1"), 48, args)
    saved = {k: v for k, v in state.items() if k != "_obs"}
    saved["args"] = dataclasses.asdict(args)  # a dataclass of `__main__` would need pickle
    zipsave.save(saved, tmp_path / "sac.zip")
    del state["_obs"]  # both runs go on in a new environment seeded alike
    sac_steps(state, gym.make("Pendulum-v1"), 16, args)

    fresh = make_sac(seed=99)  # other initial weights: everything must come from the archive
    rb_obs = fresh["rb"]["obs"]
    fresh["args"] = {}
    zipsave.restore(fresh, tmp_path / "sac.zip", strict=True)
    assert fresh["global_step"] == 48 and fresh["args"] == {"seed": 3, "tau": 0.05, "batch_size": 32}
    assert fresh["rb"]["obs"] is rb_obs and fresh["rb"]["pos"] == 48
    assert fresh["scaler"].get_scale() == 2.0**8
    assert fresh["a_optimizer"].param_groups[0]["params"][0] is fresh["log_alpha"]
    sac_steps(fresh, gym.make("Pendulum-v1"), 16, args)
    for key in ("actor", "qf1", "qf2", "qf1_target", "qf2_target"):
        for a, b in zip(fresh[key].parameters(), state[key].parameters(), strict=True):
            assert torch.equal(a, b), key
    assert torch.equal(fresh["log_alpha"], state["log_alpha"])
    np.testing.assert_array_equal(fresh["rb"]["obs"], state["rb"]["obs"])


# -- A Saveable agent, the CleanRL way, loaded for evaluation ----------------------------------
class ContinuousAgent(zipsave.Saveable, nn.Module):
    def __init__(self, obs_dim=3, act_dim=1, hidden=16):
        super().__init__()
        self.critic = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        self.actor_mean = nn.Sequential(
            nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Dropout(0.5), nn.Linear(hidden, act_dim)
        )
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))

    def forward(self, x):
        return self.actor_mean(x)


def train_continuous(agent, steps=64):
    env = gym.make("Pendulum-v1")
    obs, _ = env.reset(seed=0)
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3)
    for _ in range(steps):
        obs_t = torch.as_tensor(obs, dtype=torch.float32)
        dist = torch.distributions.Normal(agent(obs_t), agent.actor_logstd.exp())
        action = dist.sample()
        obs, reward, _, _, _ = env.step(action[0].clamp(-2.0, 2.0).numpy())
        loss = -(dist.log_prob(action).sum() * float(reward) / 16) + agent.critic(obs_t).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return env


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.compile imports torch.jit internals
@pytest.mark.parametrize("compiled", [False, True])
def test_a_saveable_cleanrl_agent_loads_for_evaluation(tmp_path, compiled):
    torch.manual_seed(0)
    agent = ContinuousAgent(hidden=12)
    env = train_continuous(agent)
    agent.eval()
    # `torch.compile(agent)` is what a script trains; saving it used to fail on its `forward`.
    zipsave.save(torch.compile(agent) if compiled else agent, tmp_path / "agent.zip")

    loaded = ContinuousAgent.load(tmp_path / "agent.zip", device="cpu")
    assert isinstance(loaded, ContinuousAgent) and loaded.critic[0].out_features == 12
    assert not loaded.training and not loaded.actor_mean[2].training  # dropout off for evaluation
    assert torch.equal(loaded.actor_logstd, agent.actor_logstd)
    assert torch.equal(
        zipsave.read(tmp_path / "agent.zip", "pytorch_variables/actor_logstd"), agent.actor_logstd.detach()
    )
    obs = torch.as_tensor(env.observation_space.sample())
    with torch.no_grad():
        assert torch.equal(loaded(obs), agent(obs))


def test_an_app_state_loads_in_a_fresh_interpreter_into_load_state_dict(tmp_path):
    torch.manual_seed(0)
    agent = ContinuousAgent(hidden=12)
    train_continuous(agent, steps=16)
    args = argparse.Namespace(env_id="Pendulum-v1", seed=1, total_timesteps=16)
    zipsave.save({"agent": agent, "args": args, "global_step": 16}, tmp_path / "run.zip")
    script = textwrap.dedent(f"""
        import warnings; warnings.simplefilter("error")
        import torch, zipsave
        from tests.test_custom_loops import ContinuousAgent
        state = zipsave.load({str(tmp_path / "run.zip")!r})
        agent = ContinuousAgent(hidden=state["args"].__dict__.get("hidden", 12))
        agent.load_state_dict(state["agent"])
        print(state["args"].env_id, state["global_step"], agent.actor_logstd.sum().item())
    """)
    root = Path(__file__).resolve().parent.parent  # where `tests.test_custom_loops` imports from
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=root
    ).stdout.split()
    assert out[:2] == ["Pendulum-v1", "16"]
    assert float(out[2]) == agent.actor_logstd.sum().item()


# -- DQN with a CheckpointManager: crash, resume, evaluate the best ----------------------------
class QNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.network = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))

    def forward(self, x):
        return self.network(x)


def dqn(directory, total_steps, crash_at=None):
    torch.manual_seed(0)
    env = gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1"))
    q_network, target_network = QNetwork(), QNetwork()
    target_network.load_state_dict(q_network.state_dict())
    optimizer = torch.optim.Adam(q_network.parameters(), lr=1e-3)
    rb = collections.deque(maxlen=200)
    app_state = {
        "q_network": q_network,
        "target_network": target_network,
        "optimizer": optimizer,
        "rb": rb,
        "global_step": 0,
        "episodes": 0,
        "rng": zipsave.RNGState(),
    }
    with zipsave.CheckpointManager(
        directory, keep_last=2, keep_best=("episodic_return", "max"), every_steps=40, background=False
    ) as manager:
        manager.restore_latest(app_state)
        obs, _ = env.reset(seed=app_state["global_step"])
        episodic_return = None
        while app_state["global_step"] < total_steps:
            app_state["global_step"] += 1
            step = app_state["global_step"]
            if torch.rand(()) < max(0.05, 1 - step / 100):
                action = int(torch.randint(0, 2, ()))
            else:
                with torch.no_grad():
                    action = int(q_network(torch.as_tensor(obs)).argmax())
            next_obs, reward, terminated, truncated, info = env.step(action)
            rb.append((obs, action, float(reward), next_obs, terminated))
            obs = next_obs
            if terminated or truncated:
                episodic_return = info["episode"]["r"]  # gymnasium 0.29: an array of shape (1,)
                app_state["episodes"] += 1
                obs, _ = env.reset()
            if len(rb) >= 32:
                batch = [rb[int(i)] for i in torch.randint(0, len(rb), (32,))]
                o, a, r, o2, d = (torch.as_tensor(np.array(x), dtype=torch.float32) for x in zip(*batch))
                with torch.no_grad():
                    target = r + 0.99 * target_network(o2).max(1).values * (1 - d)
                loss = (q_network(o).gather(1, a.long()[:, None]).squeeze(1) - target).pow(2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            if step % 25 == 0:
                target_network.load_state_dict(q_network.state_dict())
            metrics = {"episodic_return": episodic_return} if episodic_return is not None else {}
            manager.save(step, app_state, metrics=metrics)
            if step == crash_at:
                raise RuntimeError("the machine went away")
    return app_state


def test_dqn_with_a_checkpoint_manager_resumes_after_a_crash_and_evaluates_the_best(tmp_path):
    with pytest.raises(RuntimeError, match="went away"):
        dqn(tmp_path / "ckpt", 200, crash_at=130)
    with zipsave.CheckpointManager(tmp_path / "ckpt") as manager:
        assert [c.step for c in manager.list()][-1] == 120

    resumed_rb = collections.deque(maxlen=200)
    probe = {
        "q_network": QNetwork(),
        "target_network": QNetwork(),
        "rb": resumed_rb,
        "global_step": 0,
        "rng": zipsave.RNGState(),
    }
    probe["optimizer"] = torch.optim.Adam(probe["q_network"].parameters(), lr=1e-3)
    with zipsave.CheckpointManager(tmp_path / "ckpt") as manager:
        latest = manager.restore_latest(probe)
    assert latest.step == probe["global_step"] == 120
    assert probe["rb"] is resumed_rb and len(resumed_rb) == 120  # the loop's own deque, refilled
    saved_weight = zipsave.read(latest.path, "q_network/network.0.weight")
    assert torch.equal(probe["q_network"].network[0].weight, saved_weight)

    final = dqn(tmp_path / "ckpt", 200)  # the script started again: it goes on from step 120
    assert final["global_step"] == 200 and len(final["rb"]) == 200

    with zipsave.CheckpointManager(tmp_path / "ckpt", keep_best=("episodic_return", "max")) as manager:
        best = manager.best()
        kept = {c.step: c.metrics.get("episodic_return") for c in manager.list()}
        returns = [r for r in kept.values() if r is not None]
        assert best.metrics["episodic_return"] == max(returns)
        evaluation = QNetwork()
        state = manager.load_best()
        evaluation.load_state_dict(state["q_network"])
        assert state["global_step"] == best.step
        assert torch.equal(evaluation.network[0].weight, zipsave.read(best.path, "q_network/network.0.weight"))
        live = {
            "q_network": QNetwork(),
            "target_network": QNetwork(),
            "rb": collections.deque(maxlen=200),
            "global_step": 0,
            "rng": zipsave.RNGState(),
        }
        live["optimizer"] = torch.optim.Adam(live["q_network"].parameters(), lr=1e-3)
        assert manager.restore_best(live).step == best.step == live["global_step"]
        assert torch.equal(live["q_network"].network[0].weight, evaluation.network[0].weight)


@pytest.mark.parametrize("value", [np.array([4.5], np.float32), torch.tensor([[4.5]]), np.float32(4.5), 4.5])
def test_a_metric_of_one_element_is_a_number(tmp_path, value):
    with zipsave.CheckpointManager(
        tmp_path / "ckpt", keep_best=("episodic_return", "max"), background=False
    ) as manager:
        manager.save(1, {"net": QNetwork()}, metrics={"episodic_return": value})
        assert manager.best().metrics == {"episodic_return": 4.5}


def test_a_metric_of_many_elements_is_an_encode_error_naming_it(tmp_path):
    with zipsave.CheckpointManager(tmp_path / "ckpt", background=False) as manager:
        with pytest.raises(
            zipsave.EncodeError,
            match=re.escape(
                "key `episodic_return`: metric `episodic_return` is a ndarray of shape (2,); expected a number, string "
                "or bool. Pass one number, e.g. `float(values.mean())`."
            ),
        ) as caught:
            manager.save(1, {"net": QNetwork()}, metrics={"episodic_return": np.array([1.0, 2.0])})
        assert caught.value.key == "episodic_return"
        assert manager.list() == []


# -- stateful objects of your own, and environment state ---------------------------------------
class NumpyBuffer:
    """A replay buffer with `state_dict`/`load_state_dict` that returns its numpy arrays."""

    def __init__(self):
        self.obs = np.zeros((8, 4), np.float32)
        self.pos = 0

    def state_dict(self):
        return {"obs": self.obs, "pos": self.pos}

    def load_state_dict(self, state):
        self.obs[...] = state["obs"]
        self.pos = state["pos"]


class TensorBuffer(NumpyBuffer):
    def state_dict(self):
        return {"obs": torch.from_numpy(self.obs), "pos": self.pos}

    def load_state_dict(self, state):
        self.obs[...] = state["obs"].numpy()
        self.pos = state["pos"]


def test_a_state_dict_that_no_safe_load_could_read_is_refused_before_writing(tmp_path):
    # torch.save took the numpy arrays, and every load then failed on the member as if it were
    # damaged ("the model would not be the one saved").
    with pytest.raises(
        zipsave.EncodeError,
        match=re.escape("`rb.state_dict()['obs']` is a numpy.ndarray, which torch's safe loader (`weights_only=True`"),
    ) as caught:
        zipsave.save({"rb": NumpyBuffer(), "step": 1}, tmp_path / "rb.zip")
    assert caught.value.key == "rb" and "torch.from_numpy(array)" in str(caught.value)
    assert not (tmp_path / "rb.zip").exists()

    buffer = TensorBuffer()
    buffer.obs += 2.0
    buffer.pos = 5
    zipsave.save({"rb": buffer}, tmp_path / "rb.zip")
    back = TensorBuffer()
    zipsave.restore({"rb": back}, tmp_path / "rb.zip", strict=True)
    assert back.pos == 5 and float(back.obs.sum()) == 2.0 * 32


def test_vec_env_state_keeps_the_normalization_statistics_of_gymnasium_wrappers():
    envs = make_envs()
    envs.reset(seed=0)
    for _ in range(25):
        envs.step(envs.action_space.sample())
    state = zipsave.sb3.VecEnvState(envs).state_dict()

    other = make_envs()
    zipsave.sb3.VecEnvState(other).load_state_dict(state)
    for restored, trained in zip(normalizers(other), normalizers(envs), strict=True):
        assert restored.obs_rms.count == trained.obs_rms.count > 1
        np.testing.assert_array_equal(restored.obs_rms.mean, trained.obs_rms.mean)
        np.testing.assert_array_equal(restored.obs_rms.var, trained.obs_rms.var)
