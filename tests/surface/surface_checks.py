"""The checks the ``surface`` tier runs against one TensorRT version's real Python bindings.

Each check runs a trtkit code path against :class:`surface_proxy.Surface` (the real module, or the fake backend
with every name checked against the real module) and returns facts; an exception or a failed assertion fails it.
``features`` in the facts feed ``docs/support-matrix.md`` (``scripts/support_matrix.py``).

The checks live in :mod:`surface_compat_checks` (the compat layer, the fake's names) and :mod:`surface_path_checks`
(builds, plans, runner, inspection); importing them registers them in :data:`CHECKS`, in that order. Nothing here
imports tensorrt or trtkit at import time: the pytest side reads the names only, ``driver.py`` runs the checks in a
child process with one version's surface on ``sys.path``.
"""

from __future__ import annotations

import surface_compat_checks  # noqa: F401 - registers its checks
import surface_path_checks  # noqa: F401 - registers its checks
from surface_base import CHECKS, Context

__all__ = ["CHECKS", "Context"]
