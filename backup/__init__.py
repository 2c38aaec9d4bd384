"""Backups and restores of the main database in object storage (see backup/README.md)."""
