"""The mutation engine: `attnspec mutate` on a user's project, the evidence, and each fault's idioms."""
