"""Unit tests: one folder per package of dsv4deploy, plugins/ for the collection's host code."""
