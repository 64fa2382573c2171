"""Unit tests of dsv4deploy.monitoring."""
