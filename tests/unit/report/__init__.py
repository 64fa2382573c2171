"""Unit tests of dsv4deploy.report."""
