"""Benches against torch's own kernels, the campaign's speed and the decode curve (``tox -e bench``)."""
