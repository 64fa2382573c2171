"""Unit tests of dsv4deploy.sglang."""
