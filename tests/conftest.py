import torch

# The suite's problems are small: one intra-op thread avoids OpenMP spin-waits that make tiny ops 100× slower when
# the two cores are shared (e.g. with the figure runner's kernels).
torch.set_num_threads(1)
