"""Real ``nvidia-smi -q -x`` captures: their model facts, the comparison with a simulated node, the import."""
