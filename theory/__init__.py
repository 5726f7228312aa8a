"""Numerical verification of the papers' claims."""
