"""Unit tests of dsv4deploy.spec."""
