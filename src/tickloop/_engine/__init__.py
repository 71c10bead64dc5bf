"""The trio driver of the core scheduler: tasks, threads, timeouts, approval asking."""
