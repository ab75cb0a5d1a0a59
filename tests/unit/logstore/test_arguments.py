"""Every bad argument to the log store is an InvalidArgumentError (a ValueError) or an ArgumentTypeError (a
TypeError), both DynacommitErrors, naming what is wrong; nothing is written (issue 7, item 10)."""

from __future__ import annotations

import pytest

from logstore import (
    ConfigurationError,
    DynacommitError,
    StorageOptions,
    TableUri,
    open_log_store,
)
from logstore.errors import ArgumentTypeError, InvalidArgumentError
from logstore.options import MAX_PREFIX_BYTES


@pytest.fixture
def mem(memory_uri):
    store = open_log_store(memory_uri)
    store.write(0, b'{"commitInfo":{}}\n')
    store.wait_finished()  # version 0's temp file is deleted on the pool after write returned
    return store


def assert_argument_error(info, cls, *fragments):
    error = info.value
    assert isinstance(error, cls) and isinstance(error, DynacommitError)
    assert isinstance(error, TypeError if cls is ArgumentTypeError else ValueError)
    for fragment in fragments:
        assert fragment in str(error), (fragment, str(error))


def nothing_written(store) -> None:
    assert list(store.list_from(0)) == [0]
    assert list(store.objects.list(store.log_prefix + ".tmp/")) == []
    assert store._get_entry(1) is None


# ------------------------------------------------------------------------------------------ write
def test_a_str_body_is_refused_naming_bytes(mem):
    with pytest.raises(ArgumentTypeError) as info:
        mem.write(1, '{"commitInfo":{}}\n')
    assert_argument_error(info, ArgumentTypeError, "bytes", "str")
    nothing_written(mem)


@pytest.mark.parametrize("body", [None, 42, ["line"], {"commitInfo": {}}])
def test_a_body_of_another_type_is_refused(mem, body):
    with pytest.raises(ArgumentTypeError) as info:
        mem.write(1, body)
    assert_argument_error(info, ArgumentTypeError, "bytes")
    nothing_written(mem)


def test_an_empty_body_is_refused(mem):
    with pytest.raises(InvalidArgumentError) as info:
        mem.write(1, b"")
    assert_argument_error(info, InvalidArgumentError, "empty")
    nothing_written(mem)


def test_bytes_like_bodies_are_taken_as_bytes(mem):
    mem.write(1, bytearray(b'{"a":1}\n'))
    mem.write(2, memoryview(b'{"a":2}\n'))
    assert mem.read(1) == b'{"a":1}\n' and mem.read(2) == b'{"a":2}\n'


def test_a_negative_version_is_an_invalid_argument(mem):
    with pytest.raises(InvalidArgumentError) as info:
        mem.write(-1, b"{}\n")
    assert_argument_error(info, InvalidArgumentError, "version", "-1")


@pytest.mark.parametrize("version", [True, False, 1.0, "1", None])
def test_a_version_that_is_not_an_int_is_a_type_error(mem, version):
    with pytest.raises(ArgumentTypeError) as info:
        mem.write(version, b"{}\n")
    assert_argument_error(info, ArgumentTypeError, "version", "int")
    nothing_written(mem)


def test_overwrite_must_be_a_bool(mem):
    with pytest.raises(ArgumentTypeError) as info:
        mem.write(1, b"{}\n", overwrite="no")
    assert_argument_error(info, ArgumentTypeError, "overwrite")
    nothing_written(mem)


# ------------------------------------------------------------------------------------------ reads
@pytest.mark.parametrize("call,cls", [
    (lambda s: s.read(-1), InvalidArgumentError),
    (lambda s: s.read(None), ArgumentTypeError),
    (lambda s: s.list_from(-3), InvalidArgumentError),
    (lambda s: s.list_from("0"), ArgumentTypeError),
    (lambda s: s.latest_version(start=-1), InvalidArgumentError),
    (lambda s: s.latest_version(start="0"), ArgumentTypeError),
    (lambda s: s.recover(-2), InvalidArgumentError),
    (lambda s: s.recover(True), ArgumentTypeError),
    (lambda s: s.read_file(5), ArgumentTypeError),
    (lambda s: s.read_file("../x"), InvalidArgumentError),
    (lambda s: s.write_file("_last_checkpoint", "{}"), ArgumentTypeError),
    (lambda s: s.write_file("_last_checkpoint", b"{}", if_absent="yes"), ArgumentTypeError),
    (lambda s: s.sweep_temp_files(dry_run="yes"), ArgumentTypeError),
    (lambda s: s.sweep_temp_files(older_than_seconds=-1), InvalidArgumentError),
], ids=["read-negative", "read-none", "list-negative", "list-str", "latest-negative", "latest-str",
        "recover-negative", "recover-bool", "read-file-int", "read-file-path", "write-file-str",
        "write-file-flag", "sweep-flag", "sweep-age"])
def test_every_operation_checks_its_arguments(mem, call, cls):
    with pytest.raises(cls) as info:
        call(mem)
    assert_argument_error(info, cls)


# ------------------------------------------------------------------------------------ storage options
@pytest.mark.parametrize("options", ["AWS_REGION=eu-west-1", ["AWS_REGION"], 42, b"{}"],
                         ids=["str", "list", "int", "bytes"])
def test_storage_options_that_are_not_a_dict_are_a_type_error(memory_uri, options):
    with pytest.raises(ArgumentTypeError) as info:
        open_log_store(memory_uri, storage_options=options)
    assert_argument_error(info, ArgumentTypeError, "storage_options", "dict")


@pytest.mark.parametrize("options,fragment", [
    ({"AWS_ALLOW_HTTP": True}, "AWS_ALLOW_HTTP"),
    ({"DYNACOMMIT_TIMEOUT_SECONDS": 30}, "DYNACOMMIT_TIMEOUT_SECONDS"),
    ({"AWS_REGION": None}, "AWS_REGION"),
    ({1: "x"}, "names must be strings"),
])
def test_option_names_and_values_that_are_not_strings_are_a_type_error(options, fragment):
    with pytest.raises(ArgumentTypeError) as info:
        StorageOptions.resolve(options)
    assert_argument_error(info, ArgumentTypeError, fragment)


def test_a_secret_given_with_the_wrong_type_is_not_echoed():
    with pytest.raises(ArgumentTypeError) as info:
        StorageOptions.resolve({"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": 1234567})
    assert "1234567" not in str(info.value)


def test_a_session_token_without_its_key_pair_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="AWS_SESSION_TOKEN"):
        StorageOptions.resolve({"AWS_SESSION_TOKEN": "FQoGZXIvYXdzE"})


# ------------------------------------------------------------------------------------------ URIs
def test_a_uri_that_is_not_a_string_is_a_type_error():
    with pytest.raises(ArgumentTypeError) as info:
        open_log_store(42)
    assert_argument_error(info, ArgumentTypeError, "URI", "int")


def test_a_uri_too_long_for_s3_keys_is_refused():
    with pytest.raises(ConfigurationError) as info:
        TableUri.parse("s3://bucket/" + "x" * 2100)
    assert_argument_error(info, ConfigurationError, "too long", "1024", f"at most {MAX_PREFIX_BYTES} bytes")
    assert "x" * 200 not in str(info.value)  # the message stays readable


def test_the_longest_table_path_allowed_fits_every_log_key_in_s3s_limit():
    longest = TableUri.parse("s3://bucket/" + "x" * MAX_PREFIX_BYTES)
    temp = longest.key("_delta_log/.tmp/00000000000000000000.json.") + "0" * 36
    assert len(temp.encode()) <= 1024
    with pytest.raises(ConfigurationError):
        TableUri.parse("s3://bucket/" + "x" * (MAX_PREFIX_BYTES + 1))
    with pytest.raises(ConfigurationError):  # bytes, not characters
        TableUri.parse("s3://bucket/" + "é" * (MAX_PREFIX_BYTES // 2 + 1))


@pytest.mark.parametrize("uri", [
    "s3://AKIAEXAMPLE:wJalrXUtnFEMIsecretKEY@bucket/t",
    "s3a://user:wJalrXUtnFEMIsecretKEY@bucket",
    "AKIAEXAMPLE:wJalrXUtnFEMIsecretKEY@bucket/t",
    "s3://bucket/t?X-Amz-Signature=wJalrXUtnFEMIsecretKEY",
    "gs://user:wJalrXUtnFEMIsecretKEY@bucket/t",
])
def test_a_uri_carrying_a_secret_never_echoes_it(uri):
    with pytest.raises(ConfigurationError) as info:
        open_log_store(uri)
    assert "wJalrXUtnFEMIsecretKEY" not in str(info.value)
    assert "***" in str(info.value)


@pytest.mark.parametrize("uri", ["s3://bucket/t/_delta_log", "s3://bucket/t/_delta_log/", "s3://bucket/_delta_log/x",
                                 "memory://b/t/_delta_log/_commit_x"])
def test_a_table_inside_another_tables_delta_log_is_refused(uri):
    with pytest.raises(ConfigurationError, match="cannot live inside another table's _delta_log"):
        TableUri.parse(uri)


def test_every_argument_error_is_both_a_dynacommit_error_and_a_builtin():
    assert issubclass(InvalidArgumentError, ValueError) and issubclass(InvalidArgumentError, DynacommitError)
    assert issubclass(ArgumentTypeError, TypeError) and issubclass(ArgumentTypeError, DynacommitError)


@pytest.mark.parametrize("uri, fragment", [
    ("s3://Bad_Bucket!/t", "no S3 bucket can be named"),
    ("s3://b/t\x00", "control character"),
    ("s3://b/t\nu", "control character"),
])
def test_a_bucket_name_s3_never_allows_or_a_control_character_is_refused(uri, fragment):
    with pytest.raises(ConfigurationError, match=fragment):
        TableUri.parse(uri)
