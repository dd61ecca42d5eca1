"""JAX runner (jit-compiled steps, psum of the gradients over gloo). Importing this package does not import jax."""
