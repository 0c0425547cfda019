"""Example targets for the conformance kit: ``pytest properties --impl examples.toy_attention:attention``."""
