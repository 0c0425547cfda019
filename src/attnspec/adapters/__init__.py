"""Built-in targets, by name (attnspec/protocol/targets.py: ADAPTERS): impl, torch's SDPA, a flash-style
reference kernel, gpt-oss's reference, and Hugging Face transformers' attention, layers and models
(families/, one module a family)."""
