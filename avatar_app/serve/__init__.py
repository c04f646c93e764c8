"""``avatar-app serve``: the app's engines on Triton Inference Server, and renders that use them.

- :mod:`avatar_app.serve.server`: :class:`~avatar_app.serve.server.EngineServer` starts the
  ``tritonserver`` of the nvidia-pytriton wheel with every shipped engine (Python backend,
  dynamic batching), loopback only unless told otherwise.
- :mod:`avatar_app.serve.engines`: the served engines, opened and verified by the engine layer.
- :mod:`avatar_app.serve.environment`: the server process's ``LD_LIBRARY_PATH`` (the stub's libpython).
- :mod:`avatar_app.serve.cli`: the ``serve`` command; :mod:`avatar_app.serve.remote_render`:
  ``render --remote``.

The client side, the ``remote`` backend of the engine layer, is
:mod:`avatar_app.inference.remote`. Importing this package imports no pytriton.
"""
