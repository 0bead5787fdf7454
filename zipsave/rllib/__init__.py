"""RLlib (Ray) support: an RLlib algorithm, or any of its components, in one zipsave archive.

The handler registers with the core through the ``zipsave.handlers`` entry point, so
``zipsave.save(algo, "ppo.zip")``, ``zipsave.load("ppo.zip")`` and ``zipsave.restore(algo,
"ppo.zip", component=...)`` work without importing this package; importing it imports no Ray.
"""

from ._convert import from_rllib, to_rllib
from ._handler import RLlibHandler, handler
from ._tree import Node

__all__ = ["Node", "RLlibHandler", "from_rllib", "handler", "to_rllib"]
