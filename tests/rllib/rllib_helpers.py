"""What the RLlib tests build: tiny algorithms, and the connector factory their configs name
(importable by the Ray workers too: the session fixture puts this folder on their path)."""

from __future__ import annotations

import numpy as np
import torch

OBS = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)


def mean_std_filter(env=None, spaces=None, device=None):
    """The ``env_to_module_connector`` of the tests' configs: a MeanStdFilter, state on the actors."""
    from ray.rllib.connectors.env_to_module import MeanStdFilter

    return MeanStdFilter()


def ppo_config(hidden=8, filtered=True, seed=0):
    from ray.rllib.algorithms.ppo import PPOConfig

    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=1, **({"env_to_module_connector": mean_std_filter} if filtered else {}))
        .training(train_batch_size_per_learner=128, minibatch_size=64, num_epochs=1)
        .rl_module(model_config={"fcnet_hiddens": [hidden]})
        .debugging(seed=seed)
    )
    return config


def dqn_config():
    from ray.rllib.algorithms.dqn import DQNConfig

    return (
        DQNConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=1)
        .training(
            train_batch_size_per_learner=16,
            num_steps_sampled_before_learning_starts=32,
            replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer", "capacity": 500},
        )
        .rl_module(model_config={"fcnet_hiddens": [8]})
        .reporting(min_sample_timesteps_per_iteration=64)
        .debugging(seed=0)
    )


def logits(module_or_algo, module_id="default_policy"):
    """The action-distribution inputs of a module (or an algorithm's module) on fixed inputs."""
    module = module_or_algo.get_module(module_id) if hasattr(module_or_algo, "get_module") else module_or_algo
    with torch.no_grad():
        out = module.forward_inference({"obs": torch.from_numpy(OBS)})
    key = "action_dist_inputs" if "action_dist_inputs" in out else next(iter(out))
    return out[key].numpy()


def remote_logits(algo):
    """The logits of the (remote) EnvRunner actor's module."""
    return logits(algo.env_runner_group.foreach_env_runner(lambda w: w.module, local_env_runner=False)[0])


def remote_filter_state(algo):
    """The MeanStdFilter state held by the (remote) EnvRunner actors."""
    states = algo.env_runner_group.foreach_env_runner(
        lambda w: w.get_state(components="env_to_module_connector"), local_env_runner=False
    )
    return [s["env_to_module_connector"]["MeanStdFilter"] for s in states]


def filter_pushes(state):
    return state[None]["running_stats"][0]["num_pushes"]


def swap_in_p1(algorithm, *, archive, out, **kwargs):
    """``on_algorithm_init``: p1 becomes the single-agent archive's default_policy (RLlib's docs'
    scenario); the logits of p0 and p1 after the swap are written to ``out`` for the test."""
    import zipsave

    zipsave.restore(
        algorithm,
        archive,
        component="learner_group/learner/rl_module/default_policy",
        into="learner_group/learner/rl_module/p1",
    )
    np.save(out, np.stack([logits(algorithm, "p0"), logits(algorithm, "p1")]))


def multi_agent_config(archive, out, hidden=8):
    import functools

    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole

    return (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 2})
        .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=policy_mapping)
        # no EnvRunner actor: the trial's own CPU and the session's PPO use both of Ray's CPUs
        .env_runners(num_env_runners=0)
        .training(train_batch_size_per_learner=128, minibatch_size=64, num_epochs=1)
        .rl_module(model_config={"fcnet_hiddens": [hidden]})
        .callbacks(on_algorithm_init=functools.partial(swap_in_p1, archive=str(archive), out=str(out)))
    )


def policy_mapping(agent_id, episode, **kwargs):
    return f"p{agent_id}"


def remote_config(num_learners=2, seed=0, hidden=8):
    """PPO with ``num_learners`` remote learner actors and one remote EnvRunner (no filter)."""
    return (
        ppo_config(hidden=hidden, filtered=False, seed=seed)
        .learners(num_learners=num_learners, num_cpus_per_learner=1)
        .training(train_batch_size_per_learner=64, minibatch_size=32)
    )


LEARNER_PARTS = ["rl_module", "optimizer"]


def learner_states(algo):
    """The RLModule and optimizer state of every learner, as each (remote) learner reports it."""
    results = algo.learner_group.foreach_learner(lambda learner: learner.get_state(components=LEARNER_PARTS))
    return [r.get() for r in results]


def assert_same(a, b, where="state"):
    """Two nested states hold equal keys and equal values (arrays and tensors compared exactly)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), (
            where,
            sorted(map(str, a)),
            sorted(map(str, b)) if isinstance(b, dict) else b,
        )
        for key in a:
            assert_same(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, (np.ndarray, torch.Tensor)) or isinstance(b, (np.ndarray, torch.Tensor)):
        a, b = (x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x) for x in (a, b))
        assert a.shape == b.shape and np.array_equal(a, b), where
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


def module_weights(states, module_id="default_policy"):
    return [s["rl_module"][module_id] for s in states]


def remote_multi_agent_config(num_learners=1, hidden=8):
    """Two-agent PPO (policies p0, p1) with ``num_learners`` remote learners, no EnvRunner actor."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole

    return (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 2})
        .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=policy_mapping)
        .env_runners(num_env_runners=0)
        .learners(num_learners=num_learners, num_cpus_per_learner=1)
        .training(train_batch_size_per_learner=64, minibatch_size=32, num_epochs=1)
        .rl_module(model_config={"fcnet_hiddens": [hidden]})
        .debugging(seed=3)
    )


def tune_trainable(config):
    """The Tune function trainable of docs/rllib.rst (one ``algo.zip`` in each Tune checkpoint,
    resumed from the latest one), with the tests' hooks: ``scratch`` is where a resumed trial
    leaves the archive it resumed from and the weights it holds after the restore, and
    ``die_at`` the iteration whose first run ends the trial's process (``"exit"``: the actor dies)
    or raises (``"raise"``: the trial errors)."""
    import os
    import shutil
    import tempfile

    from ray import tune

    import zipsave

    algo = config["algo_config"].build_algo()
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            zipsave.restore(algo, os.path.join(folder, "algo.zip"))
            shutil.copy(os.path.join(folder, "algo.zip"), os.path.join(config["scratch"], "resumed_from.zip"))
        np.save(
            os.path.join(config["scratch"], "resumed_weights.npy"),
            np.asarray(algo.learner_group.get_weights()["default_policy"]["pi.net.mlp.0.weight"]),
        )
    while algo.training_iteration < config["iterations"]:
        if algo.training_iteration == config.get("die_at"):
            marker = os.path.join(config["scratch"], "died")
            if not os.path.exists(marker):
                open(marker, "w").close()
                if config["how"] == "exit":
                    os._exit(1)
                raise RuntimeError("the trial fails once, here")
        result = algo.train()
        with tempfile.TemporaryDirectory() as folder:
            zipsave.save(algo, os.path.join(folder, "algo.zip"))
            tune.report(
                {"iteration": algo.training_iteration, "return": result["env_runners"].get("episode_return_mean", 0.0)},
                checkpoint=tune.Checkpoint.from_directory(folder),
            )
    algo.stop()


def tune_config():
    """A PPO small enough for a Tune trial: learner and env in the trial's own process."""
    return (
        ppo_config(filtered=False)
        .env_runners(num_env_runners=0)
        .training(train_batch_size_per_learner=64, minibatch_size=32)
    )
