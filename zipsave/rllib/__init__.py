"""RLlib (Ray) support: an RLlib algorithm, or any of its components, in one zipsave archive."""

from ._handler import RLlibHandler, handler

__all__ = ["RLlibHandler", "handler"]
