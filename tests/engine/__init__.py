"""Differential tests of the view engine against the embedded SurrealDB engine."""
