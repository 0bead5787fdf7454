"""Archives of SB3 < 2.0, whose spaces were pickled from the old ``gym`` package (the RL Zoo's
trained agents of 2021-2022, most models on the Hugging Face Hub of that time). SB3 2.x cannot
load them without ``gym`` installed; zipsave reads the spaces as gymnasium's, safely.

``gym`` itself cannot be installed beside numpy 2, so the pickles are made here from a stand-in
package with gym 0.21's module paths and pickled state (``shape`` and ``np_random`` as
attributes, a ``RandomState`` inside), which is what those archives hold; the stand-in is gone
from ``sys.modules`` and ``sys.path`` before zipsave reads them."""

from __future__ import annotations

import base64
import json
import sys
import textwrap
import zipfile

import cloudpickle
import gymnasium
import numpy as np
import pytest

import zipsave

LEGACY_GYM = {
    "gym/__init__.py": "",
    "gym/spaces/__init__.py": """
        from gym.spaces.box import Box
        from gym.spaces.dict import Dict
        from gym.spaces.discrete import Discrete
        from gym.spaces.multi_discrete import MultiDiscrete
    """,
    "gym/spaces/space.py": """
        import numpy as np

        SHAPE, RNG = {attributes!r}

        class Space:
            def __init__(self, shape=None, dtype=None):
                # gym < 0.21 stored `shape` and `np_random`, gym 0.21 `_shape` and `_np_random`
                setattr(self, SHAPE, None if shape is None else tuple(shape))
                self.dtype = None if dtype is None else np.dtype(dtype)
                setattr(self, RNG, np.random.RandomState(0))  # pickled along
    """,
    "gym/spaces/box.py": """
        import numpy as np
        from gym.spaces.space import Space

        class Box(Space):
            def __init__(self, low, high, shape, dtype=np.float32):
                super().__init__(shape, dtype)
                self.low = np.full(shape, low, dtype=dtype)
                self.high = np.full(shape, high, dtype=dtype)
                self.bounded_below = -np.inf < self.low
                self.bounded_above = np.inf > self.high
    """,
    "gym/spaces/discrete.py": """
        import numpy as np
        from gym.spaces.space import Space

        class Discrete(Space):
            def __init__(self, n):
                self.n = n
                super().__init__((), np.int64)
    """,
    "gym/spaces/multi_discrete.py": """
        import numpy as np
        from gym.spaces.space import Space

        class MultiDiscrete(Space):
            def __init__(self, nvec):
                self.nvec = np.asarray(nvec, dtype=np.int64)
                super().__init__(self.nvec.shape, np.int64)
    """,
    "gym/spaces/dict.py": """
        from collections import OrderedDict
        from gym.spaces.space import Space

        class Dict(Space):
            def __init__(self, spaces):
                self.spaces = OrderedDict(sorted(spaces.items()))  # as gym sorted a plain dict
                super().__init__(None, None)
    """,
}


@pytest.fixture(params=[("shape", "np_random"), ("_shape", "_np_random")], ids=["gym<0.21", "gym0.21"])
def legacy_pickle(tmp_path, request):
    """``pickle(make)``: a cloudpickle, as SB3 1.x wrote it, of ``make(gym.spaces)``."""
    for name, source in LEGACY_GYM.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(source).replace("{attributes!r}", repr(request.param)))

    def pickle(make):
        sys.path.insert(0, str(tmp_path))
        try:
            import gym.spaces

            return base64.b64encode(cloudpickle.dumps(make(gym.spaces))).decode()
        finally:
            sys.path.remove(str(tmp_path))
            for module in [m for m in sys.modules if m == "gym" or m.startswith("gym.")]:
                del sys.modules[module]

    yield pickle
    assert "gym" not in sys.modules


def _entry(spaces_module_name: str, serialized: str) -> dict:
    return {":type:": f"<class '{spaces_module_name}'>", ":serialized:": serialized}


def test_a_ppo_of_sb3_1_with_gym_spaces_loads_safely_and_acts_the_same(tmp_path, legacy_pickle):
    from stable_baselines3 import PPO

    model = PPO(
        "MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, n_epochs=1, seed=0, policy_kwargs={"net_arch": [16]}
    )
    model.save(tmp_path / "ppo.zip")
    with zipfile.ZipFile(tmp_path / "ppo.zip") as zf:
        members = {name: zf.read(name) for name in zf.namelist()}
    data = json.loads(members["data"])
    high = np.array([4.8, np.finfo(np.float32).max, 0.41887903, np.finfo(np.float32).max], dtype=np.float32)
    data["observation_space"] = _entry("gym.spaces.box.Box", legacy_pickle(lambda s: s.Box(-high, high, (4,))))
    data["action_space"] = _entry("gym.spaces.discrete.Discrete", legacy_pickle(lambda s: s.Discrete(2)))
    members["data"] = json.dumps(data).encode()
    with zipfile.ZipFile(tmp_path / "sb3_1.zip", "w") as zf:
        for name, raw in members.items():
            zf.writestr(name, raw)

    loaded = zipsave.load(tmp_path / "sb3_1.zip", cls=PPO)
    assert type(loaded.observation_space) is gymnasium.spaces.Box
    assert np.array_equal(loaded.observation_space.high, high) and loaded.observation_space.shape == (4,)
    assert loaded.action_space == gymnasium.spaces.Discrete(2)
    obs = np.random.default_rng(0).uniform(-1, 1, (16, 4)).astype(np.float32)
    assert np.array_equal(loaded.predict(obs, deterministic=True)[0], model.predict(obs, deterministic=True)[0])
    assert loaded.observation_space.sample() in loaded.observation_space  # a working space, own RNG


def test_gym_dict_and_multi_discrete_spaces_become_gymnasium_ones(tmp_path, legacy_pickle):
    serialized = legacy_pickle(lambda s: s.Dict({"pos": s.Box(-1.0, 1.0, (2,)), "mode": s.MultiDiscrete([3, 4])}))
    with zipfile.ZipFile(tmp_path / "spaces.zip", "w") as zf:
        zf.writestr("data", json.dumps({"observation_space": _entry("gym.spaces.dict.Dict", serialized)}))
    data = zipsave.load_archive(tmp_path / "spaces.zip", load_data=True)[0]
    space = data["observation_space"]
    assert type(space) is gymnasium.spaces.Dict
    assert dict(space.spaces) == {
        "pos": gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32),
        "mode": gymnasium.spaces.MultiDiscrete([3, 4]),
    }
    assert space.sample() in space
