"""The commands as users run them: `attnspec check` (hostile targets, a fuzz of its command lines),
`pytest --attnspec`, `attnspec.check()`, the public API and the wheel installed in a fresh venv."""
