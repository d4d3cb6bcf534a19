"""Parquet files below the Arrow API: the footer codec (Thrift compact protocol over a field table
of parquet-format) and a writer that makes one file of other files' row groups copied byte for
byte. Pure Python and pyarrow; imports storage and errors only."""
