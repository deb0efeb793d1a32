"""Distributed builds (Ray)."""
