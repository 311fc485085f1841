"""Maintenance services: each runs in every worker and acts from one at a time."""
