"""Each fault's idioms: the code its operators must mutate, and the look-alikes they must leave alone."""
