# A CUDA compute process for the GPU tests and benches: multiplies 4096x4096 matrices for
# SECONDS (default 30), waiting for each product, so the process also keeps waking on the CPU
# (a usage source that lists only scheduled processes sees it). Needs torch with CUDA.
#   python3 bench/cuda_load.py [SECONDS]
# crates/testkit/src/cuda.rs embeds this file.
import sys
import time

import torch

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
x = torch.rand(4096, 4096, device="cuda")
end = time.time() + seconds
while time.time() < end:
    y = x @ x
    torch.cuda.synchronize()
