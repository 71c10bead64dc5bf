"""Durability: the SQLite store and crash resume."""
