"""emmy: PyTorch models to CUDA kernels, with every choice recalled from recorded knowledge."""

__version__ = "0.1.0"
