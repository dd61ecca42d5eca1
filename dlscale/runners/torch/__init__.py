"""PyTorch runner (DDP over gloo). Importing this package does not import torch."""
