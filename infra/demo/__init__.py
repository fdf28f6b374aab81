"""`make demo`: the whole pipeline on the local stack, with a load generator and a live view."""
