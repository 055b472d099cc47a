"""emmy: PyTorch models to CUDA kernels, with every choice recalled from recorded knowledge."""

__version__ = "0.1.0"


def compile(module, *example_inputs, **options):  # noqa: A001 - mirrors torch.compile
    """`emmy.compile(module, *example_inputs)`: see emmy.api.compile (imports torch)."""
    from emmy.api import compile as compile_module

    return compile_module(module, *example_inputs, **options)
