"""Observability: run events, traces, the HTML timeline."""
