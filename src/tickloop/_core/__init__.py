"""The sans-IO heart: expressions, the log, validation, tools, decisions, the scheduler.

No trio, httpx or sqlite3 here: a trio driver (`_engine`) and a Temporal workflow
drive the same code."""
