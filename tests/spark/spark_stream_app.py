"""A second Spark application for the streaming tests: stream a directory of JSON files into a table.

``python tests/spark/spark_stream_app.py SOURCE_DIR URI CHECKPOINT``; storage options come from the
environment. Prints one JSON line: the query's id (its application id in the table's txns).
"""

from __future__ import annotations

import json
import sys


def main(source: str, uri: str, checkpoint: str) -> None:
    from spark_integration import register
    from spark_integration.session import local_session

    spark = local_session(app_name="dynacommit-stream-app")
    try:
        register(spark)
        query = (spark.readStream.schema("id bigint, k int").option("maxFilesPerTrigger", 1).json(source)
                 .writeStream.format("dynacommit").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start(uri))
        query.awaitTermination()
        if query.exception() is not None:
            raise query.exception()
        print(json.dumps({"query_id": str(query.id)}), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
