"""OPTIMIZE's rewrite of data files: reading and writing files (deletion vectors applied, exact
names and statistics), bin-packing, Z-order and Hilbert-curve clustering on Spark, and
``target_files`` even splits; and committing what was rewritten while writers keep committing
(bins in commits of their own, rebased onto deletion vectors written meanwhile)."""
