"""What one run computes and writes: the network, the exchange between ranks, the epoch loop, its files."""
