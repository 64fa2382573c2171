"""dsv4deploy: gated, declarative rollouts of DeepSeek-V4-Flash on SGLang."""

from pathlib import Path

# The installed package's folder: a built wheel carries the templates and the example inventories in it
# (collection_layout.py); a clone has them beside it.
PACKAGE_DIR = Path(__file__).resolve().parent
