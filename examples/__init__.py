"""Example targets: a toy kernel, module targets, a user's project and the zoo of outside styles."""
