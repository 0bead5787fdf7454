"""SB3's ``HerReplayBuffer`` in the replay-buffer extra, against the real SB3: DQN + HER on SB3's
``BitFlippingEnv`` saves its transitions, episode bookkeeping and infos without pickle, loads
into the freshly built model's buffer (environment attached), samples what the original samples,
ends the unfinished episode as SB3's ``load_replay_buffer`` does, resumes exactly through
``zipsave.sb3.CheckpointCallback``, and skips a buffer that does not fit."""

from __future__ import annotations

import collections
import copy
import json
import re
import struct
import zipfile

import numpy as np
import pytest
import torch

import zipsave

pytest.importorskip("stable_baselines3")

import gymnasium as gym  # noqa: E402
from stable_baselines3 import DQN, SAC, HerReplayBuffer  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.envs import BitFlippingEnv  # noqa: E402

import zipsave.sb3  # noqa: E402

ARRAYS = ("actions", "rewards", "dones", "timeouts", "ep_start", "ep_length", "_current_ep_start")


class Bits(BitFlippingEnv):
    """BitFlippingEnv whose start states come from the env's own generator, which
    ``VecEnvState`` restores (SB3's draws from a space the env holds), so a resumed run sees the
    same episodes."""

    def reset(self, *, seed=None, options=None):
        gym.Env.reset(self, seed=seed)
        super().reset(seed=seed)
        self.state = self.np_random.integers(0, 2, size=self.state.shape).astype(self.state.dtype)
        return self._get_obs(), {}


def env(seed=0):
    return make_vec_env(Bits, n_envs=1, seed=seed, env_kwargs={"n_bits": 4, "max_steps": 4})


def make(seed=0, *, copy_info_dict=False, buffer_size=300, venv=None):
    return DQN(
        "MultiInputPolicy",
        venv if venv is not None else env(seed),
        buffer_size=buffer_size,
        learning_starts=40,
        train_freq=4,
        replay_buffer_class=HerReplayBuffer,
        replay_buffer_kwargs={
            "n_sampled_goal": 2,
            "goal_selection_strategy": "future",
            "copy_info_dict": copy_info_dict,
        },
        policy_kwargs={"net_arch": [16]},
        seed=seed,
    )


@pytest.fixture(scope="module")
def trained():
    model = make(0)
    model.learn(220)  # stops inside an episode: the last one is unfinished
    assert (model.replay_buffer._current_ep_start != model.replay_buffer.pos).any()
    return model


@pytest.fixture(scope="module")
def with_infos():
    model = make(0, copy_info_dict=True)
    model.learn(150)
    return model


@pytest.fixture
def saved(trained, tmp_path):
    path = tmp_path / "her.zip"
    zipsave.save(trained, path, include=["replay_buffer"])
    return path


def same(a, b, where="value"):
    """Equal in type and value all the way down (dicts with their key order)."""
    assert type(a) is type(b), f"{where}: {type(a)} is not {type(b)}"
    if isinstance(a, dict):
        assert list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for key in a:
            same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), where
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    else:
        assert a == b or (a != a and b != b), f"{where}: {a!r} != {b!r}"


def same_buffer(new, old, *, infos=True):
    assert (new.pos, new.full, new.buffer_size, new.n_envs) == (old.pos, old.full, old.buffer_size, old.n_envs)
    for name in ("observations", "next_observations", *ARRAYS):
        same(getattr(new, name), getattr(old, name), name)
    if infos:
        for i, (a, b) in enumerate(zip(old.infos.reshape(-1), new.infos.reshape(-1))):
            same(b, a, f"infos[{i}]")


def samples(buffer, seed=3, n=64):
    np.random.seed(seed)
    return buffer.sample(n)


def same_samples(a, b):
    for field in ("observations", "next_observations", "actions", "rewards", "dones"):
        same(getattr(a, field), getattr(b, field), field)


def same_policy(a, b):
    sa, sb = a.policy.state_dict(), b.policy.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


# -- the archive ----------------------------------------------------------------------------
def test_her_buffer_is_stored_as_arrays_and_numbers(saved, trained):
    with zipfile.ZipFile(saved) as zf:
        raw = zf.read("replay_buffer/data").decode()
        names = zf.namelist()
    assert ":serialized:" not in raw  # no pickle at all
    state = json.loads(raw)
    assert state["class"] == "stable_baselines3.her.her_replay_buffer:HerReplayBuffer"
    assert state["her"] == {
        "n_sampled_goal": 2,
        "goal_selection_strategy": "future",
        "her_ratio": 1 - 1 / 3,
        "copy_info_dict": False,
    }
    assert "infos" not in state  # copy_info_dict=False: SB3 never fills them
    assert sorted(state["arrays"][":zipsave:"]["value"]) == sorted(["observations", "next_observations", *ARRAYS])
    assert sum(n.startswith("replay_buffer/arrays/") for n in names) == 3 + 3 + len(ARRAYS)
    # SB3's own loader reads the archive and ignores the folder (HER needs the env, as always)
    by_sb3 = DQN.load(saved, env=env())
    assert same_policy(by_sb3, trained) and by_sb3.replay_buffer.pos == 0


# -- loading --------------------------------------------------------------------------------
def test_load_with_force_reset_false_is_the_saved_buffer(saved, trained):
    model = zipsave.load(saved, cls=DQN, env=env(5), force_reset=False)
    new, old = model.replay_buffer, trained.replay_buffer
    assert isinstance(new, HerReplayBuffer) and new is not old
    same_buffer(new, old)
    assert new.env is model.env and new.device == model.device
    assert (new.n_sampled_goal, new.goal_selection_strategy, new.her_ratio) == (
        2,
        old.goal_selection_strategy,
        1 - 1 / 3,
    )
    same_samples(samples(new), samples(old))  # same goals drawn, same rewards recomputed by the env


def test_default_load_ends_the_unfinished_episode_as_sb3_does(saved, trained, tmp_path):
    report = zipsave.LoadReport()
    ours = zipsave.load(saved, cls=DQN, env=env(5), report=report)
    assert any("unfinished episode was ended" in note for note in report.notes)

    trained.save_replay_buffer(tmp_path / "buffer.pkl")  # SB3's own pickle, SB3's own load
    theirs = make(5)
    with pytest.warns(UserWarning, match=re.escape("The last trajectory in the replay buffer will be truncated.")):
        theirs.load_replay_buffer(tmp_path / "buffer.pkl")
    same_buffer(ours.replay_buffer, theirs.replay_buffer)
    assert not (ours.replay_buffer.ep_length == trained.replay_buffer.ep_length).all()  # it did change
    same_samples(samples(ours.replay_buffer), samples(theirs.replay_buffer))
    ours.learn(40, reset_num_timesteps=False)
    assert ours.replay_buffer.pos == trained.replay_buffer.pos + 40


def test_sac_with_her_on_continuous_actions(tmp_path):
    venv = make_vec_env(Bits, n_envs=2, seed=0, env_kwargs={"n_bits": 4, "max_steps": 4, "continuous": True})
    sac = SAC(
        "MultiInputPolicy",
        venv,
        buffer_size=100,
        learning_starts=30,
        replay_buffer_class=HerReplayBuffer,
        replay_buffer_kwargs={"goal_selection_strategy": "final"},
        policy_kwargs={"net_arch": [16]},
        seed=0,
    )
    sac.learn(90)  # two envs, 100 rows: the buffer wraps around
    zipsave.save(sac, tmp_path / "sac.zip", include=["replay_buffer"])
    fresh = make_vec_env(Bits, n_envs=2, seed=3, env_kwargs={"n_bits": 4, "max_steps": 4, "continuous": True})
    model = zipsave.load(tmp_path / "sac.zip", cls=SAC, env=fresh, force_reset=False)
    new, old = model.replay_buffer, sac.replay_buffer
    same_buffer(new, old)
    assert new.actions.dtype == np.float32 and new.n_envs == 2 and new.env is model.env
    same_samples(samples(new), samples(old))


def test_the_models_her_settings_win_and_the_report_says_so(saved):
    report = zipsave.LoadReport()
    model = zipsave.load(
        saved,
        cls=DQN,
        env=env(5),
        report=report,
        replay_buffer_kwargs={"n_sampled_goal": 4, "goal_selection_strategy": "episode"},
    )
    buffer = model.replay_buffer
    assert buffer.n_sampled_goal == 4 and buffer.pos > 0
    assert any(
        "the HerReplayBuffer keeps the model's settings (goal_selection_strategy='future' saved, 'episode' used, "
        "her_ratio=0.6666666666666667 saved, 0.8 used, n_sampled_goal=2 saved, 4 used)" in note
        for note in report.notes
    ), report.notes


def test_restore_fills_the_buffer_in_place(saved, trained):
    fresh = make(9)
    buffer = fresh.replay_buffer
    zipsave.restore(fresh, saved)
    assert fresh.replay_buffer is buffer and buffer.env is fresh.env
    same_buffer(buffer, trained.replay_buffer)  # the saved `_last_obs` is restored: the episode goes on
    assert same_policy(fresh, trained)
    # a run that resets the environment ends the episode first, as the docs say
    with pytest.warns(UserWarning, match=re.escape("The last trajectory in the replay buffer will be truncated.")):
        buffer.truncate_last_trajectory()
    pos = buffer.pos
    fresh.learn(20)
    assert buffer.pos == pos + 20 and buffer.ep_start[pos, 0] == pos


def test_infos_round_trip_without_pickle(with_infos, tmp_path):
    path = tmp_path / "infos.zip"
    zipsave.save(with_infos, path, include=["replay_buffer"])
    raw = zipfile.ZipFile(path).read("replay_buffer/data").decode()
    assert ":serialized:" not in raw and '"layouts"' in raw
    model = zipsave.load(path, cls=DQN, env=env(5), force_reset=False)
    old, new = with_infos.replay_buffer, model.replay_buffer
    same_buffer(new, old)  # every info: key order, Python vs numpy scalars, the OrderedDict observation
    done = next(i for i in old.infos.reshape(-1) if "terminal_observation" in i)
    assert type(done["terminal_observation"]) is collections.OrderedDict and "episode" in done
    same_samples(samples(new), samples(old))


def test_infos_of_every_kind_come_back_as_they_were(with_infos, tmp_path):
    model = copy.copy(with_infos)
    model.replay_buffer = copy.deepcopy(with_infos.replay_buffer)
    model.replay_buffer.env = None
    odd = {
        "flag": np.bool_(True),
        "f32": np.float32(0.5),
        "big": 2**62,
        "nan": float("nan"),
        "text": "é",
        "none": None,
        "empty": {},
        "ordered": collections.OrderedDict(),
        "image": np.zeros((2, 3), np.uint8),
        "nested": {"deep": {"x": np.arange(3, dtype=np.int16)}},
    }
    model.replay_buffer.infos[7, 0] = odd
    model.replay_buffer.infos[8, 0] = {}
    model.replay_buffer.env = with_infos.replay_buffer.env
    zipsave.save(model, tmp_path / "odd.zip", include=["replay_buffer"])
    loaded = zipsave.load(tmp_path / "odd.zip", cls=DQN, env=env(5), force_reset=False).replay_buffer
    same(loaded.infos[7, 0], odd, "infos[7]")
    same(loaded.infos[8, 0], {}, "infos[8]")
    same(loaded.infos[9, 0], with_infos.replay_buffer.infos[9, 0], "infos[9]")


def _rewrite(path, member, edit, tmp_path):
    out = tmp_path / "edited.zip"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            raw = src.read(info)
            dst.writestr(info, edit(raw) if info.filename == member else raw)
    return out


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda s: s["infos"][":zipsave:"]["value"]["layouts"].append([99]),
            "`infos.layouts` must list column numbers",
        ),
        (
            lambda s: s["infos"][":zipsave:"]["value"]["columns"][0].update(kind="set"),
            "`infos` column 0 has path ['is_success'] and kind 'set'",
        ),
        (lambda s: s["her"].clear() or s.update(her=None), "holds a HerReplayBuffer without its `her` settings"),
    ],
)
def test_an_edited_her_entry_is_skipped_with_a_warning(with_infos, tmp_path, edit, message):
    zipsave.save(with_infos, tmp_path / "infos.zip", include=["replay_buffer"])

    def change(raw):
        state = json.loads(raw)
        edit(state)
        return json.dumps(state).encode()

    edited = _rewrite(tmp_path / "infos.zip", "replay_buffer/data", change, tmp_path)
    with pytest.warns(zipsave.ZipsaveWarning) as caught:
        model = zipsave.load(edited, cls=DQN, env=env(5))
    skipped = [str(w.message) for w in caught if isinstance(w.message, zipsave.SkippedEntryWarning)]
    assert len(skipped) == 1 and message in skipped[0], [str(w.message) for w in caught]
    assert model.replay_buffer.pos == 0 and model.replay_buffer.infos[0, 0] == {}


def test_an_info_value_without_a_safe_form_is_refused(with_infos, tmp_path):
    buffer = with_infos.replay_buffer
    kept = buffer.infos[4, 0]
    buffer.infos[4, 0] = {**kept, "odd": {1, 2}}
    try:
        with pytest.raises(zipsave.EncodeError, match=re.escape("replay buffer `infos` key `odd` holds a set")):
            zipsave.save(with_infos, tmp_path / "x.zip", include=["replay_buffer"])
    finally:
        buffer.infos[4, 0] = kept
    assert not (tmp_path / "x.zip").exists()


# -- what does not fit ----------------------------------------------------------------------
def test_buffer_of_another_size_is_skipped_with_a_warning(saved):
    with pytest.warns(
        zipsave.SkippedEntryWarning, match=re.escape("replay buffer with buffer_size=300, but the model's has 400")
    ):
        model = zipsave.load(saved, cls=DQN, env=env(5), buffer_size=400)
    buffer = model.replay_buffer
    assert isinstance(buffer, HerReplayBuffer) and buffer.pos == 0 and not buffer.full
    assert not buffer.ep_length.any() and buffer.env is model.env
    model.learn(60, reset_num_timesteps=False)  # it fills from scratch


def test_a_plain_buffer_is_not_filled_from_a_her_one(saved):
    with pytest.warns(
        zipsave.SkippedEntryWarning,
        match=re.escape(
            "holds a `stable_baselines3.her.her_replay_buffer:HerReplayBuffer`, but the model's replay buffer is a `stable_baselines3.common.buffers:DictReplayBuffer`"
        ),
    ):
        model = zipsave.load(saved, cls=DQN, env=env(5), replay_buffer_class=None, replay_buffer_kwargs={})
    assert model.replay_buffer.pos == 0


def _corrupt_member(path, member, tmp_path):
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(member)
    raw = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26 : info.header_offset + 30])
    raw[info.header_offset + 30 + name_len + extra_len + info.file_size - 1] ^= 0x01  # the last value
    bad = tmp_path / "bad.zip"
    bad.write_bytes(bytes(raw))
    return bad


def test_a_corrupt_array_member_is_an_error_or_skipped_when_asked(saved, tmp_path):
    arrays = json.loads(zipfile.ZipFile(saved).read("replay_buffer/data"))["arrays"][":zipsave:"]["value"]
    member = arrays["ep_length"][":zipsave:"]["member"]
    bad = _corrupt_member(saved, member, tmp_path)
    with pytest.raises(zipsave.IntegrityError, match=re.escape(f"member `{member}`")) as err:
        zipsave.load(bad, cls=DQN, env=env(5))
    assert "exclude=['replay_buffer']" in str(err.value)
    with pytest.warns(zipsave.SkippedEntryWarning, match=re.escape(member)):
        model = zipsave.load(bad, cls=DQN, env=env(5), skip_broken_tensors=True)
    assert model.replay_buffer.pos == 0 and not model.replay_buffer.ep_length.any()
    model = zipsave.load(bad, cls=DQN, env=env(5), exclude=["replay_buffer"])  # the model alone is whole
    assert model.replay_buffer.pos == 0


# -- CheckpointCallback ---------------------------------------------------------------------
class StopAt(zipsave.sb3.CheckpointCallback):
    """Stops training inside a rollout, as a crash would."""

    def __init__(self, *args, stop_at: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.stop_at = stop_at

    def _on_step(self) -> bool:
        return self.num_timesteps < self.stop_at


def test_checkpoint_callback_resumes_her_exactly(tmp_path):
    uninterrupted = make(0)
    callback = zipsave.sb3.CheckpointCallback(tmp_path / "a", every_steps=80, env_state=True)
    uninterrupted.learn(240, callback=callback)
    callback.close()

    stopped = make(0)
    callback = StopAt(tmp_path / "b", every_steps=80, env_state=True, stop_at=201)
    stopped.learn(240, callback=callback)
    assert [c.step for c in callback.manager.list()] == [80, 160]
    callback.close()

    resumed = make(7)  # another seed: everything that matters comes from the checkpoint
    callback = zipsave.sb3.CheckpointCallback(tmp_path / "b", every_steps=80, env_state=True)
    assert callback.restore_latest(resumed).step == 160
    assert resumed.replay_buffer.env is resumed.env
    resumed.learn(240 - resumed.num_timesteps, callback=callback, reset_num_timesteps=False)
    callback.close()

    assert resumed.num_timesteps == 240
    same_buffer(resumed.replay_buffer, uninterrupted.replay_buffer)
    assert same_policy(resumed, uninterrupted)


def test_checkpoint_resume_without_env_state_ends_the_episode(tmp_path):
    model = make(0)
    callback = zipsave.sb3.CheckpointCallback(tmp_path, every_steps=100, keep_last=1)
    model.learn(220, callback=callback)
    callback.close()
    saved = model.replay_buffer
    assert (saved._current_ep_start != saved.pos).any()

    resumed = make(1)
    callback = zipsave.sb3.CheckpointCallback(tmp_path, every_steps=100, keep_last=1)
    assert callback.restore_latest(resumed).step == 220
    buffer = resumed.replay_buffer
    assert resumed._last_obs is None and (buffer._current_ep_start == buffer.pos).all()
    start = int(saved._current_ep_start[0])
    assert buffer.dones[buffer.pos - 1, 0] and (buffer.ep_length[start : buffer.pos, 0] == buffer.pos - start).all()
    same(buffer.observations, saved.observations)
    resumed.learn(40, callback=callback, reset_num_timesteps=False)
    callback.close()
    assert buffer.ep_start[saved.pos, 0] == saved.pos  # the next episode starts on its own
