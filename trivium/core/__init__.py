"""Records that flow between explorer, buffer and trainer, and the storage kinds that hold them."""
