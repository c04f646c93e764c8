"""``python -m avatar_app`` = ``avatar-app``."""
import sys

from avatar_app.cli import main

sys.exit(main())
