"""scripts/gpu-check by part: its settings, the context a part measures with, the parts
(memory-bound, products, attention, whole models, processes, loops), running a part, and
the report. The script itself parses the options and runs the parts under the budget."""
