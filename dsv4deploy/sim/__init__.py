"""Embedded simulated GPU host: a stand-in for SGLang's server and nvidia-smi.

Standard library only, so it runs on any target host's ``python3``. Entry points:
``python -m dsv4deploy.sim.server <sglang launch_server flags>`` and
``python -m dsv4deploy.sim.smi <nvidia-smi flags>``. See README.md in this folder.
"""
