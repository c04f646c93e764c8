"""PyInstaller runtime hook: a placeholder ``matplotlib`` so MediaPipe imports without it.

``mediapipe/python/solutions/drawing_utils.py`` does ``import matplotlib.pyplot``
at import time but only uses it in ``plot_landmarks``, which avatar_app never
calls. The bundle leaves matplotlib out (tens of MB with its fonts); this hook
registers a module whose attributes raise ImportError with a clear message, so
only a real use of matplotlib fails. Installed only when matplotlib is absent.
"""
import importlib.util
import sys
import types


class _NotBundled(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise ImportError(f"matplotlib is not included in the avatar-app bundle ({self.__name__}.{name})")


if "matplotlib" not in sys.modules and importlib.util.find_spec("matplotlib") is None:
    _mpl = _NotBundled("matplotlib")
    _mpl.__path__ = []
    _mpl.pyplot = _NotBundled("matplotlib.pyplot")
    sys.modules["matplotlib"] = _mpl
    sys.modules["matplotlib.pyplot"] = _mpl.pyplot
