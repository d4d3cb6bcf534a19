"""The field table of parquet-format 2.11 (the footer's structs, page headers, page indexes and
bloom filter headers), and the enums the project reads. Field ids as ``parquet.thrift`` numbers
them; anything newer is carried through as unknown bytes by the codec."""

from __future__ import annotations

from airflow_delta_maint.delta.parquet.compact import (BINARY, BOOL, BYTE, DOUBLE, I16, I32, I64, STRING, Field,
                                                       ListOf, StructSpec)

__all__ = ["BLOOM_FILTER_HEADER", "COLUMN_CHUNK", "COLUMN_INDEX", "COLUMN_META_DATA", "COLUMN_ORDER", "CODECS",
           "FILE_META_DATA", "KEY_VALUE", "LOGICAL_TYPE", "OFFSET_INDEX", "PAGE_HEADER", "PAGE_LOCATION",
           "PHYSICAL_TYPES", "ROW_GROUP", "SCHEMA_ELEMENT", "STATISTICS"]


def _spec(name: str, fields: dict[int, tuple]) -> StructSpec:
    return StructSpec(name, {fid: Field(*f) for fid, f in fields.items()})


def _empty(name: str) -> StructSpec:
    return StructSpec(name)


#: physical types by their enum value (Type)
PHYSICAL_TYPES = ("BOOLEAN", "INT32", "INT64", "INT96", "FLOAT", "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY")
#: compression codecs by their enum value (CompressionCodec), named as pyarrow names them
CODECS = ("uncompressed", "snappy", "gzip", "lzo", "brotli", "lz4", "zstd", "lz4_raw")
#: page types (PageType)
DATA_PAGE, INDEX_PAGE, DICTIONARY_PAGE, DATA_PAGE_V2 = 0, 1, 2, 3

SIZE_STATISTICS = _spec("SizeStatistics", {
    1: ("unencoded_byte_array_data_bytes", I64), 2: ("repetition_level_histogram", ListOf(I64)),
    3: ("definition_level_histogram", ListOf(I64))})
BOUNDING_BOX = _spec("BoundingBox", {
    1: ("xmin", DOUBLE), 2: ("xmax", DOUBLE), 3: ("ymin", DOUBLE), 4: ("ymax", DOUBLE), 5: ("zmin", DOUBLE),
    6: ("zmax", DOUBLE), 7: ("mmin", DOUBLE), 8: ("mmax", DOUBLE)})
GEOSPATIAL_STATISTICS = _spec("GeospatialStatistics", {
    1: ("bbox", BOUNDING_BOX), 2: ("geospatial_types", ListOf(I32))})
STATISTICS = _spec("Statistics", {
    1: ("max", BINARY), 2: ("min", BINARY), 3: ("null_count", I64), 4: ("distinct_count", I64),
    5: ("max_value", BINARY), 6: ("min_value", BINARY), 7: ("is_max_value_exact", BOOL),
    8: ("is_min_value_exact", BOOL), 9: ("nan_count", I64)})

_TIME_UNIT = _spec("TimeUnit", {1: ("MILLIS", _empty("MilliSeconds")), 2: ("MICROS", _empty("MicroSeconds")),
                                3: ("NANOS", _empty("NanoSeconds"))})
LOGICAL_TYPE = _spec("LogicalType", {
    1: ("STRING", _empty("StringType")), 2: ("MAP", _empty("MapType")), 3: ("LIST", _empty("ListType")),
    4: ("ENUM", _empty("EnumType")),
    5: ("DECIMAL", _spec("DecimalType", {1: ("scale", I32), 2: ("precision", I32)})),
    6: ("DATE", _empty("DateType")),
    7: ("TIME", _spec("TimeType", {1: ("isAdjustedToUTC", BOOL), 2: ("unit", _TIME_UNIT)})),
    8: ("TIMESTAMP", _spec("TimestampType", {1: ("isAdjustedToUTC", BOOL), 2: ("unit", _TIME_UNIT)})),
    10: ("INTEGER", _spec("IntType", {1: ("bitWidth", BYTE), 2: ("isSigned", BOOL)})),
    11: ("UNKNOWN", _empty("NullType")), 12: ("JSON", _empty("JsonType")), 13: ("BSON", _empty("BsonType")),
    14: ("UUID", _empty("UUIDType")), 15: ("FLOAT16", _empty("Float16Type")),
    16: ("VARIANT", _spec("VariantType", {1: ("specification_version", BYTE)})),
    17: ("GEOMETRY", _spec("GeometryType", {1: ("crs", STRING)})),
    18: ("GEOGRAPHY", _spec("GeographyType", {1: ("crs", STRING), 2: ("algorithm", I32)}))})
SCHEMA_ELEMENT = _spec("SchemaElement", {
    1: ("type", I32), 2: ("type_length", I32), 3: ("repetition_type", I32), 4: ("name", STRING),
    5: ("num_children", I32), 6: ("converted_type", I32), 7: ("scale", I32), 8: ("precision", I32),
    9: ("field_id", I32), 10: ("logicalType", LOGICAL_TYPE)})
KEY_VALUE = _spec("KeyValue", {1: ("key", STRING), 2: ("value", STRING)})
SORTING_COLUMN = _spec("SortingColumn", {1: ("column_idx", I32), 2: ("descending", BOOL), 3: ("nulls_first", BOOL)})
PAGE_ENCODING_STATS = _spec("PageEncodingStats", {1: ("page_type", I32), 2: ("encoding", I32), 3: ("count", I32)})
COLUMN_META_DATA = _spec("ColumnMetaData", {
    1: ("type", I32), 2: ("encodings", ListOf(I32)), 3: ("path_in_schema", ListOf(STRING)), 4: ("codec", I32),
    5: ("num_values", I64), 6: ("total_uncompressed_size", I64), 7: ("total_compressed_size", I64),
    8: ("key_value_metadata", ListOf(KEY_VALUE), True), 9: ("data_page_offset", I64), 10: ("index_page_offset", I64),
    11: ("dictionary_page_offset", I64), 12: ("statistics", STATISTICS, True),
    13: ("encoding_stats", ListOf(PAGE_ENCODING_STATS), True), 14: ("bloom_filter_offset", I64),
    15: ("bloom_filter_length", I32), 16: ("size_statistics", SIZE_STATISTICS, True),
    17: ("geospatial_statistics", GEOSPATIAL_STATISTICS, True)})
COLUMN_CRYPTO_META_DATA = _spec("ColumnCryptoMetaData", {
    1: ("ENCRYPTION_WITH_FOOTER_KEY", _empty("EncryptionWithFooterKey")),
    2: ("ENCRYPTION_WITH_COLUMN_KEY", _spec("EncryptionWithColumnKey", {
        1: ("path_in_schema", ListOf(STRING)), 2: ("key_metadata", BINARY)}))})
COLUMN_CHUNK = _spec("ColumnChunk", {
    1: ("file_path", STRING), 2: ("file_offset", I64), 3: ("meta_data", COLUMN_META_DATA),
    4: ("offset_index_offset", I64), 5: ("offset_index_length", I32), 6: ("column_index_offset", I64),
    7: ("column_index_length", I32), 8: ("crypto_metadata", COLUMN_CRYPTO_META_DATA),
    9: ("encrypted_column_metadata", BINARY)})
ROW_GROUP = _spec("RowGroup", {
    1: ("columns", ListOf(COLUMN_CHUNK)), 2: ("total_byte_size", I64), 3: ("num_rows", I64),
    4: ("sorting_columns", ListOf(SORTING_COLUMN)), 5: ("file_offset", I64), 6: ("total_compressed_size", I64),
    7: ("ordinal", I16)})
COLUMN_ORDER = _spec("ColumnOrder", {
    1: ("TYPE_ORDER", _empty("TypeDefinedOrder")), 2: ("IEEE_754_TOTAL_ORDER", _empty("IEEE754TotalOrder"))})
_AES = {1: ("aad_prefix", BINARY), 2: ("aad_file_unique", BINARY), 3: ("supply_aad_prefix", BOOL)}
ENCRYPTION_ALGORITHM = _spec("EncryptionAlgorithm", {
    1: ("AES_GCM_V1", _spec("AesGcmV1", _AES)), 2: ("AES_GCM_CTR_V1", _spec("AesGcmCtrV1", _AES))})
FILE_META_DATA = _spec("FileMetaData", {
    1: ("version", I32), 2: ("schema", ListOf(SCHEMA_ELEMENT)), 3: ("num_rows", I64),
    4: ("row_groups", ListOf(ROW_GROUP)), 5: ("key_value_metadata", ListOf(KEY_VALUE)), 6: ("created_by", STRING),
    7: ("column_orders", ListOf(COLUMN_ORDER)), 8: ("encryption_algorithm", ENCRYPTION_ALGORITHM),
    9: ("footer_signing_key_metadata", BINARY)})

# -- pages, page indexes, bloom filters ------------------------------------------------------------
DATA_PAGE_HEADER = _spec("DataPageHeader", {
    1: ("num_values", I32), 2: ("encoding", I32), 3: ("definition_level_encoding", I32),
    4: ("repetition_level_encoding", I32), 5: ("statistics", STATISTICS)})
DICTIONARY_PAGE_HEADER = _spec("DictionaryPageHeader", {
    1: ("num_values", I32), 2: ("encoding", I32), 3: ("is_sorted", BOOL)})
DATA_PAGE_HEADER_V2 = _spec("DataPageHeaderV2", {
    1: ("num_values", I32), 2: ("num_nulls", I32), 3: ("num_rows", I32), 4: ("encoding", I32),
    5: ("definition_levels_byte_length", I32), 6: ("repetition_levels_byte_length", I32),
    7: ("is_compressed", BOOL), 8: ("statistics", STATISTICS)})
PAGE_HEADER = _spec("PageHeader", {
    1: ("type", I32), 2: ("uncompressed_page_size", I32), 3: ("compressed_page_size", I32), 4: ("crc", I32),
    5: ("data_page_header", DATA_PAGE_HEADER), 6: ("index_page_header", _empty("IndexPageHeader")),
    7: ("dictionary_page_header", DICTIONARY_PAGE_HEADER), 8: ("data_page_header_v2", DATA_PAGE_HEADER_V2)})
PAGE_LOCATION = _spec("PageLocation", {1: ("offset", I64), 2: ("compressed_page_size", I32),
                                       3: ("first_row_index", I64)})
OFFSET_INDEX = _spec("OffsetIndex", {1: ("page_locations", ListOf(PAGE_LOCATION)),
                                     2: ("unencoded_byte_array_data_bytes", ListOf(I64))})
COLUMN_INDEX = _spec("ColumnIndex", {
    1: ("null_pages", ListOf(BOOL)), 2: ("min_values", ListOf(BINARY)), 3: ("max_values", ListOf(BINARY)),
    4: ("boundary_order", I32), 5: ("null_counts", ListOf(I64)), 6: ("repetition_level_histograms", ListOf(I64)),
    7: ("definition_level_histograms", ListOf(I64))})
BLOOM_FILTER_HEADER = _spec("BloomFilterHeader", {
    1: ("numBytes", I32), 2: ("algorithm", _spec("BloomFilterAlgorithm", {1: ("BLOCK", _empty("SplitBlockAlgorithm"))})),
    3: ("hash", _spec("BloomFilterHash", {1: ("XXHASH", _empty("XxHash"))})),
    4: ("compression", _spec("BloomFilterCompression", {1: ("UNCOMPRESSED", _empty("Uncompressed"))}))})
