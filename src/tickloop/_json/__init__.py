"""JSON values: the streaming parser and argument repair. Depends on nothing else here."""
