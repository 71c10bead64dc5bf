"""The agent: the outer loop of both protocols, prompts, retries."""
