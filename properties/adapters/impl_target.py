"""impl/ itself: every capability, and every property (the default target)."""

from impl import scaled_dot_product_attention
from properties.targets import CAPABILITIES, Target

TARGET = Target("impl", scaled_dot_product_attention, frozenset(CAPABILITIES), "attnspec's impl/")
