{#- How the hooks reach Spark. dbt's `target` holds only the credentials' connection keys (no `method`),
    so the bridge reads dbt-spark's method from `adapter.config.credentials.method`, and runs SQL on the
    thread's connection through `adapter.execute` when there is no Spark session (thrift, http, odbc).
    A Spark Connect server for those methods: the var delta_optimize_spark_remote (sc://host:port), else
    $SPARK_REMOTE; it takes precedence over the SQL connection. Over SQL the table's log is read from
    the dbt host where it can be; the var delta_optimize_read_log: false decides from DESCRIBE DETAIL. -#}
{% macro _delta_optimize_spark_target() %}
  {{ return({'adapter': adapter, 'remote': var('delta_optimize_spark_remote', none),
             'read_log': var('delta_optimize_read_log', true)}) }}
{% endmacro %}
