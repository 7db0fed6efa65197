"""shellward: a client for the shellward daemon."""
