"""The Stable-Baselines3 globals that SB3's own archives pickle, reviewed for the restricted
unpickler. Plain names only: SB3 is imported when (and if) an archive actually uses one."""

from __future__ import annotations

__all__ = ["SB3_ALLOWLIST"]

# Exactly what the ``data`` of SB3 2.x archives names (PPO, A2C, DQN, SAC, TD3, DDPG, with
# Box/Discrete/Dict spaces; found with ``pickle_globals`` on archives SB3 2.9.2 wrote). Torch
# activation and optimizer classes that ``policy_kwargs`` name are in the torch group of
# ``zipsave._trust``. Each entry was checked for the three things a hostile pickle can do with it:
#
# * import it: every module below is plain SB3 code; importing it runs nothing the archive chose.
# * call it (REDUCE/NEWOBJ) with arguments the archive chooses: noted per entry. No entry
#   opens files, sockets or subprocesses, imports by name, or evaluates strings. The policy and
#   buffer constructors call callables and classes they are handed (``features_extractor_class``,
#   ``optimizer_class``, ``lr_schedule``); in a restricted load those can only be objects the
#   pickle itself built from allowlisted globals, so they add no reach beyond the allowlist.
#   What a call can still do is ask for memory (a huge ``net_arch`` or ``buffer_size``): the
#   same cost as ``bytearray(10**10)``, which the unpickler's docstring already accepts.
# * set instance state (BUILD): none of these classes defines ``__setstate__``/``__reduce__``,
#   so BUILD is ``__dict__.update`` (``nn.Module.__setstate__`` for policies), and the unpickler
#   refuses dunder keys.
SB3_ALLOWLIST: frozenset[str] = frozenset(
    {
        # Policy classes (``policy_class``). SB3 pickles them by reference; calling one builds an
        # nn.Module of the size ``net_arch`` asks for and its optimizer.
        "stable_baselines3.common.policies.ActorCriticPolicy",  # PPO/A2C "MlpPolicy"
        "stable_baselines3.common.policies.MultiInputActorCriticPolicy",  # PPO/A2C, Dict observations
        "stable_baselines3.dqn.policies.DQNPolicy",
        "stable_baselines3.sac.policies.SACPolicy",
        "stable_baselines3.td3.policies.TD3Policy",  # TD3 and DDPG
        # Their image and Dict-observation siblings: the same constructors with another default
        # features extractor (NatureCNN / CombinedExtractor), reviewed the same way.
        "stable_baselines3.common.policies.ActorCriticCnnPolicy",
        "stable_baselines3.dqn.policies.CnnPolicy",
        "stable_baselines3.dqn.policies.MultiInputPolicy",
        "stable_baselines3.sac.policies.CnnPolicy",
        "stable_baselines3.sac.policies.MultiInputPolicy",
        "stable_baselines3.td3.policies.CnnPolicy",
        "stable_baselines3.td3.policies.MultiInputPolicy",
        "stable_baselines3.common.torch_layers.FlattenExtractor",
        "stable_baselines3.common.torch_layers.NatureCNN",
        "stable_baselines3.common.torch_layers.CombinedExtractor",
        # SB3's TF-style RMSprop (``optimizer_class=RMSpropTFLike``: the RL Zoo's A2C Atari
        # hyperparameters): a torch Optimizer subclass like torch's own, reviewed the same way.
        # Construction needs real parameters and checks its numbers; ``__setstate__`` is
        # Optimizer's (``__dict__`` update, ``step`` re-wrapped) plus two ``setdefault``s per group.
        "stable_baselines3.common.sb2_compat.rmsprop_tf_like.RMSpropTFLike",
        # Action noise (``action_noise`` of off-policy algorithms): plain objects holding numpy
        # arrays and floats; no __setstate__, construction only stores and copies arrays.
        "stable_baselines3.common.noise.NormalActionNoise",
        "stable_baselines3.common.noise.OrnsteinUhlenbeckActionNoise",
        # Its per-env wrapper (``action_noise`` of a model with several envs): holds ``n_envs`` and a
        # list of the noises above; its constructor deep-copies the base noise it is handed, which in
        # a restricted load is one the pickle built from the two classes above. No __setstate__.
        "stable_baselines3.common.noise.VectorizedActionNoise",
        # Buffer classes (``rollout_buffer_class``, ``replay_buffer_class``), by reference; calling
        # one allocates zeroed numpy arrays (and ReplayBuffer reads psutil's memory figures).
        "stable_baselines3.common.buffers.DictRolloutBuffer",
        "stable_baselines3.common.buffers.DictReplayBuffer",
        "stable_baselines3.common.buffers.ReplayBuffer",
        "stable_baselines3.common.buffers.RolloutBuffer",
        # ``replay_buffer_class`` of an off-policy model with ``n_steps > 1`` (SB3 >= 2.7): a
        # ReplayBuffer subclass that only overrides sampling; constructing it allocates the same arrays.
        "stable_baselines3.common.buffers.NStepReplayBuffer",
        # Schedules (``lr_schedule``, ``clip_range``, ``exploration_schedule``): constructors store
        # their arguments (FloatSchedule asserts ``callable``); ``__call__`` runs only when SB3 trains.
        "stable_baselines3.common.utils.ConstantSchedule",
        "stable_baselines3.common.utils.FloatSchedule",
        "stable_baselines3.common.utils.LinearSchedule",
        # ``train_freq`` of off-policy algorithms: a NamedTuple (tuple.__new__) and an Enum
        # (calling it looks a member up by value).
        "stable_baselines3.common.type_aliases.TrainFreq",
        "stable_baselines3.common.type_aliases.TrainFrequencyUnit",
        # What ``policy.save``, ``save_replay_buffer`` and ``VecNormalize.save`` store once
        # ``zipsave.sb3.install()`` routes them through zipsave (and what SB3's own pickles of them
        # name). ``_dummy_schedule`` is a staticmethod returning 0.0 (the ``lr_schedule`` policies
        # record for themselves). VecNormalize's ``__setstate__`` only updates ``__dict__`` and
        # clears ``venv``; calling the class needs a VecEnv, which no allowlisted global builds.
        # RunningMeanStd stores two arrays and a count. HerReplayBuffer's ``__setstate__`` updates
        # ``__dict__`` and clears ``env``; GoalSelectionStrategy is an Enum.
        "stable_baselines3.common.policies.BasePolicy._dummy_schedule",
        # The actors of TD3/DDPG/SAC record their features extractor *instance* among their
        # constructor parameters; the default FlattenExtractor holds one torch Flatten (two ints,
        # no weights). Extractors with weights pickle their tensors, which stay refused.
        "torch.nn.modules.flatten.Flatten",
        "stable_baselines3.common.vec_env.vec_normalize.VecNormalize",
        "stable_baselines3.common.running_mean_std.RunningMeanStd",
        "stable_baselines3.her.her_replay_buffer.HerReplayBuffer",
        "stable_baselines3.her.goal_selection_strategy.GoalSelectionStrategy",
        # The RL Zoo's schedules (``learning_rate: lin_0.001`` in its hyperparameter files, rl-zoo3
        # >= 2.7). Importing ``rl_zoo3.utils`` runs only the Zoo's own imports. The constructor
        # stores ``float(initial_value)``; ``__call__`` multiplies; no ``__setstate__``.
        "rl_zoo3.utils.SimpleLinearSchedule",
    }
)
