"""Unit tests of dsv4deploy.cli."""
