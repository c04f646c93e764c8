"""Moved to :mod:`avatar_app.render.contact_sheet` (it renders; avatar/ must not import render/).

Kept only for ``cli.py`` until it imports the new place (issue 16); pyproject's
import-linter contract names this one exception. Delete it then.
"""
from avatar_app.render.contact_sheet import make_contact_sheet

__all__ = ["make_contact_sheet"]
