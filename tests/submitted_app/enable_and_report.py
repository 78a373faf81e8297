"""A PySpark application that `spark-submit` starts (tests/test_enable_submitted.py): it turns its builder onto the
statestore provider with `enable()` and prints, as JSON, the confs its session ended up with."""

import json
import sys

from pyspark.sql import SparkSession

import spark_provider

KEYS = sys.argv[1:]

spark = spark_provider.enable(SparkSession.builder.appName("enable-submitted")).getOrCreate()
conf = spark.sparkContext.getConf()
print("CONFS " + json.dumps({key: conf.get(key, "") for key in KEYS}))
spark.stop()
