"""Unit tests of dsv4deploy.plan."""
