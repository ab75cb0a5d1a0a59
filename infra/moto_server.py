"""The moto server of the local stack: moto's application behind waitress (connections kept open between
requests, as S3 and DynamoDB keep them, and a fixed pool of threads: :func:`serve`), with DynamoDB requests
applied one at a time, as DynamoDB applies them: atomically and in isolation.

moto's server is threaded, and its ``TransactWriteItems`` is neither atomic nor isolated under concurrent
requests: it checks and applies the items one by one, and on a cancellation restores a copy of the whole
table taken when it began, which undoes every write other requests made meanwhile (a commit entry put,
an entry marked complete, a queued append). Amazon DynamoDB never does either. Every method of moto's
DynamoDB backend is therefore run under one lock here; S3 is moto's as it is.

Costs of moto that Amazon DynamoDB (and S3) do not have are also taken out, each a small change of
moto's backend at start that keeps its answers and its table state the same (tests/integration/
test_moto_server.py runs the same requests against stock moto and compares):

* A Query on a table's own key walks the items of the partition asked for only (``query_by_partition``).
  Stock moto walks and sorts every item of the DynamoDB table, all partitions, for every Query, so a Query
  cost moto the size of the whole table; DynamoDB reads one partition in key order.
* A transaction keeps, for a cancellation to restore, the items at the keys it names
  (``undo_only_named_items``). Stock moto deep-copies every table the transaction names, once per item of
  the transaction, so a transaction cost moto the table's size times its items; DynamoDB's cost is its items.
* A request is routed to its service without listing moto's package directory (``route_without_listing``):
  stock moto lists it, and stats each entry, at every request (S3 too); and the methods of the service's
  response class are listed once per class (``method_names_once``), not at every request.
* An answer's attribute values are written from the members they hold (``attribute_values_as_given``):
  stock moto's serializer tries each of the ten members of the ``AttributeValue`` shape on every attribute
  of every item it returns, so a Query of the group commit's queue cost it about 1 ms per item.
* Connections stay open between requests (:func:`serve`). moto's own server, werkzeug's development server,
  closes each after one answer and starts a thread per connection.

The group commit's Queries of its queue and its transactions (one item per append taken) paid these the
most; every client's Queries (deltalake's newest-version Query too) get cheaper alike, and every client's
requests (deltalake's too) stop paying a connection each.

    python -m infra.moto_server -H 127.0.0.1 -p PORT

``DYNACOMMIT_MOTO_PROFILE=FILE`` (for benchmarks) writes, when the server is stopped (SIGTERM), the CPU time
of its requests by kind (S3 method and key kind, DynamoDB operation) to ``FILE`` and a cProfile of its
DynamoDB backend (the serialized part) to ``FILE.pstats``. ``DYNACOMMIT_MOTO_STOCK=1`` leaves moto's
server, Query, transaction, routing and serializer as they are (DynamoDB serialized all the same), for a
benchmark to show both.
"""

from __future__ import annotations

import collections
import cProfile
import functools
import inspect
import io
import os
import sys
import threading
import time


def query_by_partition() -> None:
    """Make moto's ``Table.query`` on a table's own key (no index) walk the items of the partition asked for
    only. Stock moto walks and sorts every item of the DynamoDB table (``Table.all_items``: all partitions)
    and then keeps those of the hash key asked for; DynamoDB reads one partition, in range-key order. Here,
    for the duration of such a query, the table's ``all_items`` returns that partition's items (without
    creating an entry for an absent hash key); everything after it is moto's code as it is (the sort by
    range key, ``ScanIndexForward``, ``ExclusiveStartKey``, ``Limit``, range conditions, filters,
    projections), so the answers are the same."""
    from moto.dynamodb.models.table import Table

    every_item = Table.all_items
    query = Table.query

    @functools.wraps(every_item)
    def all_items(self):
        partition_of = self.__dict__.get("_dynacommit_partition")
        if partition_of is None:
            return every_item(self)
        partition = self.items.get(partition_of[0])
        if partition is None:
            return []
        return list(partition.values()) if self.range_key_attr else [partition]

    @functools.wraps(query)
    def partition_query(self, hash_key, *args, **kwargs):
        index_name = args[6] if len(args) > 6 else kwargs.get("index_name")
        try:
            hash(hash_key)
        except TypeError:  # not a key's type (a list, a map): moto's own walk answers it
            return query(self, hash_key, *args, **kwargs)
        if index_name or hash_key is None:
            return query(self, hash_key, *args, **kwargs)
        self._dynacommit_partition = (hash_key,)
        try:
            return query(self, hash_key, *args, **kwargs)
        finally:
            del self._dynacommit_partition

    Table.all_items = all_items
    Table.query = partition_query


class _UndoRecord:
    """What a transaction may change in one table: the item at each key it names (a copy, or its absence,
    and whether the key's partition existed) and the table's stream records. Stands where moto keeps its
    copy of the table; :meth:`restore` puts the table back as that copy would have."""

    def __init__(self, table, keys: set) -> None:
        import copy

        self.table = table
        self.partitions = {}
        self.items = {}
        for hash_key, range_key in keys:
            partition = table.items.get(hash_key)
            if hash_key not in self.partitions:
                self.partitions[hash_key] = partition is not None
            item = partition if range_key is None else (partition or {}).get(range_key)
            self.items[hash_key, range_key] = copy.deepcopy(item)
        shard = table.stream_shard
        self.stream = None if shard is None else list(shard.items)

    def restore(self):
        table = self.table
        for (hash_key, range_key), item in self.items.items():
            if range_key is None:
                if item is None:
                    table.items.pop(hash_key, None)
                else:
                    table.items[hash_key] = item
            else:
                partition = table.items.get(hash_key)
                if item is not None:
                    table.items[hash_key][range_key] = item
                elif partition is not None:
                    partition.pop(range_key, None)
        for hash_key, existed in self.partitions.items():
            if not existed and not table.items.get(hash_key, True):
                del table.items[hash_key]  # an empty partition made by a lookup: moto's copy had none
        if self.stream is not None and table.stream_shard is not None:
            table.stream_shard.items = self.stream
        return table


def _named_keys(table, transact_items: list[dict], table_name: str) -> set | None:
    """The keys (hash, range) of ``table`` that ``transact_items`` name, as moto's writes read them; None
    when one of them cannot be read so (the table is then copied whole, as moto does)."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    keys = set()
    for item in transact_items:
        for op_type, op in item.items():
            if not isinstance(op, dict) or op.get("TableName") != table_name:
                continue
            key = op.get("Item") if op_type == "Put" else op.get("Key")
            try:
                hash_key = DynamoType(key[table.hash_key_attr])
                range_key = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
                hash(hash_key), hash(range_key)
            except Exception:  # moto fails such a write before it changes anything; copy whole all the same
                return None
            keys.add((hash_key, range_key))
    return keys


def undo_only_named_items() -> None:
    """Make moto's ``TransactWriteItems`` keep, for a cancellation to restore, the items at the keys the
    transaction names, not a deep copy of each table it touches.

    Stock moto deep-copies every table a transaction names before it applies the first item (a cost of the
    whole table's size, once per item of the transaction) and, on a cancellation, puts the copies in place
    of the tables. Here the "copy" is an undo record of the items at the named keys (a copy of each, or its
    absence) and of the table's stream records; where moto puts its copy back, the record restores those
    items into the table itself. Transactions run one at a time (:func:`serialize_dynamodb`), so nothing
    else changed the table meanwhile, and the table after a cancellation is the one moto's copy gives. Where
    moto does not restore (a request refused before any item), nothing is restored here either."""
    import copy

    import moto.dynamodb.models as models
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table

    records: dict[int, _UndoRecord | Table] | None = None

    def deepcopy(value, memo=None):
        if records is None or not isinstance(value, Table):
            return copy.deepcopy(value, memo)
        if id(value) not in records:  # a key not read as moto reads it: a whole copy, once per transaction
            records[id(value)] = copy.deepcopy(value, memo)
        return records[id(value)]

    models.copy = type(copy)("undo_only_named_items")
    models.copy.__dict__.update(vars(copy))
    models.copy.deepcopy = deepcopy
    transact = DynamoDBBackend.transact_write_items

    @functools.wraps(transact)
    def transact_write_items(self, transact_items):
        nonlocal records
        records = {}
        if isinstance(transact_items, list) and len(transact_items) <= 100:
            for name in {op.get("TableName") for item in transact_items if isinstance(item, dict)
                         for op in item.values() if isinstance(op, dict)}:
                table = self.tables.get(name) if isinstance(name, str) else None
                keys = None if table is None else _named_keys(table, transact_items, name)
                if keys is not None:
                    records[id(table)] = _UndoRecord(table, keys)
        try:
            return transact(self, transact_items)
        finally:
            records = None
            for name, table in list(self.tables.items()):
                if isinstance(table, _UndoRecord):  # where moto put its copy back
                    self.tables[name] = table.restore()

    DynamoDBBackend.transact_write_items = transact_write_items


def route_without_listing() -> None:
    """Make moto's server find which service a request is for without listing its own package directory.
    Stock moto's ``DomainDispatcherApplication.get_backend_for_host`` asks ``list_of_moto_modules``, which
    lists the directory of the ``moto`` package and stats each of its entries (about 180), at every request,
    S3 and DynamoDB alike; a server has no such cost. Here the list is read once, at start: the same names in
    the same order, so every request goes where it went."""
    import moto.backends as backends

    modules = tuple(backends.list_of_moto_modules())

    @functools.wraps(backends.list_of_moto_modules)
    def list_of_moto_modules():
        return iter(modules)

    backends.list_of_moto_modules = list_of_moto_modules


def method_names_once() -> None:
    """Make moto find the methods of a service's response class once per class, not at every request. Stock
    moto's ``BaseResponse.call_action`` asks ``method_names_from_class``, which runs ``inspect.getmembers``
    over the class (a few hundred attributes, sorted) to learn whether the action is one of its methods: about
    5% of the server's time for one client's GetItem and GetObject. The classes do not change while the server
    runs, so the names are the same."""
    import moto.core.responses as responses

    found: dict[type, frozenset[str]] = {}
    names_of = responses.method_names_from_class

    @functools.wraps(names_of)
    def method_names_from_class(clazz):
        names = found.get(clazz)
        if names is None:
            names = found[clazz] = frozenset(names_of(clazz))
        return names

    responses.method_names_from_class = method_names_from_class


def attribute_values_as_given() -> None:
    """Make moto's JSON response serializer write a DynamoDB ``AttributeValue`` (``{"S": ...}``, ``{"M": ...}``...)
    from the members the value holds, not by asking for each of the ten members of its shape.

    moto 5 serializes every answer by walking the service's response shapes; for each member of each
    ``AttributeValue`` of each attribute of each item it asks its attribute picker, which tries the member's
    name and its snake-case alias on the value: about 70 Python calls per attribute, so an answer costs moto
    in proportion to the attributes it holds (a Query returning 16 queued appends cost the server 19.3 ms of
    CPU with that walk, 8.0 ms without: ``tests/benchmarks/moto_item_cost --queue 16``). DynamoDB's cost of an
    answer is its bytes. Here a value that is a plain dict whose keys
    are all members of the shape (what moto's DynamoDB backend hands the serializer) is written member by
    member in the shape's order through the same per-type methods (strings, numbers, base64 of binary, the
    nested maps and lists), so the bytes are those of the walk; any other value, or a serializer with
    response transformers, takes moto's own walk."""
    from moto.core.serialize import BaseJSONSerializer

    structure = BaseJSONSerializer._serialize_type_structure

    @functools.wraps(structure)
    def serialize_type_structure(self, serialized, value, shape, key):
        if (shape.name != "AttributeValue" or type(value) is not dict
                or getattr(self._value_picker, "response_transformers", None)
                or not all(name in shape.members for name in value)):
            return structure(self, serialized, value, shape, key)
        wrapper = self.MAP_TYPE() if key else serialized
        for name, member in shape.members.items():
            if value.get(name) is not None:
                member.parent = shape
                self._serialize(wrapper, value[name], member, name)
        if key:
            self._default_serialize(serialized, wrapper, shape, key)

    BaseJSONSerializer._serialize_type_structure = serialize_type_structure


def serialize_dynamodb(profile: cProfile.Profile | None = None, *, stock: bool = False) -> None:
    """Run each public method of moto's DynamoDB backend under one process-wide lock (profiled by
    ``profile`` when given: one thread at a time holds the lock, so one profile serves them all), with the
    cost adjustments of this module unless ``stock``."""
    from moto.dynamodb.models import DynamoDBBackend

    if not stock:
        query_by_partition()
        undo_only_named_items()
        attribute_values_as_given()
    lock = threading.RLock()
    depth = threading.local()
    for name, method in list(vars(DynamoDBBackend).items()):
        if name.startswith("_") or not inspect.isfunction(method):
            continue

        def locked(*args, __method=method, **kwargs):
            with lock:
                if profile is None or getattr(depth, "n", 0):
                    return __method(*args, **kwargs)
                depth.n = 1
                profile.enable()
                try:
                    return __method(*args, **kwargs)
                finally:
                    profile.disable()
                    depth.n = 0

        setattr(DynamoDBBackend, name, functools.wraps(method)(locked))


def _request_kind(environ: dict) -> str:
    target = environ.get("HTTP_X_AMZ_TARGET")
    if target:
        kind = "dynamodb " + target.rsplit(".", 1)[-1]
        body = environ.get("dynacommit.body", b"")
        if b"dynacommit-group:" in body:
            kind += " (queue" + (", projected)" if b"ProjectionExpression" in body else ")")
        return kind
    path, query = environ.get("PATH_INFO", ""), environ.get("QUERY_STRING", "")
    kind = ("delete" if "delete" in query else "list" if "list-type" in query or path.count("/") <= 1
            else "_delta_log/.tmp" if "/.tmp/" in path else "_delta_log" if "/_delta_log/" in path else "data")
    return f"s3 {environ.get('REQUEST_METHOD')} {kind}"


def profile_requests(out: str, *, stock: bool = False) -> None:
    """CPU time of each request by kind (thread time of its handler), and a cProfile of the DynamoDB
    backend, written to ``out`` and ``out.pstats`` on SIGTERM."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    profile = cProfile.Profile()
    serialize_dynamodb(profile, stock=stock)
    totals: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    guard = threading.Lock()
    call = DomainDispatcherApplication.__call__

    def timed(self, environ, start_response):
        started = time.thread_time()
        if environ.get("HTTP_X_AMZ_TARGET"):
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length) if length else b""
            environ["wsgi.input"], environ["dynacommit.body"] = io.BytesIO(body), body
        try:
            return call(self, environ, start_response)
        finally:
            spent = time.thread_time() - started
            with guard:
                entry = totals[_request_kind(environ)]
                entry[0] += 1
                entry[1] += spent

    DomainDispatcherApplication.__call__ = timed

    def dump(*_) -> None:
        with open(out, "w") as f:
            for kind, (n, seconds) in sorted(totals.items(), key=lambda i: -i[1][1]):
                f.write(f"{kind}\t{n}\t{seconds * 1e3:.0f} ms\t{seconds / n * 1e3:.2f} ms each\n")
        profile.dump_stats(out + ".pstats")
        sys.exit(0)

    import moto.server

    moto.server.signal_handler = dump  # moto's main installs its own handler for SIGTERM: ours instead


def stock_switch() -> bool:
    """``DYNACOMMIT_MOTO_STOCK``: on (``1``, ``true``, ``on``) for moto's own server, Query, transaction, routing
    and serializer (a transaction then copies each table it names once per item, as moto does)."""
    value = os.environ.get("DYNACOMMIT_MOTO_STOCK", "").strip().lower()
    if value in ("", "0", "false", "off", "no"):
        return False
    if value in ("1", "true", "on", "yes"):
        return True
    raise SystemExit(f"DYNACOMMIT_MOTO_STOCK={value!r}: expected 1 (moto's own costs) or 0 (the adjusted ones)")


HANDLER_THREADS = 8
"""Threads that run requests (waitress's task pool; idle keep-alive connections hold none). At 16 writers x 20
appends on moto, one run each: 4 threads 35.7 appends/s, 8 threads 40.2, 16 threads 34.0 and 33.3, 32 threads
29.7 (BENCHMARKS.md, "The local stack's moto keeps connections open")."""


def keep_metadata_names() -> None:
    """Carry S3 user-metadata header names (``x-amz-meta-...``) as sent, both ways, as moto's own server does.

    waitress drops every request header with an underscore in its name (WSGI cannot tell ``X_Foo`` from
    ``X-Foo``), where S3 keeps metadata keys such as ``my_key``; such headers are passed to moto in the environ
    key it reads original names from (``moto.core.request.PRESERVED_HEADER_NAMES_ENVIRON_KEY``), as moto's
    werkzeug handler passes them. And waitress capitalizes each word of every answer's header names
    (``X-Amz-Meta-My_key``), where S3 and moto answer metadata names as stored (lower case), and clients
    take a metadata key from the header's name as it comes: those names are written as moto gave them."""
    from moto.core.request import PRESERVED_HEADER_NAMES_ENVIRON_KEY, environ_key_for_header
    from waitress.parser import HTTPRequestParser
    from waitress.task import Task, WSGITask

    parse_header = HTTPRequestParser.parse_header
    get_environment = WSGITask.get_environment
    build_response_header = Task.build_response_header

    @functools.wraps(parse_header)
    def parse_header_keeping_names(self, header_plus):
        parse_header(self, header_plus)
        kept: dict[str, tuple[str, list[str]]] = {}
        if b"x-amz-meta-" in header_plus.lower():
            for line in header_plus.split(b"\r\n")[1:]:
                name, sep, value = line.partition(b":")
                text = name.decode("latin-1")
                if sep and "_" in text and text.lower().startswith("x-amz-meta-"):
                    key = environ_key_for_header(text)
                    kept.setdefault(key, (text, []))[1].append(value.strip(b" \t").decode("latin-1"))
        self.dynacommit_kept_names = kept

    @functools.wraps(get_environment)
    def environment_keeping_names(self):
        environ = get_environment(self)
        kept = getattr(self.request, "dynacommit_kept_names", None)
        if kept:
            names = {}
            for key, (name, values) in kept.items():
                if key not in environ:  # never let an underscored header stand in for a dashed one
                    environ[key] = ",".join(values)
                    names[key] = name
            environ[PRESERVED_HEADER_NAMES_ENVIRON_KEY] = names
        return environ

    @functools.wraps(build_response_header)
    def response_header_keeping_names(self):
        given = {"-".join(part.capitalize() for part in name.split("-")): name
                 for name, _ in self.response_headers if name.lower().startswith("x-amz-meta-")}
        header = build_response_header(self)
        if not given:
            return header
        lines = header.split(b"\r\n")
        for i, line in enumerate(lines[1:], 1):
            name, sep, rest = line.partition(b": ")
            if sep and name.decode("latin-1") in given:
                lines[i] = given[name.decode("latin-1")].encode("latin-1") + sep + rest
        return b"\r\n".join(lines)

    HTTPRequestParser.parse_header = parse_header_keeping_names
    WSGITask.get_environment = environment_keeping_names
    Task.build_response_header = response_header_keeping_names


def serve(host: str, port: int) -> None:
    """moto's application behind waitress: connections kept open between requests (HTTP/1.1 keep-alive, as
    S3 and DynamoDB keep them) and a fixed pool of :data:`HANDLER_THREADS` threads.

    moto's own server is werkzeug's development server: it closes the connection after every answer
    (``Connection: close``) and starts a thread for each, so every request cost a TCP connection on both sides
    and a thread start, which waits for the interpreter lock behind every request in flight. One client's
    sequential GetObject cost the server 1.40-1.57 ms of CPU that way, 0.97-1.07 ms kept open; at 16 writers
    its answers waited 30-130 ms."""
    import signal

    import waitress
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    os.environ.setdefault("MOTO_PORT", str(port))
    keep_metadata_names()
    app = DomainDispatcherApplication(create_backend_app)
    app.debug = True  # type: ignore[attr-defined]  - as moto's main sets it
    import moto.server

    signal.signal(signal.SIGTERM, lambda *_: moto.server.signal_handler(*_))
    signal.signal(signal.SIGINT, lambda *_: moto.server.signal_handler(*_))
    # A request body up to S3's largest single PUT; bodies over 16 MB are spooled to a temporary file.
    waitress.serve(app, host=host, port=port, threads=HANDLER_THREADS, connection_limit=4096,
                   asyncore_use_poll=True, max_request_body_size=5 * 1024 ** 3, inbuf_overflow=16 * 1024 ** 2,
                   ident="dynacommit-moto", _quiet=True)


def main() -> None:
    stock = stock_switch()
    if not stock:
        route_without_listing()
        method_names_once()
    out = os.environ.get("DYNACOMMIT_MOTO_PROFILE")
    if out:
        profile_requests(out, stock=stock)
    else:
        serialize_dynamodb(stock=stock)
    if stock:
        from moto.server import main as moto_main

        moto_main()
        return
    import argparse

    parser = argparse.ArgumentParser(prog="python -m infra.moto_server")
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    args = parser.parse_args()
    serve(args.host, args.port)


if __name__ == "__main__":
    main()
