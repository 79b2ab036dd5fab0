"""The public operations: grouped conv2d and (batched) matmul on the simulated IPU."""
