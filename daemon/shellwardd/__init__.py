"""shellwardd: the shellward daemon."""
