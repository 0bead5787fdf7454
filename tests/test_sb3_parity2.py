"""Parity, second round: what SB3's own load gives (or raises) and what every zipsave door gives
for the same archive: another algorithm's archive, exact numbers pickled in ``data``, schedules,
and the attributes SB3 sets on a loaded model. SB3 itself is the reference (no stand-in)."""

from __future__ import annotations

import pytest

import zipsave

pytest.importorskip("stable_baselines3")  # the `test` extra installs it

from stable_baselines3 import DQN, PPO, SAC  # noqa: E402

import zipsave.sb3  # noqa: E402


def _small(cls, env_id, **kwargs):
    return cls("MlpPolicy", env_id, device="cpu", policy_kwargs={"net_arch": [8]}, **kwargs)


def _through_every_door(cls, path, **kwargs):
    """``{door: callable}`` loading ``path`` as ``cls`` through zipsave.load and SB3's own load under install()."""

    def installed():
        with zipsave.sb3.installed():
            return cls.load(path, device="cpu", **kwargs)

    return {
        "zipsave.load": lambda: zipsave.load(path, cls=cls, device="cpu", **kwargs),
        f"{cls.__name__}.load under install()": installed,
    }


def _contrib_maskable():
    return pytest.importorskip("sb3_contrib").MaskablePPO


@pytest.mark.parametrize(
    "saved, requested",
    [
        (lambda: _small(SAC, "Pendulum-v1", buffer_size=16), lambda: PPO),  # SB3: TypeError
        (lambda: _small(PPO, "CartPole-v1", n_steps=16, batch_size=16), lambda: DQN),  # SB3: AttributeError
        (lambda: _small(PPO, "CartPole-v1", n_steps=16, batch_size=16), _contrib_maskable),  # sb3-contrib: ValueError
    ],
    ids=["SAC-as-PPO", "PPO-as-DQN", "PPO-as-MaskablePPO"],
)
def test_another_algorithms_archive_raises_what_sb3_raises(tmp_path, saved, requested):
    # SB3 fails with what the constructor raises first (TypeError, AttributeError or ValueError,
    # by pair); zipsave raised its DecodeError, a ValueError only, so `except TypeError` written
    # for SB3 let it through, and its message named the saved policy but not the algorithm
    model, cls = saved(), requested()
    path = tmp_path / "model.zip"
    model.save(path)
    with pytest.raises(Exception) as sb3s:
        cls.load(path, device="cpu")
    builtin = type(sb3s.value)
    assert builtin in (TypeError, AttributeError, ValueError)
    name, wanted = type(model).__name__, cls.__name__
    for door, load in _through_every_door(cls, path).items():
        with pytest.raises(builtin) as ours:
            load()
        err = ours.value
        assert isinstance(err, zipsave.AlgorithmMismatchError), door
        assert (err.saved, err.requested, err.archive, err.member) == (name, wanted, str(path), "data"), door
        assert str(err).startswith(
            f"archive `{path}`, member `data`: holds a {name} model; {wanted} cannot be built from it ("
        ), door
        assert f"Load it with `{name}.load(path)` or `zipsave.load(path, cls={name})`" in str(err), door
