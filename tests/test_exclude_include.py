"""``exclude=``/``include=`` as the verbs take them: a list of names and glob patterns, or one
name as a string, never a string read letter by letter."""

from __future__ import annotations

import re

import pytest
import torch

import zipsave


class Agent(zipsave.Saveable):
    def __init__(self, lr=0.1):
        torch.manual_seed(0)
        self.policy = torch.nn.Linear(2, 2)
        self.policy.optimizer = torch.optim.Adam(self.policy.parameters(), lr=lr)
        self.lr_tag = "fast"


def _stepped():
    agent = Agent()
    agent.policy(torch.ones(1, 2)).sum().backward()
    agent.policy.optimizer.step()
    return agent


def test_one_pattern_given_as_a_string_is_one_pattern(tmp_path):
    # list("lr_tag") was six one-letter patterns: the string excluded nothing, silently
    agent = _stepped()
    zipsave.save(agent, tmp_path / "a.zip", exclude="lr_tag")
    assert "lr_tag" not in [entry.key for entry in zipsave.inspect(tmp_path / "a.zip").data]
    zipsave.save({"model": agent.policy, "opt": agent.policy.optimizer}, tmp_path / "b.zip", exclude="opt")
    assert [m.name for m in zipsave.inspect(tmp_path / "b.zip").members if m.name.endswith(".pth")] == [
        "pytorch_variables.pth",
        "model.pth",
    ]


def test_one_pattern_given_as_a_string_is_one_pattern_on_load(tmp_path):
    # list("*.optimizer") starts with "*": the string left out everything, the weights too
    agent = _stepped()
    agent.save(tmp_path / "a.zip")
    loaded = Agent.load(tmp_path / "a.zip", exclude="*.optimizer")
    assert loaded.policy.optimizer.state_dict()["state"] == {}  # left out, as with ["*.optimizer"]
    assert torch.equal(loaded.policy.weight, agent.policy.weight)
    fresh = Agent()
    zipsave.restore(fresh, tmp_path / "a.zip", exclude="*.optimizer")
    assert fresh.policy.optimizer.state_dict()["state"] == {}
    assert torch.equal(fresh.policy.weight, agent.policy.weight)


@pytest.mark.parametrize("option", ["exclude", "include"])
def test_patterns_that_are_not_names_are_a_type_error(tmp_path, option):
    with pytest.raises(
        zipsave.UsageError, match=re.escape(f"{option} must be a name or glob pattern, or a list of them")
    ):
        zipsave.save(_stepped(), tmp_path / "a.zip", **{option: 5})
    with pytest.raises(zipsave.UsageError, match=re.escape("found 5 (int) among them")):
        zipsave.save(_stepped(), tmp_path / "a.zip", **{option: ["policy", 5]})
    assert not (tmp_path / "a.zip").exists()


def test_sb3_save_under_install_takes_one_extra_as_a_string(tmp_path):
    # SB3's save read include="replay_buffer" letter by letter: no buffer in the archive
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import DQN

    import zipsave.sb3

    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=64, learning_starts=8, policy_kwargs={"net_arch": [4]})
    model.learn(16)
    with zipsave.sb3.installed():
        model.save(tmp_path / "dqn.zip", include="replay_buffer")
    assert "replay_buffer" in [c.name for c in zipsave.inspect(tmp_path / "dqn.zip").components]
