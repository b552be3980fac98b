"""The project's one base for errors that are the user's to fix (bad input, a missing upstream
run, a network that cannot be built from a spec): they get one line and exit status 2, never a
traceback (pipeline/tracking/guard.py). Anything else is a bug and keeps its traceback.

It lives on the ground floor, in ``models``, which ``pipeline`` imports and never the reverse, so
that every error type of both packages can derive from it without an import pointing up.
"""

from __future__ import annotations


class UserError(ValueError):
    """Input the user can fix; the message names what and how."""
