"""The kit against outside targets: the zoo of correct ones passes, every broken twin fails naming its
cause, declared and misdeclared families, the peers' recipes on the same corpus."""
