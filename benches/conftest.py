"""Benches run on two CPU threads, so that runs on different machines compare."""

import torch

torch.set_num_threads(2)
