"""Round eleven of the adversarial suite: SB3's ``save_util.load_from_pkl`` under ``install()``
(a door of its own, called by name), ..."""

from __future__ import annotations

import re

import numpy as np
import pytest

import zipsave

torch = pytest.importorskip("torch")
sb3 = pytest.importorskip("stable_baselines3")


# -- save_util.load_from_pkl: a door of its own --------------------------------------------------


def _object_archive(path, cls) -> str:
    """An object archive as ``save_replay_buffer`` writes one, naming ``cls`` (an allowlisted
    class) with attributes it cannot be rebuilt from."""
    zipsave.save_archive(path, data={"_zipsave_object_class": cls, "x": 1})
    return str(path)


def _classes():
    import gymnasium as gym
    from stable_baselines3.common.vec_env import VecNormalize

    return {
        "Box": gym.spaces.Box,  # its __setstate__: AttributeError ('low')
        "VecNormalize": VecNormalize,  # its __setstate__: KeyError ('observation_space')
        "dtype": np.dtype,  # its __new__: TypeError (a required argument)
        "Adam": torch.optim.Adam,  # Optimizer.__setstate__: AttributeError ('defaults')
    }


@pytest.mark.parametrize("name", ["Box", "VecNormalize", "dtype", "Adam"])
def test_load_from_pkl_names_an_object_its_attributes_do_not_rebuild(tmp_path, name):
    # The old tree let the class's own exception out of SB3's function, called by name under
    # install() (the RL Zoo and user code do): AttributeError, KeyError, TypeError.
    from stable_baselines3.common import save_util

    import zipsave.sb3

    path = _object_archive(tmp_path / "buffer.pkl", _classes()[name])
    with zipsave.sb3.installed():
        with pytest.raises(zipsave.DecodeError, match=re.escape(f"holds a {name} that its saved attributes")) as caught:
            save_util.load_from_pkl(path)
    assert caught.value.key == "_zipsave_object_class" and caught.value.member == "data"
    assert str(tmp_path) in str(caught.value.archive)
