"""Stable-Baselines3 integration: adopt zipsave for SB3's own save and load in one line.

Importing this package does not import SB3; :func:`install` does.
"""

from __future__ import annotations

from ._install import install, installed, is_installed, uninstall

__all__ = ["install", "installed", "is_installed", "uninstall"]
