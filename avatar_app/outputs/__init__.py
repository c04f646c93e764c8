"""Live outputs to other software: VMC protocol sender, virtual camera; Unity axis conversions.

Both outputs are off by default and send only; optional packages (python-osc,
pyvirtualcam) are imported when an output is opened.
"""
from avatar_app.outputs.virtual_camera import VirtualCamera, virtual_camera_status
from avatar_app.outputs.vmc import DEFAULT_PORT, VmcSender, VmcSettings

__all__ = ["DEFAULT_PORT", "VirtualCamera", "VmcSender", "VmcSettings", "virtual_camera_status"]
