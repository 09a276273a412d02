"""Beside jupyter_server_config.json: lab-config/custom/custom.css (printed text wrapped at spaces), on every page."""
from pathlib import Path

c.LabApp.custom_css = True  # noqa: F821  (c is the config traitlets hands this file)
c.ServerApp.static_custom_path = [str(Path(__file__).resolve().parent.parent / "custom")]  # noqa: F821
