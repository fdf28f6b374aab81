"""`make bench`: every benchmark of the product, one JSON summary and one plot."""
