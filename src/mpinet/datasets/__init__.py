"""What lands in resources/: fetching a source, preparing it into .npy arrays, and reading them back."""
