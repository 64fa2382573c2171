"""Unit tests of dsv4deploy.rollout."""
