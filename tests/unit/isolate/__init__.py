"""Unit tests of dsv4deploy.isolate."""
