"""Pickle SB3's and the RL Zoo's schedule closures (and a user's lambda) with cloudpickle on
every CPython 3.8-3.13, for tests/test_sb3_schedules.py: a closure written on any of them must
be recognised on the Python that loads it. The sources are SB3 2.0-2.6's ``constant_fn``,
``get_linear_fn`` and ``get_schedule_fn`` (module ``stable_baselines3.common.utils``) and the
Zoo's ``linear_schedule`` (rl-zoo3 2.6's ``rl_zoo3.utils`` and the older ``utils/utils.py``).

    PYTHONPATH=<a folder holding cloudpickle 2.x> python tests/data/sb3_old/make_closures.py \\
        $(pyenv root)/versions/3.{8.18,9.18,10.13,11.7,12.1,13.0}/bin/python

writes ``closures.json`` beside this file: ``{"3.8": {name: base64 pickle}, ...}``. Run by a
Python given on the command line, with ``--one``, it prints its own entry.
"""

from __future__ import annotations

import base64
import json
import pathlib
import subprocess
import sys

SB3 = '''
def constant_fn(val: float) -> Schedule:
    """
    Create a function that returns a constant
    It is useful for learning rate schedule (to avoid code duplication)

    :param val: constant value
    :return: Constant value function
    """

    def func(_):
        return val

    return func


def get_linear_fn(start: float, end: float, end_fraction: float) -> Schedule:
    """
    Create a function that interpolates linearly between start and end
    """

    def func(progress_remaining: float) -> float:
        if (1 - progress_remaining) > end_fraction:
            return end
        else:
            return start + (1 - progress_remaining) * (end - start) / end_fraction

    return func


def get_schedule_fn(value_schedule):
    if isinstance(value_schedule, (float, int)):
        # Cast to float to avoid errors
        value_schedule = constant_fn(float(value_schedule))
    else:
        assert callable(value_schedule)
    # Cast to float to avoid unpickling errors to enable weights_only=True, see GH#1900
    # Some types are have odd behaviors when part of a Schedule, like numpy floats
    return lambda progress_remaining: float(value_schedule(progress_remaining))
'''

ZOO = {
    "rl_zoo3.utils": '''
def linear_schedule(initial_value):
    initial_value_ = float(initial_value)

    def func(progress_remaining: float) -> float:
        """
        Progress will decrease from 1 (beginning) to 0
        :param progress_remaining: (float)
        :return: (float)
        """
        return progress_remaining * initial_value_

    return func
''',
    "utils.utils": '''
def linear_schedule(initial_value):
    if isinstance(initial_value, str):
        initial_value = float(initial_value)

    def func(progress_remaining: float) -> float:
        """
        Progress will decrease from 1 (beginning) to 0
        :param progress_remaining: (float)
        :return: (float)
        """
        return progress_remaining * initial_value

    return func
''',
}


def one() -> dict[str, str]:
    import cloudpickle

    sb3: dict = {"__name__": "stable_baselines3.common.utils", "Schedule": object}
    exec(compile(SB3, "stable_baselines3/common/utils.py", "exec", dont_inherit=True), sb3)
    values = {
        "constant_fn": sb3["constant_fn"](0.25),
        "get_linear_fn": sb3["get_linear_fn"](1e-3, 1e-4, 0.5),
        "get_schedule_fn": sb3["get_schedule_fn"](0.2),
    }
    for module, source in ZOO.items():
        zoo: dict = {"__name__": module}
        exec(compile(source, module.replace(".", "/") + ".py", "exec", dont_inherit=True), zoo)
        values[f"zoo:{module}"] = zoo["linear_schedule"](0.001)
        # what SB3 2.3-2.6 stored for the Zoo's `clip_range: lin_0.2`
        values[f"sb3_of_zoo:{module}"] = sb3["get_schedule_fn"](zoo["linear_schedule"](0.2))
    user: dict = {"__name__": "__main__"}
    exec("schedule = lambda progress: 5e-4 * progress", user)
    values["lambda"] = user["schedule"]
    return {name: base64.b64encode(cloudpickle.dumps(value, protocol=4)).decode() for name, value in values.items()}


def main(pythons: list[str]) -> None:
    out = {}
    for python in pythons:
        text = subprocess.run([python, __file__, "--one"], check=True, capture_output=True, text=True).stdout
        entry = json.loads(text)
        out[entry.pop("python")] = entry
    path = pathlib.Path(__file__).with_name("closures.json")
    path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--one"]:
        print(json.dumps({"python": "%d.%d" % sys.version_info[:2], **one()}))
    else:
        main(sys.argv[1:])
