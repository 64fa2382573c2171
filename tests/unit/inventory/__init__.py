"""Unit tests of dsv4deploy.inventory."""
