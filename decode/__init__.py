"""Real models: loading, sampling rows, the tree-masked KV cache, generation, and the rows
of a real pair along a drafted tree. Imports torch (the theory side does not)."""
